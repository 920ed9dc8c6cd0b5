"""Reassignment on real broker processes: replicas move between brokers under load (a
leadership moving too), a drained broker ends up holding nothing, the replication factor goes
up and down; no acknowledged message is lost (acks=1 included: a leader handing over holds
its writes until the new one has them), consumers need no restart, and a broker that lost a
replica deletes its copy. Bounded: a few seconds of load per test."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from lib.admin import AdminClient
from lib.consumer.pull import PullConsumer
from lib.errors import TubeqError
from lib.producer.producer import Producer
from lib.types import TopicInfo, TopicPartition
from tests.integration.fault_kit import (
    FAST_FAILOVER,
    REPLICA_LAG_MAX_MS,
    NumberedWriter,
    wait_until,
)
from tests.integration.test_cli import tubeq

TOPIC = "moves"


@pytest.fixture
def cluster(replicated_cluster):
    return replicated_cluster(3, master_settings=FAST_FAILOVER,
                              replica_lag_max_ms=REPLICA_LAG_MAX_MS)


def make_writer(masters: str) -> NumberedWriter:
    """acks=1 on purpose: a leadership handed over by a reassignment loses nothing even so."""
    return NumberedWriter(masters, TOPIC, partitions=2, acks="1", idempotent=True,
                          retry_backoff_ms=50)


class Reader(threading.Thread):
    """A group consumer of the topic, started once: what it read, per partition in order."""

    def __init__(self, masters: str) -> None:
        super().__init__(daemon=True)
        self.masters, self.stop = masters, threading.Event()
        self.read: dict[int, list[tuple[int, bytes]]] = {}

    def run(self) -> None:
        with PullConsumer(self.masters, group="readers", auto_offset_reset="earliest") as c:
            c.subscribe([TOPIC])
            while not self.stop.is_set():
                try:
                    for r in c.poll(timeout=0.2):
                        self.read.setdefault(r.partition, []).append((r.offset, r.value))
                except TubeqError:
                    time.sleep(0.1)

    def values(self) -> set[int]:
        return {int(v[1:]) for rows in list(self.read.values()) for _, v in rows}




def settled(admin: AdminClient) -> TopicInfo:
    """The topic once no reassignment is in progress and every replica is in sync."""
    info: list[TopicInfo] = []

    def done() -> bool:
        info[:] = [admin.describe_topic(TOPIC)]
        return all(not p.target_replicas and sorted(p.isr) == sorted(p.replicas)
                   for p in info[0].partitions)

    wait_until(done, "the reassignments to end")
    return info[0]


def copy_dir(cluster, broker: int, info: TopicInfo, p: int) -> Path:
    return cluster.brokers[broker].data_dir / "topics" / TOPIC / str(p % info.stores) / f"p{p}"


def check_everything_read(cluster, writer: NumberedWriter, reader: Reader, partitions: int) -> None:
    """Every acknowledged message was read by the group, each partition's offsets are dense
    from 0, and a fresh read of each partition from the beginning gives the same records."""
    acked = set(writer.acked)
    wait_until(lambda: acked <= reader.values(), "the group to read every acknowledged "
               "message", timeout=60)
    reader.stop.set()
    reader.join(10)
    with PullConsumer(cluster.master_addresses, auto_offset_reset="earliest") as c:
        tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        log: dict[int, list[tuple[int, bytes]]] = {}
        deadline = time.monotonic() + 30
        while sum(map(len, log.values())) < len(acked) and time.monotonic() < deadline:
            for r in c.poll(timeout=0.5):
                log.setdefault(r.partition, []).append((r.offset, r.value))
    for p, rows in log.items():
        assert [o for o, _ in rows] == list(range(len(rows))), f"partition {p}: offsets dense"
        seen = dict(reader.read.get(p, []))
        assert all(seen[o] == v for o, v in rows if o in seen), \
            f"partition {p}: the group read a record the final log does not hold"
    assert acked <= {int(v[1:]) for rows in log.values() for _, v in rows}


LEADER_MOVES = 3


def test_replicas_move_under_load_with_no_loss_and_no_consumer_restart(cluster):
    with AdminClient(cluster.master_addresses) as admin:
        info = admin.create_topic(TOPIC, partitions=2, replication_factor=2)
        writer, reader = make_writer(cluster.master_addresses), Reader(cluster.master_addresses)
        writer.start()
        reader.start()
        left: list[tuple[int, int]] = []  # (broker, partition) copies that moved away
        try:
            wait_until(lambda: len(writer.acked) > 200 and reader.values(), "traffic")
            p1 = info.partitions[1]
            follower1 = [b for b in p1.replicas if b != p1.broker_id][0]
            spare1 = ({1, 2, 3} - set(p1.replicas)).pop()
            admin.reassign_partitions(TOPIC, {1: [p1.broker_id, spare1]})  # a follower goes
            left.append((follower1, 1))
            for _ in range(LEADER_MOVES):  # partition 0: its leader leaves, every time
                p0 = admin.describe_topic(TOPIC).partitions[0]
                spare0 = ({1, 2, 3} - set(p0.replicas)).pop()
                stays = [b for b in p0.replicas if b != p0.broker_id]
                admin.reassign_partitions(TOPIC, {0: [spare0, *stays]})
                after = settled(admin)
                assert after.partitions[0].broker_id == spare0, "the leadership moved"
                assert sorted(after.partitions[0].replicas) == sorted([spare0, *stays])
                left.append((p0.broker_id, 0))
                time.sleep(0.5)  # traffic on the new leader
        finally:
            writer.stop.set()
            writer.join(30)
        assert sorted(after.partitions[1].replicas) == sorted([p1.broker_id, spare1])
        check_everything_read(cluster, writer, reader, 2)
        now = admin.describe_topic(TOPIC)
        for broker, p in left:
            if broker not in now.partitions[p].replicas:
                wait_until(lambda b=broker, q=p: not copy_dir(cluster, b, info, q).exists(),
                           f"broker {broker} to delete its copy of partition {p}")
        done = [e for e in admin.audit_log(200) if e.action == "reassignment_done"]
        assert len(done) == LEADER_MOVES + 1


def test_a_drained_broker_ends_up_holding_nothing(cluster):
    with AdminClient(cluster.master_addresses) as admin:
        info = admin.create_topic(TOPIC, partitions=3, replication_factor=1)
        with Producer(cluster.master_addresses) as producer:
            for n in range(300):
                producer.send(TOPIC, b"m%06d" % n, partition=n % 3)
            producer.flush()
        victim = info.partitions[0].broker_id
        drained = admin.drain_broker(victim)
        assert drained.draining and drained.staying == 0
        wait_until(lambda: next(b for b in admin.list_brokers()
                                if b.broker_id == victim).replicas == 0, "the drain")
        after = settled(admin)
        assert victim not in {b for p in after.partitions for b in p.replicas}
        with PullConsumer(cluster.master_addresses, auto_offset_reset="earliest") as c:
            c.assign([TopicPartition(TOPIC, p) for p in range(3)])
            got: set[bytes] = set()
            deadline = time.monotonic() + 30
            while len(got) < 300 and time.monotonic() < deadline:
                got |= {r.value for r in c.poll(timeout=0.5)}
        assert got == {b"m%06d" % n for n in range(300)}
        wait_until(lambda: not (cluster.brokers[victim].data_dir / "topics" / TOPIC).exists()
                   or not any((cluster.brokers[victim].data_dir / "topics" / TOPIC).glob("*/p*")),
                   "the drained broker to delete its copies")


def test_the_replication_factor_goes_up_then_down_keeping_every_record(cluster):
    with AdminClient(cluster.master_addresses) as admin:
        admin.create_topic(TOPIC, partitions=1, replication_factor=1)
        with Producer(cluster.master_addresses) as producer:
            for n in range(100):
                producer.send(TOPIC, b"m%06d" % n, partition=0)
            producer.flush()
        admin.alter_topic(TOPIC, replication_factor=3)
        up = settled(admin)
        assert len(up.partitions[0].replicas) == 3 and up.replication_factor == 3
        leader = up.partitions[0].broker_id
        admin.alter_topic(TOPIC, replication_factor=1, min_insync_replicas=1)
        down = settled(admin)
        assert down.partitions[0].replicas == [leader], "the leader stays"
        with PullConsumer(cluster.master_addresses, auto_offset_reset="earliest") as c:
            c.assign([TopicPartition(TOPIC, 0)])
            got: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(got) < 100 and time.monotonic() < deadline:
                got += [r.value for r in c.poll(timeout=0.5)]
        assert got == [b"m%06d" % n for n in range(100)]


def test_bad_reassignments_are_refused_with_what_is_wrong(cluster):
    with AdminClient(cluster.master_addresses) as admin:
        admin.create_topic(TOPIC, partitions=1, replication_factor=2)
        for wanted, message in (({0: [1]}, "needs 2 distinct brokers"),
                                ({0: [1, 1]}, "needs 2 distinct brokers"),
                                ({3: [1, 2]}, "partitions 0..0, not 3"),
                                ({0: [1, 9]}, "unknown broker 9")):
            with pytest.raises(TubeqError, match=message):
                admin.reassign_partitions(TOPIC, wanted)
        with pytest.raises(TubeqError, match="unknown topic"):
            admin.reassign_partitions("nope", {0: [1, 2]})


def test_the_cli_reassigns_and_drains_and_waits_for_the_moves(cluster):
    masters = cluster.master_addresses
    with AdminClient(masters) as admin:
        info = admin.create_topic(TOPIC, partitions=2, replication_factor=1)
    p0 = info.partitions[0].broker_id
    other = 1 if p0 != 1 else 2
    moved = tubeq(masters, "partition", "reassign", TOPIC, f"0={other}", "--wait", "30",
                  "--json")
    assert moved.returncode == 0, moved.stderr
    assert json.loads(moved.stdout)["partitions"][0]["replicas"] == [other]
    bad = tubeq(masters, "partition", "reassign", TOPIC, "0:1")
    assert bad.returncode == 2 and b"PARTITION=BROKER,BROKER" in bad.stderr
    refused = tubeq(masters, "partition", "reassign", TOPIC, "0=1,2")
    assert refused.returncode == 1 and b"needs 1 distinct brokers" in refused.stderr
    drained = tubeq(masters, "broker", "drain", str(other), "--wait", "30", "--json")
    assert drained.returncode == 0, drained.stderr
    assert json.loads(drained.stdout)["replicas"] == 0
    table = tubeq(masters, "broker", "list").stdout.decode()
    assert "REPLICAS" in table.splitlines()[0] and "LEADERS" in table.splitlines()[0]
