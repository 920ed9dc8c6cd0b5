"""Retry and dead-letter topics (lib/retry.py, lib/consumer/retry.py) against real masters and
brokers: a nacked record comes back through the group's retry topic after its backoff with
its failures counted, then lands in the dead-letter topic with where it came from and why;
a push handler's failures the same way; ordered retries hold the partition; and the errors
of a careless caller."""
from __future__ import annotations

import json
import threading
import time

import pytest

from lib import (
    AdminClient,
    Later,
    Producer,
    PullConsumer,
    PushConsumer,
    Record,
    RetryPolicy,
    TopicPartition,
    errors,
)
from lib.retry import H_ATTEMPTS, H_ERROR, H_OFFSET, H_PARTITION, H_TOPIC, origin_of
from lib.rpc import MasterClient
from tests.integration.test_cli import tubeq
from tests.integration.test_consumer_common import wait_for

pytestmark = pytest.mark.shared_cluster(brokers=1)
FAST = RetryPolicy(max_attempts=3, backoff_s=(0.3, 0.6))


def make_topic(masters: str, name: str, partitions: int = 2) -> None:
    with AdminClient(masters) as admin:
        try:
            admin.create_topic(name, partitions=partitions)
        except errors.TopicExists:
            pass


def produce(masters: str, topic: str, values: list[bytes], partitions: int = 2) -> None:
    with Producer(masters, linger_ms=1) as p:
        for i, v in enumerate(values):
            p.send(topic, v, partition=i % partitions)
        p.flush(30)


def read_all(masters: str, topic: str, partitions: int = 1, wait_s: float = 5.0) -> list[Record]:
    got = []
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    with PullConsumer(masters, isolation_level="read_committed", fetch_max_wait_ms=50) as c:
        c.assign(tps)
        c.seek_to_beginning(*tps)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            got += c.poll(timeout=0.2)
    return got


def test_a_nacked_record_is_retried_then_dead_lettered_with_its_story(cluster):
    masters = cluster.master_addresses
    make_topic(masters, "rt-pull")
    produce(masters, "rt-pull", [b"v%d" % i for i in range(10)])
    seen: dict[bytes, list[Record]] = {}
    with PullConsumer(masters, group="rt-pull-g", auto_offset_reset="earliest", retry=FAST,
                      enable_auto_commit=False, fetch_max_wait_ms=50) as c:
        c.subscribe(["rt-pull"])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(seen.get(b"v3", ())) < 3:
            for r in c.poll(timeout=0.2):
                seen.setdefault(r.value, []).append(r)
                if r.value == b"v3":
                    assert c.nack(r, error=ValueError("cannot parse v3")) == (
                        "rt-pull-g.dlq" if len(seen[b"v3"]) == 3 else "rt-pull-g.retry")
            c.commit()
    assert sorted(seen) == [b"v%d" % i for i in range(10)]
    assert all(len(v) == 1 for k, v in seen.items() if k != b"v3"), "only v3 comes back"
    first, second, third = seen[b"v3"]
    assert second.topic == third.topic == "rt-pull-g.retry"
    assert second.headers[H_ATTEMPTS] == b"1" and third.headers[H_ATTEMPTS] == b"2"
    assert origin_of(third) == ("rt-pull", first.partition, first.offset)
    assert third.timestamp - second.timestamp >= 600 - 50, "the second backoff is 0.6 s"
    dead = read_all(masters, "rt-pull-g.dlq")
    assert [r.value for r in dead] == [b"v3"]
    h = dead[0].headers
    assert (h[H_TOPIC], int(h[H_PARTITION]), int(h[H_OFFSET])) == \
        (b"rt-pull", first.partition, first.offset)
    assert h[H_ATTEMPTS] == b"3"
    assert h[H_ERROR] == b"ValueError: cannot parse v3"


