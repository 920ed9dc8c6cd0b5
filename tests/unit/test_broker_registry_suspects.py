"""Faster failover: the master suspects a broker its followers cannot reach and that has
stopped heartbeating, before broker_timeout_ms declares it dead."""
from __future__ import annotations

from master.brokers import BrokerRegistry


def registry(now: list[int]) -> BrokerRegistry:
    reg = BrokerRegistry(timeout_ms=6000, clock=lambda: now[0], wall=lambda: 0)
    for b in (1, 2, 3):
        reg.register(b, f"127.0.0.1:{9000 + b}")
    return reg


def test_a_silent_broker_its_followers_cannot_reach_is_suspected():
    now = [0]
    reg = registry(now)
    now[0] = 1000
    reg.heartbeat(2, [], unreachable=[1])
    reg.heartbeat(3, [])
    assert reg.suspects(1500) == set(), "1 heartbeated 1 s ago: not silent long enough"
    now[0] = 1600
    assert reg.suspects(1500) == {1}
    assert reg.alive_ids() == [1, 2, 3], "still alive for everything else until the timeout"
    reg.heartbeat(2, [])  # its fetches work again
    assert reg.suspects(1500) == set()


def test_a_broker_that_still_heartbeats_is_not_suspected_nor_one_nobody_reports():
    now = [0]
    reg = registry(now)
    now[0] = 5000
    reg.heartbeat(1, [])  # cut off from its followers, not from the master
    reg.heartbeat(2, [], unreachable=[1, 2])  # a broker never suspects itself
    assert reg.suspects(1500) == set()
    assert 3 not in reg.suspects(1500), "silent, but nobody says it cannot be reached"
    now[0] = 12_000  # the reporter itself is dead now: its word no longer counts
    reg.heartbeat(3, [])
    assert reg.suspects(1500) == set()
