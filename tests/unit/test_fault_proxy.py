"""load/faultproxy.py over real sockets on 127.0.0.1: each mode does what it says, to the
connections open when it is set as well as to new ones. The target is a bare listening socket
the test accepts from itself, so "no connection reached it" is an accept that times out."""
from __future__ import annotations

import socket
import threading

import pytest

from load.faultproxy import FaultProxy, Mode

DEADLINE_S = 10.0  # for what must happen: generous on a busy machine
QUIET_S = 0.5  # for what must not happen: a window, since absence cannot be waited for


@pytest.fixture
def socks():
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        sock.close()


@pytest.fixture
def target(socks):
    listener = socket.create_server(("127.0.0.1", 0))
    socks.append(listener)
    return listener


@pytest.fixture
def proxy(target):
    with FaultProxy(f"127.0.0.1:{target.getsockname()[1]}") as p:
        yield p


def dial(proxy: FaultProxy, socks: list[socket.socket]) -> socket.socket:
    host, _, port = proxy.address.rpartition(":")
    client = socket.create_connection((host, int(port)), timeout=DEADLINE_S)
    socks.append(client)
    return client


def arrived(target: socket.socket, socks: list[socket.socket],
            within: float = DEADLINE_S) -> socket.socket | None:
    """The target's end of the next connection the proxy dials, or None if none comes."""
    target.settimeout(within)
    try:
        server, _ = target.accept()
    except TimeoutError:
        return None
    server.settimeout(DEADLINE_S)
    socks.append(server)
    return server


def through(proxy, target, socks) -> tuple[socket.socket, socket.socket]:
    client = dial(proxy, socks)
    server = arrived(target, socks)
    assert server is not None, "the proxy did not dial the target"
    return client, server


def receive(sock: socket.socket, n: int) -> bytes:
    got = b""
    while len(got) < n:
        chunk = sock.recv(n - len(got))
        assert chunk, f"closed after {got!r}"
        got += chunk
    return got


def ended(sock: socket.socket) -> bool:
    """True once the peer closed or reset ``sock`` (within the deadline), past any bytes."""
    sock.settimeout(DEADLINE_S)
    try:
        while sock.recv(1 << 16):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    return True


def silent(sock: socket.socket) -> bool:
    """Neither a byte nor a close reaches ``sock`` during the quiet window."""
    sock.settimeout(QUIET_S)
    try:
        sock.recv(1)
    except TimeoutError:
        return True
    except ConnectionResetError:
        return False
    finally:
        sock.settimeout(DEADLINE_S)
    return False


def test_pass_forwards_bytes_both_ways_and_a_close(proxy, target, socks):
    client, server = through(proxy, target, socks)
    client.sendall(b"ping")
    assert receive(server, 4) == b"ping"
    server.sendall(b"pong")
    assert receive(client, 4) == b"pong"
    client.close()
    assert ended(server)


def test_reset_ends_open_connections_and_new_ones_until_it_passes_again(proxy, target, socks):
    client, server = through(proxy, target, socks)
    proxy.set_mode(Mode.RESET)
    assert ended(client) and ended(server)
    try:  # the port stays open: accepted, then reset, which can beat connect()'s return
        late = dial(proxy, socks)
    except ConnectionResetError:
        pass
    else:
        assert ended(late)
    assert arrived(target, socks, within=QUIET_S) is None
    proxy.set_mode(Mode.PASS)
    client, server = through(proxy, target, socks)
    client.sendall(b"again")
    assert receive(server, 5) == b"again"


def test_hold_delivers_nothing_then_everything_in_order_once_it_passes(proxy, target, socks):
    client, server = through(proxy, target, socks)
    other_client, other_server = through(proxy, target, socks)
    proxy.set_mode("hold")
    client.sendall(b"held-1")
    client.sendall(b"held-2")
    client.close()  # the close is held too
    other_server.sendall(b"back")
    late = dial(proxy, socks)
    assert silent(server) and silent(other_client)
    assert arrived(target, socks, within=QUIET_S) is None, "a held link reached the target"
    proxy.set_mode(Mode.PASS)
    assert receive(server, 12) == b"held-1held-2"
    assert ended(server)
    assert receive(other_client, 4) == b"back"
    late_server = arrived(target, socks)
    assert late_server is not None, "the connection opened during the hold was not dialled"
    late.sendall(b"late")
    assert receive(late_server, 4) == b"late"


def test_drop_swallows_bytes_and_closes_then_resets_what_lived_through_it(proxy, target, socks):
    client, server = through(proxy, target, socks)
    closing, closing_server = through(proxy, target, socks)
    proxy.set_mode(Mode.DROP)
    client.sendall(b"lost")
    server.sendall(b"lost too")
    closing.close()
    late = dial(proxy, socks)
    assert silent(server) and silent(client) and silent(closing_server)
    assert arrived(target, socks, within=QUIET_S) is None, "a dropped link reached the target"
    assert silent(late), "a connection opened in a drop was answered"
    proxy.set_mode(Mode.PASS)
    assert ended(client) and ended(server) and ended(closing_server) and ended(late)
    client, server = through(proxy, target, socks)
    server.sendall(b"fresh")
    assert receive(client, 5) == b"fresh"


def test_stop_ends_every_connection_and_thread_even_while_holding(target, socks):
    proxy = FaultProxy(f"127.0.0.1:{target.getsockname()[1]}")
    name = f"faultproxy-accept-{proxy.address}"
    client, server = through(proxy, target, socks)
    proxy.set_mode(Mode.HOLD)
    client.sendall(b"held")  # a pump holds it
    waiting = dial(proxy, socks)  # a connector waits for the hold to end
    proxy.stop()  # asserts that every thread of the proxy ended
    assert ended(client) and ended(server) and ended(waiting)
    assert name not in {t.name for t in threading.enumerate()}
    proxy.stop()  # twice is fine