@pytest.mark.parametrize("lost", ["answer", "request"])
def test_a_commit_whose_answer_is_lost_moves_nothing_twice(cluster, monkeypatch, lost):
    """The retry producer's EndTxn fails retriably once: its answer lost after the
    coordinator committed (a CI run on a busy machine once timed out waiting for the
    markers, and the moves were re-sent: 1,921 dead letters for 1,000 records), or its
    request lost before (the transaction is still open). The next commit settles it: every
    record is dead-lettered exactly once and the offsets past them are committed."""
    masters = cluster.master_addresses
    topic, group = f"rt-lost-{lost}", f"rt-lost-{lost}-g"
    make_topic(masters, topic, partitions=1)
    produce(masters, topic, [b"l%d" % i for i in range(6)], partitions=1)
    real_call, injected = MasterClient.call, []

    def losing_call(self, stub_factory, method, request, *args, **kwargs):
        if method == "EndTxn" and request.commit and not injected:
            injected.append(method)
            if lost == "answer":
                real_call(self, stub_factory, method, request, *args, **kwargs)
            raise errors.RequestTimedOut(f"injected: the EndTxn {lost} was lost")
        return real_call(self, stub_factory, method, request, *args, **kwargs)

    with PullConsumer(masters, group=group, auto_offset_reset="earliest",
                      retry=RetryPolicy(max_attempts=1), enable_auto_commit=False,
                      fetch_max_wait_ms=50) as c:
        c.subscribe([topic])
        records = []
        wait_for(lambda: records.extend(c.poll(timeout=0.2)) or len(records) >= 6, 30,
                 "six records")
        for r in records[1::2]:
            assert c.nack(r, error="odd one") == f"{group}.dlq"
        monkeypatch.setattr(MasterClient, "call", losing_call)
        with pytest.raises(errors.RequestTimedOut, match="injected"):
            c.commit()
        assert injected, "the commit's EndTxn went through the injected call"
        c.commit()  # settles the one in doubt
        assert c.dead_lettered == 3
    monkeypatch.setattr(MasterClient, "call", real_call)
    dead = read_all(masters, f"{group}.dlq", wait_s=2)
    assert sorted(r.value for r in dead) == [b"l1", b"l3", b"l5"], "each moved once"
    with PullConsumer(masters, group=group, auto_offset_reset="earliest",
                      fetch_max_wait_ms=50) as again:
        again.subscribe([topic])
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            assert not again.poll(timeout=0.2), "the offsets past them were committed"


def test_push_handler_failures_are_retried_and_dead_lettered_none_lost(cluster):
    masters = cluster.master_addresses
    make_topic(masters, "rt-push")
    values = [b"p%02d" % i for i in range(40)]
    produce(masters, "rt-push", values)
    lock = threading.Lock()
    handled: list[bytes] = []
    tries: dict[bytes, int] = {}

    def handler(r: Record):
        with lock:
            tries[r.value] = tries.get(r.value, 0) + 1
            n = tries[r.value]
        if r.value in (b"p07", b"p21"):
            raise RuntimeError(f"always fails: {r.value!r}")
        if r.value == b"p13" and n == 1:
            return Later(0.2)  # once, then taken
        with lock:
            handled.append(r.value)
        return None

    c = PushConsumer(masters, group="rt-push-g", auto_offset_reset="earliest", retry=FAST,
                     auto_commit_interval_ms=100)
    try:
        c.subscribe(["rt-push"], handler=handler)
        wait_for(lambda: len(read_all(masters, "rt-push-g.dlq", wait_s=0.5)) >= 2, 60,
                 "two records dead-lettered")
        wait_for(lambda: len(handled) >= 38, 30, "the others handled")
    finally:
        c.close()
    assert sorted(handled) == sorted(v for v in values if v not in (b"p07", b"p21"))
    assert tries[b"p07"] == tries[b"p21"] == 3 and tries[b"p13"] == 2
    dead = read_all(masters, "rt-push-g.dlq", wait_s=1)
    assert sorted(r.value for r in dead) == [b"p07", b"p21"]
    assert all(r.headers[H_ERROR].startswith(b"RuntimeError: always fails") for r in dead)
    assert c.dead_lettered == 2 and c.retried == 5  # p07, p21 twice each; p13 once


def test_ordered_retries_hold_the_partition(cluster):
    masters = cluster.master_addresses
    make_topic(masters, "rt-ord", partitions=1)
    produce(masters, "rt-ord", [b"o%d" % i for i in range(6)], partitions=1)
    lock = threading.Lock()
    order: list[bytes] = []
    failed = {b"o2": 0}

    def handler(r: Record):
        if r.value == b"o2" and failed[b"o2"] < 2:
            failed[b"o2"] += 1
            raise RuntimeError("not yet")
        with lock:
            order.append(r.value)

    c = PushConsumer(masters, group="rt-ord-g", auto_offset_reset="earliest",
                     retry=RetryPolicy(max_attempts=5, backoff_s=(0.2,), ordered=True))
    try:
        c.subscribe(["rt-ord"], handler=handler)
        wait_for(lambda: len(order) >= 6, 30, "all six handled")
    finally:
        c.close()
    assert order == [b"o%d" % i for i in range(6)], "in offset order: o2 held the partition"
    assert c.retried == 0 and c.dead_lettered == 0


