"""Refused calls summarised for the audit log, and the failed-login backoff
(lib/auth/refusals.py), on a fake clock."""
from __future__ import annotations

from lib.auth.refusals import LoginBackoff, RefusalLog, host_of


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_flood_becomes_one_entry_per_kind_and_window_with_a_count():
    clock = Clock()
    log = RefusalLog(window_s=60, max_keys=3, clock=clock)
    for _ in range(10_000):
        log.record("alice", "/tubeq.broker.Broker/Produce", "alice may not produce",
                   "ipv4:10.0.0.1:5000")
    log.record("", "/tubeq.admin.Admin/ListTopics", "no credentials", "ipv4:10.0.0.2:6000")
    assert log.drain() == []  # the window has not ended
    clock.now += 60
    out = sorted(log.drain(), key=lambda r: r.count)
    assert [(r.principal, r.method, r.peer, r.count) for r in out] == [
        ("", "ListTopics", "10.0.0.2", 1), ("alice", "Produce", "10.0.0.1", 10_000)]
    assert log.drain() == []  # one drain per window


def test_kinds_past_the_limit_fold_into_one_overflow_entry():
    clock = Clock()
    log = RefusalLog(window_s=1, max_keys=2, clock=clock)
    for i in range(50):
        log.record(f"user{i}", "Fetch", "denied", "ipv4:10.0.0.1:1")
    clock.now += 1
    out = log.drain()
    assert len(out) == 3 and out[-1].method == "*" and out[-1].count == 48
    assert "over 2 kinds" in out[-1].reason


def test_fields_are_clipped():
    clock = Clock()
    log = RefusalLog(window_s=1, clock=clock)
    log.record("x" * 5000, "M", "r" * 5000, "ipv4:1.2.3.4:5")
    clock.now += 1
    (entry,) = log.drain()
    assert len(entry.principal) == 200 and len(entry.reason) == 200


def test_peer_hosts():
    assert host_of("ipv4:127.0.0.1:5555") == "127.0.0.1"
    assert host_of("ipv6:[::1]:5555") == "[::1]"
    assert host_of("unix:/tmp/sock") == "/tmp/sock"
    assert host_of("") == ""


def test_failed_logins_past_the_free_ones_close_the_host_for_doubling_delays():
    clock = Clock()
    backoff = LoginBackoff(free=3, base_s=1, max_s=8, clock=clock)
    peer = "ipv4:10.0.0.9:4242"
    for _ in range(2):
        backoff.failed(peer)
        assert backoff.wait_s(peer) == 0
    delays = []
    for _ in range(6):
        backoff.failed(peer)
        delays.append(backoff.wait_s(peer))
    assert delays == [1, 2, 4, 8, 8, 8]
    assert backoff.wait_s("ipv4:10.0.0.10:4242") == 0  # another host is not affected
    assert backoff.wait_s("ipv4:10.0.0.9:9999") == 8  # another port of the same host is
    clock.now += 8
    assert backoff.wait_s(peer) == 0
    backoff.succeeded(peer)
    backoff.failed(peer)
    assert backoff.wait_s(peer) == 0  # a success starts over


def test_the_backoff_forgets_the_oldest_hosts_past_its_bound():
    backoff = LoginBackoff(free=1, max_hosts=100, clock=Clock())
    for i in range(1000):
        backoff.failed(f"ipv4:10.0.{i // 256}.{i % 256}:1")
    assert len(backoff._hosts) == 100
    assert backoff.wait_s("ipv4:10.0.3.231:1") > 0 and backoff.wait_s("ipv4:10.0.0.0:1") == 0
