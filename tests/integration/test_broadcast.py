"""Broadcast consumption with real processes (docs/broadcast.md): three instances of one group
(two push consumers, one pull consumer) each receive every one of 10,000 records; one of them
is SIGKILLed mid-stream and started again under its instance_id, and goes on from its own
committed offsets: nothing lost, not read again from the start. ``group describe`` (the
admin API and the ``tubeq`` command) shows each instance's lag; a second live process with
the same instance id, and a clustering consumer in the broadcast group, are refused."""
from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lib import AdminClient, Producer, PullConsumer, TopicPartition
from lib.errors import (
    GroupModeConflict,
    GroupNotEmpty,
    InstanceInUse,
    InvalidArgument,
    InvalidName,
    Unavailable,
)
from tests.cluster import ROOT
from tests.integration.test_consumer_common import poll_until, wait_for

TOPIC, GROUP, PARTITIONS, RECORDS = "bcast-in", "bcast-readers", 4, 10_000
WANT = {(p, o) for p in range(PARTITIONS) for o in range(RECORDS // PARTITIONS)}


class Instance:
    """One ``tests.integration.broadcast_worker`` process, stopped by its PID."""

    def __init__(self, masters: str, instance: str, kind: str, out: Path) -> None:
        self.out = out
        self.log = out.with_suffix(".log").open("a")
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.broadcast_worker", masters, TOPIC, GROUP,
             instance, kind, str(out)],
            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)

    def received(self) -> list[tuple[int, int]]:
        if not self.out.exists():
            return []
        return [tuple(map(int, line.split())) for line in self.out.read_text().splitlines()]

    def stop(self, kill: bool = False) -> None:
        if self.popen.poll() is None:
            (self.popen.kill if kill else self.popen.terminate)()
        self.popen.wait(20)
        self.log.close()


def feed(masters: str) -> None:
    """10,000 records, 2,500 per partition, in slices over about 10 s."""
    with Producer(masters) as producer:
        for n in range(20):
            for i in range(n * 500, (n + 1) * 500):
                producer.send(TOPIC, b"r%d" % i, partition=i % PARTITIONS)
            producer.flush(60)
            time.sleep(0.5)  # pacing the input, not waiting for a result


def instance_rows(admin: AdminClient, instance: str) -> dict[int, int]:
    """partition -> committed offset of one instance, as group describe shows it."""
    return {p.partition: p.committed for p in admin.describe_group(GROUP).partitions
            if p.instance_id == instance and p.topic == TOPIC}


@pytest.mark.shared_cluster(brokers=2)
def test_every_instance_receives_everything_and_a_killed_one_goes_on_where_it_stopped(
        cluster, tmp_path):
    masters = cluster.master_addresses
    admin = AdminClient(masters)
    admin.create_topic(TOPIC, partitions=PARTITIONS)
    wait_for(lambda: all(p.available and p.latest >= 0
                         for p in admin.describe_topic(TOPIC).partitions), 20,
             "the partitions to be hosted")
    kinds = {"i-push-a": "push", "i-pull": "pull", "i-push-b": "push"}
    runs = {name: Instance(masters, name, kind, tmp_path / f"{name}.0") for name, kind
            in kinds.items()}
    restarted: Instance | None = None
    feeder = threading.Thread(target=feed, args=(masters,), daemon=True)
    try:
        wait_for(lambda: len(admin.describe_group(GROUP).members) == 3, 30,
                 "three live instances")
        feeder.start()
        victim = runs["i-push-b"]
        wait_for(lambda: len(victim.received()) >= 3000, 60, "the victim to be mid-stream")
        victim.stop(kill=True)
        before = victim.received()
        committed = instance_rows(admin, "i-push-b")
        assert set(committed) == set(range(PARTITIONS)), committed
        assert 0 < sum(max(0, c) for c in committed.values()) < RECORDS, committed

        restarted = Instance(masters, "i-push-b", "push", tmp_path / "i-push-b.1")
        feeder.join(120)
        wait_for(lambda: all(set(r.received()) == WANT for n, r in runs.items()
                             if n != "i-push-b"), 90, "the others to receive everything")
        wait_for(lambda: set(before) | set(restarted.received()) == WANT, 90,
                 "the restarted instance to receive the rest")

        after = restarted.received()
        for p in range(PARTITIONS):  # it went on from its own commits, not from the start
            first = min(o for q, o in after if q == p)
            assert first == committed[p], (p, first, committed)
        for name in ("i-push-a", "i-pull"):
            got = runs[name].received()
            assert len(got) == RECORDS and set(got) == WANT, name

        _describe_shows_each_instance(admin, masters)
        _duplicates_and_mixed_modes_are_refused(masters)
    finally:
        for r in [*runs.values(), *([restarted] if restarted else [])]:
            r.stop()
        admin.close()


