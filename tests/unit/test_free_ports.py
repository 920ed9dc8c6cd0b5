"""lib.process.free_ports: ports a server is about to bind, kept out of the kernel's ephemeral
range so an outgoing connection's source port cannot take one first."""
from __future__ import annotations

import socket

from lib.process import PORT_FLOOR, ephemeral_range_start, free_ports


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range():
    ports = free_ports(6)
    assert len(set(ports)) == 6
    low = ephemeral_range_start()
    if low - PORT_FLOOR >= 600:
        assert all(PORT_FLOOR <= p < low for p in ports), (ports, low)
    for p in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_a_port_in_use_is_never_handed_out():
    held = []
    try:
        for p in free_ports(20):
            s = socket.socket()
            s.bind(("127.0.0.1", p))
            held.append(s)
        taken = {s.getsockname()[1] for s in held}
        assert not taken & set(free_ports(20))
    finally:
        for s in held:
            s.close()