def test_bad_input_is_refused_with_a_clear_error(cluster):
    masters = cluster.master_addresses
    make_topic(masters, "rt-bad")
    make_topic(masters, "taken-name", partitions=1)
    produce(masters, "rt-bad", [b"x", b"y"])
    with PullConsumer(masters, group="rt-bad-g", auto_offset_reset="earliest") as c:
        c.subscribe(["rt-bad"])
        records = wait_for(lambda: c.poll(timeout=0.2), 30, "records")
        with pytest.raises(errors.InvalidArgument, match="nack needs retries"):
            c.nack(records[0])
    with PullConsumer(masters, group="rt-bad-g2", auto_offset_reset="earliest",
                      retry=True) as c:
        c.subscribe(["rt-bad"])
        records = wait_for(lambda: c.poll(timeout=0.2), 30, "records")
        with pytest.raises(errors.InvalidArgument, match="delay must be seconds >= 0"):
            c.nack(records[0], delay=-1)
        stranger = records[0]._replace(partition=7)
        with pytest.raises(errors.Fenced, match="no longer assigned to this consumer"):
            c.nack(stranger)
    taken = PushConsumer(masters, group="rt-bad-g3",
                         retry=RetryPolicy(dead_letter_topic="taken-name"))
    try:
        with pytest.raises(errors.InvalidArgument, match="'taken-name' of group 'rt-bad-g3' "
                           "is already a topic of its own"):
            taken.subscribe(["rt-bad"], handler=print)
    finally:
        taken.close()
    for bad, match in (({"max_attempts": 0}, "max_attempts must be within"),
                       ({"backoff_s": ()}, "backoff_s must be")):
        with pytest.raises(errors.InvalidArgument, match=match):
            PullConsumer(masters, group="g", retry=RetryPolicy(**bad))
    with pytest.raises(errors.InvalidArgument, match="retry needs commit='after'"):
        PushConsumer(masters, group="g", retry=True, commit="before")


def test_the_cli_lists_shows_replays_and_purges_dead_letters(cluster):
    masters = cluster.master_addresses
    make_topic(masters, "rt-cli", partitions=1)
    make_topic(masters, "rt-cli-out", partitions=1)
    produce(masters, "rt-cli", [b"c0", b"c1"], partitions=1)
    with PullConsumer(masters, group="rt-cli-g", auto_offset_reset="earliest",
                      retry=RetryPolicy(max_attempts=1)) as c:
        c.subscribe(["rt-cli"])
        got = []
        wait_for(lambda: got.extend(c.poll(timeout=0.2)) or len(got) >= 2, 30, "records")
        for r in got:
            c.nack(r, error="unusable")
        c.commit()

    def cli(*args: str) -> str:
        done = tubeq(masters, "dlq", *args)
        out = (done.stdout + done.stderr).decode()
        assert done.returncode == 0, out
        return out

    listed = json.loads(cli("list", "--json"))
    assert {"group": "rt-cli-g", "topic": "rt-cli-g.dlq", "records": 2} in listed
    shown = json.loads(cli("show", "rt-cli-g", "--json"))
    assert [(d["value"], d["origin_topic"], d["origin_offset"], d["error"]) for d in shown] == \
        [("c0", "rt-cli", 0, "unusable"), ("c1", "rt-cli", 1, "unusable")]
    assert "rt-cli[0]@1" in cli("show", "rt-cli-g")
    assert "replayed 2 dead letters of rt-cli-g" in cli("replay", "rt-cli-g", "--to",
                                                         "rt-cli-out", "--yes")
    assert "purged 2 dead letters of rt-cli-g" in cli("purge", "rt-cli-g", "--yes")
    listed = json.loads(cli("list", "--json"))
    assert {"group": "rt-cli-g", "topic": "rt-cli-g.dlq", "records": 0} in listed
    with AdminClient(masters) as admin:
        actions = [e.action for e in admin.audit_log(30) if e.target == "rt-cli-g"]
        assert "dlq_replay" in actions and "dlq_purge" in actions
        assert admin.describe_topic("rt-cli-out").partitions[0].latest == 2
    missing = tubeq(masters, "dlq", "show", "rt-no-such-group")
    assert missing.returncode == 1
    assert "has no dead-letter topic" in (missing.stdout + missing.stderr).decode()