def _describe_shows_each_instance(admin: AdminClient, masters: str) -> None:
    done = {name: dict.fromkeys(range(PARTITIONS), RECORDS // PARTITIONS)
            for name in ("i-push-a", "i-pull", "i-push-b")}
    wait_for(lambda: all(instance_rows(admin, n) == want for n, want in done.items()), 30,
             "every instance's commits to reach the end")
    info = admin.describe_group(GROUP)
    assert info.mode == "broadcast"
    assert sorted(m.instance_id for m in info.members) == sorted(done)
    assert all(m.assignments == {TOPIC: list(range(PARTITIONS))} for m in info.members)
    assert {p.instance_id for p in info.partitions} == set(done)  # no group-level rows
    assert all(p.lag == 0 and p.member_id for p in info.partitions)

    cli = subprocess.run([sys.executable, "-m", "lib.cli", "--masters", masters, "group",
                          "describe", GROUP], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert cli.returncode == 0, cli.stderr
    assert "mode broadcast" in cli.stdout and "INSTANCE_ID" in cli.stdout
    assert sum(line.startswith("i-pull ") for line in cli.stdout.splitlines()) == PARTITIONS


def _duplicates_and_mixed_modes_are_refused(masters: str) -> None:
    with pytest.raises(GroupModeConflict, match="broadcast mode"):
        with PullConsumer(masters, group=GROUP) as clustering:
            clustering.subscribe([TOPIC])
    started = time.monotonic()
    with pytest.raises(InstanceInUse, match="already has a live instance 'i-pull'"):
        with PullConsumer(masters, group=GROUP, mode="broadcast", instance_id="i-pull",
                          session_timeout_ms=3000) as twin:
            twin.subscribe([TOPIC])
    # it waited for the holder's session (3 s) in case the holder had died, no longer
    assert time.monotonic() - started < 15


@pytest.mark.shared_cluster(brokers=2)
def test_each_instance_has_its_own_reset_policy_seek_and_commits(cluster):
    masters = cluster.master_addresses
    topic, group = "bcast-seek", "bcast-seekers"
    with AdminClient(masters) as admin:
        admin.create_topic(topic, partitions=1)
        wait_for(lambda: all(p.available and p.latest >= 0
                             for p in admin.describe_topic(topic).partitions), 20,
                 "the partition to be hosted")
    tp = TopicPartition(topic, 0)
    with Producer(masters) as producer:
        for i in range(10):
            producer.send(topic, b"s%d" % i, partition=0)
        producer.flush()
    base = {"group": group, "mode": "broadcast", "enable_auto_commit": False}
    with PullConsumer(masters, instance_id="a", auto_offset_reset="earliest", **base) as a, \
            PullConsumer(masters, instance_id="b", **base) as b:  # "latest"
        a.subscribe([topic])
        b.subscribe([topic])
        assert [r.offset for r in poll_until(a, 10)] == list(range(10))
        wait_for(lambda: _position(b, tp) is not None, 10, "b's start position")
        assert b.position(tp) == 10 and b.poll(timeout=0.3) == []
        a.seek(tp, 4)
        assert [r.offset for r in poll_until(a, 6)] == list(range(4, 10))
        a.commit({tp: 7})
        b.commit({tp: 2})
        assert (a.committed(tp), b.committed(tp)) == (7, 2)
    with PullConsumer(masters, instance_id="a", **base) as again:  # goes on from its commit
        again.subscribe([topic])
        assert [r.offset for r in poll_until(again, 3)] == [7, 8, 9]
    with AdminClient(masters) as admin:
        rows = {(p.instance_id, p.partition): (p.committed, p.lag)
                for p in admin.describe_group(group).partitions}
    assert rows == {("a", 0): (7, 3), ("b", 0): (2, 8)}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "lib.cli", "--masters", masters,
                               "consume", topic, "--group", group, *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)

    printed = cli("--broadcast", "--instance-id", "c", "--from-beginning", "--max", "10",
                  "--print-offset")
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.splitlines() == [f"0:{i}\ts{i}" for i in range(10)]
    with AdminClient(masters) as admin:
        assert {p.instance_id: p.committed for p in admin.describe_group(group).partitions
                }["c"] == 10
    refused = cli("--instance-id", "c", "--max", "1")
    assert refused.returncode != 0 and "only for mode='broadcast'" in refused.stderr
    _an_instance_is_reset_alone_and_only_while_stopped(masters, topic, group, base)


def _an_instance_is_reset_alone_and_only_while_stopped(masters: str, topic: str, group: str,
                                                       base: dict) -> None:
    tp = TopicPartition(topic, 0)
    with AdminClient(masters) as admin, \
            PullConsumer(masters, instance_id="a", **base) as live:
        live.subscribe([topic])
        wait_for(lambda: any(m.instance_id == "a" for m in admin.describe_group(group).members),
                 10, "instance a to be live")
        with pytest.raises(GroupNotEmpty, match="instance 'a' of group 'bcast-seekers' is live"):
            admin.reset_group_offsets(group, topic, to_earliest=True, instance_id="a")
        with pytest.raises(InvalidName, match="invalid instance id"):
            admin.reset_group_offsets(group, topic, to_earliest=True, instance_id="b/../a")
        preview = admin.reset_group_offsets(group, topic, to_offset=5, instance_id="b",
                                            dry_run=True)
        assert [(m.from_offset, m.to_offset) for m in preview.moves] == [(2, 5)]
        admin.reset_group_offsets(group, topic, to_offset=5, instance_id="b")  # a stays live
        rows = {p.instance_id: p.committed for p in admin.describe_group(group).partitions}
        assert rows == {"a": 7, "b": 5, "c": 10}
    with PullConsumer(masters, instance_id="b", **base) as b:
        b.subscribe([topic])
        assert [r.offset for r in poll_until(b, 5)] == [5, 6, 7, 8, 9]
        assert b.committed(tp) == 5


def _position(consumer: PullConsumer, tp: TopicPartition) -> int | None:
    """The position once the consumer has one (its assignment is taken in the background)."""
    try:
        return consumer.position(tp)
    except (InvalidArgument, Unavailable):  # not assigned yet / no start position yet
        return None
