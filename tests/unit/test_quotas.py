"""Quota entries, rate parsing and the token buckets brokers enforce them with (a fake clock:
the arithmetic, not the timing, is under test here; tests/integration/test_quotas.py measures
real rates)."""
from __future__ import annotations

import pytest

from lib.auth.quotas import Bucket, Quota, QuotaBook, from_pb, human_rate, parse_rate, to_pb
from lib.errors import InvalidArgument, QuotaExceeded

MiB = 1 << 20


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("text,rate", [("1048576", MiB), ("512KiB", 512 << 10), ("1MB", 10**6),
                                       ("2.5 MiB/s", int(2.5 * MiB)), ("0", 0), ("none", 0),
                                       ("10m", 10**7)])
def test_rates_parse(text, rate):
    assert parse_rate(text) == rate


@pytest.mark.parametrize("text", ["", "fast", "1XB", "-5", "1e6"])
def test_bad_rates_say_what_a_rate_looks_like(text):
    with pytest.raises(InvalidArgument, match="bytes per second"):
        parse_rate(text)


def test_human_rate():
    assert human_rate(MiB) == "1 MiB/s"
    assert human_rate(3 << 19) == "1536 KiB/s"
    assert human_rate(1536) == "1536 B/s"
    assert human_rate(1000) == "1000 B/s"


@pytest.mark.parametrize("entity", ["user:alice", "user:*", "group:g1", "group:*"])
def test_entities(entity):
    quota = Quota(entity, 0, MiB)
    assert from_pb(to_pb(quota)) == quota


@pytest.mark.parametrize("kwargs,message", [
    ({"entity": "alice", "consume_bytes_per_s": MiB}, "user:<name>"),
    ({"entity": "role:x", "consume_bytes_per_s": MiB}, "user:<name>"),
    ({"entity": "user:bad name", "consume_bytes_per_s": MiB}, "user"),
    ({"entity": "user:a"}, "limits nothing"),
    ({"entity": "user:a", "produce_bytes_per_s": 10}, "1024 to"),
    ({"entity": "user:a", "produce_bytes_per_s": 1 << 50}, "1024 to"),
    ({"entity": "group:g", "produce_bytes_per_s": MiB}, "consume only"),
])
def test_bad_quotas_name_the_problem(kwargs, message):
    with pytest.raises(InvalidArgument, match=message):
        Quota(**kwargs)


def test_a_bucket_allows_its_burst_then_charges_debt_paid_back_over_time():
    bucket = Bucket(MiB, 1.0, now=0.0)
    assert bucket.charge(MiB, 0.0) == 0.0  # the burst: one second's worth
    assert bucket.charge(MiB // 2, 0.0) == pytest.approx(0.5)
    assert bucket.debt_s(0.25) == pytest.approx(0.25)  # paid back at the rate
    assert bucket.debt_s(10.0) == 0.0
    assert bucket.tokens == MiB  # refills up to the burst, no further


def test_over_a_long_run_the_bucket_admits_the_rate_plus_one_burst():
    """A client that waits what each charge says gets exactly the rate."""
    bucket, now, sent = Bucket(MiB, 1.0, now=0.0), 0.0, 0
    while now < 20.0:
        now += bucket.charge(64 << 10, now)
        sent += 64 << 10
    assert sent / now == pytest.approx(MiB * (20 + 1) / 20, rel=0.01)


def test_the_book_charges_the_principal_and_the_group_and_the_longer_wait_wins():
    clock = Clock()
    book = QuotaBook(burst_s=1.0, hard_limit_s=30, clock=clock)
    assert not book.active and book.charge("consume", "alice", "g", MiB) == 0
    book.replace([Quota("user:alice", MiB, 2 * MiB), Quota("group:g", 0, MiB)], version=3)
    assert book.active and book.version == 3
    assert book.charge("consume", "alice", "g", 2 * MiB) == 1000  # the group's 1 MiB/s
    assert book.charge("consume", "alice", "", MiB) == 500  # alice's own: 2 MiB/s
    assert book.charge("produce", "alice", "", MiB) == 0
    assert book.charge("produce", "alice", "", MiB) == 1000
    assert book.charge("produce", "bob", "", 100 * MiB) == 0  # no quota for bob


def test_a_default_quota_applies_to_each_principal_separately_and_a_named_one_wins():
    clock = Clock()
    book = QuotaBook(burst_s=1.0, hard_limit_s=30, clock=clock)
    book.replace([Quota("user:*", MiB, 0), Quota("user:etl", 4 * MiB, 0)], version=1)
    assert book.charge("produce", "alice", "", 2 * MiB) == 1000
    assert book.charge("produce", "bob", "", 2 * MiB) == 1000  # its own bucket
    assert book.charge("produce", "etl", "", 8 * MiB) == 1000  # 4 MiB/s, 4 MiB burst
    assert book.charge("produce", "", "", 100 * MiB) == 0  # brokers and masters: no quota


def test_past_the_hard_limit_calls_are_refused_naming_the_quota_until_the_debt_shrinks():
    clock = Clock()
    book = QuotaBook(burst_s=1.0, hard_limit_s=5, clock=clock)
    book.replace([Quota("user:*", MiB, 0)], version=1)
    book.admit("produce", "alice")
    assert book.charge("produce", "alice", "", 8 * MiB) == 7000  # served whole, then throttled
    with pytest.raises(QuotaExceeded, match=r"produce quota of user:\* \(1 MiB/s\)") as err:
        book.admit("produce", "alice")
    assert err.value.retriable
    assert err.value.details["retry_after_ms"] == 2001
    assert err.value.details["quota"] == "user:*"
    book.admit("produce", "bob")  # others are not affected
    clock.now += 2.01
    book.admit("produce", "alice")


def test_replacing_the_quotas_starts_from_full_buckets():
    clock = Clock()
    book = QuotaBook(burst_s=1.0, hard_limit_s=30, clock=clock)
    book.replace([Quota("user:a", MiB, 0)], version=1)
    assert book.charge("produce", "a", "", 3 * MiB) == 2000
    book.replace([Quota("user:a", 2 * MiB, 0)], version=2)
    assert book.charge("produce", "a", "", 3 * MiB) == 500
    book.replace([], version=3)
    assert not book.active
