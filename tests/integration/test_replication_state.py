"""What moves to the new leader besides the records, on real broker processes:

- an idempotent producer's retry after a leader change is answered with the offsets the old
  leader gave, not appended a second time (the batches are sent raw, one ProduceRequest each,
  sent again byte for byte, as a producer's retry does after its leader died before the
  acknowledgement reached it);
- a consumer group's committed offsets: a consumer of the group starts from them on the new
  leader."""
from __future__ import annotations

import shutil
import time

import pytest

from lib import errors
from lib.admin import AdminClient
from lib.consumer.pull import PullConsumer
from lib.producer.producer import Producer
from lib.proto import broker_pb2 as pb
from lib.proto import broker_pb2_grpc
from lib.records import Record, encode_batch
from lib.rpc import invoke
from lib.types import TopicPartition
from tests.integration.fault_kit import FAST_FAILOVER, REPLICA_LAG_MAX_MS, wait_until

PID = 77


@pytest.fixture
def cluster(replicated_cluster):
    return replicated_cluster(2, master_settings=FAST_FAILOVER,
                              replica_lag_max_ms=REPLICA_LAG_MAX_MS)


def batch(seq: int, n: int, topic: str = "idem") -> pb.ProduceRequest:
    return pb.ProduceRequest(topic=topic, partition=0, acks_all=True, batch=encode_batch(
        [Record(b"seq-%d" % (seq + i)) for i in range(n)], producer_id=PID, producer_epoch=0,
        base_sequence=seq))


def send(cluster, broker: int, request: pb.ProduceRequest) -> tuple[int, int]:
    with cluster.channel(cluster.brokers[broker].address) as channel:
        r = invoke(broker_pb2_grpc.BrokerStub(channel).Produce, request, 15)
    return r.base_offset, r.last_offset


def log_end(cluster, broker: int, topic: str = "idem") -> int:
    with cluster.channel(cluster.brokers[broker].address) as channel:
        r = invoke(broker_pb2_grpc.BrokerStub(channel).ListOffsets,
                   pb.ListOffsetsRequest(topic=topic, partitions=[0]), 15)
    return r.partitions[0].latest




def leads(cluster, broker: int, topic: str = "idem") -> bool:
    try:
        log_end(cluster, broker, topic)
        return True
    except (errors.UnknownTopic, errors.PartitionNotHosted):
        return False


def produce_and_commit(cluster, tps: list[TopicPartition], prefix: bytes, n: int,
                       committed: list[int]) -> None:
    """``n`` records (value ``prefix`` + i to partition i % len(tps)) with acks=all, then
    group "g" commits ``committed`` on ``tps``."""
    with Producer(cluster.master_addresses, acks="all") as producer:
        for i in range(n):
            producer.send(tps[0].topic, prefix + b"%d" % i, partition=i % len(tps))
        producer.flush()
    with PullConsumer(cluster.master_addresses, group="g", auto_offset_reset="earliest",
                      enable_auto_commit=False) as consumer:
        consumer.assign(tps)
        consumer.commit(dict(zip(tps, committed, strict=True)))


def assert_group_sees(cluster, tps: list[TopicPartition], committed: list[int],
                      values: list[bytes]) -> None:
    """Group "g" finds its committed offsets, and every record (value i sent to partition
    i % len(tps)) is there in order."""
    with PullConsumer(cluster.master_addresses, group="g", auto_offset_reset="latest",
                      enable_auto_commit=False) as consumer:
        consumer.assign(tps)
        assert [consumer.committed(tp) for tp in tps] == committed
        consumer.seek_to_beginning(*tps)
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < len(values) and time.monotonic() < deadline:
            got += consumer.poll(timeout=0.5)
    for p, tp in enumerate(tps):
        assert [r.value for r in got if r.partition == tp.partition] == values[p::len(tps)]


def test_a_retry_after_a_leader_change_is_answered_not_appended_again(cluster):
    with AdminClient(cluster.master_addresses) as admin:
        first = admin.create_topic("idem", partitions=1, replication_factor=2).partitions[0]

        def leader() -> int:
            return admin.describe_topic("idem").partitions[0].broker_id

        def isr() -> list[int]:
            return sorted(admin.describe_topic("idem").partitions[0].isr)

        old, heir = first.broker_id, ({1, 2} - {first.broker_id}).pop()
        wait_until(lambda: leads(cluster, old), "the leader to host the partition")
        # acks=all: answered once the follower holds the records, and so their producer batch
        a, b = batch(0, 3), batch(3, 2)
        assert send(cluster, old, a) == (0, 2)
        assert send(cluster, old, b) == (3, 4)

        cluster.brokers[old].kill()  # as if it died before its answer to b reached us
        wait_until(lambda: leader() == heir and leads(cluster, heir), "the follower to take over")
        b.acks_all = a.acks_all = False  # the ISR is the new leader alone
        assert send(cluster, heir, b) == (3, 4), "the retry gets the offsets it was given"
        assert send(cluster, heir, a) == (0, 2)
        assert log_end(cluster, heir) == 5, "nothing was appended twice"
        with pytest.raises(errors.OutOfOrderSequence, match="expected 5"):
            send(cluster, heir, batch(6, 1))  # the new leader knows where the sequence is
        c = batch(5, 1)
        assert send(cluster, heir, c) == (5, 5)

        # The old leader comes back (its windows lost with its process), copies from the new
        # one and becomes the leader again: it learnt the windows from its leader.
        cluster.start_broker(old)
        wait_until(lambda: isr() == [1, 2], "the old leader to catch up")
        cluster.brokers[heir].kill()
        wait_until(lambda: leader() == old and leads(cluster, old),
                   "the old leader to take over again")
        assert send(cluster, old, c) == (5, 5)
        assert send(cluster, old, b) == (3, 4)
        assert log_end(cluster, old) == 6
        assert send(cluster, old, batch(6, 1)) == (6, 6)


def test_a_groups_committed_offsets_survive_a_leader_change(cluster):
    tp = TopicPartition("offs", 0)
    with AdminClient(cluster.master_addresses) as admin:
        first = admin.create_topic("offs", partitions=1, replication_factor=2).partitions[0]
        old, heir = first.broker_id, ({1, 2} - {first.broker_id}).pop()
        with Producer(cluster.master_addresses, acks="all") as producer:
            for i in range(100):
                producer.send("offs", b"m%d" % i, partition=0)
            producer.flush()
        with PullConsumer(cluster.master_addresses, group="readers",
                          auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
            consumer.assign([tp])
            got = []
            while len(got) < 60:
                got += consumer.poll(timeout=0.5)[:60 - len(got)]
            consumer.commit({tp: 60})
            assert consumer.committed(tp) == 60
        # answered only once the follower holds it: no wait needed before the kill
        cluster.brokers[old].kill()
        wait_until(lambda: admin.describe_topic("offs").partitions[0].broker_id == heir
                   and leads(cluster, heir, "offs"), "the follower to take over")
    # "latest" would skip everything if the group's offset were lost with the old leader
    with PullConsumer(cluster.master_addresses, group="readers", auto_offset_reset="latest",
                      enable_auto_commit=False) as consumer:
        consumer.assign([tp])
        assert consumer.committed(tp) == 60
        rest = []
        deadline = time.monotonic() + 20
        while len(rest) < 40 and time.monotonic() < deadline:
            rest += consumer.poll(timeout=0.5)
    assert [r.offset for r in rest] == list(range(60, 100))


def test_a_broker_whose_disk_was_wiped_rebuilds_its_copies_and_can_lead(cluster):
    """A broker restarted with an empty data directory (a replaced disk) copies every
    partition it holds from the leaders, records and committed offsets, rejoins the ISRs, and
    serves all of it once the other broker is gone."""
    tps = [TopicPartition("wiped", 0), TopicPartition("wiped", 1)]
    with AdminClient(cluster.master_addresses) as admin:
        admin.create_topic("wiped", partitions=2, replication_factor=2)

        def isrs() -> list[list[int]]:
            return [sorted(p.isr) for p in admin.describe_topic("wiped").partitions]

        produce_and_commit(cluster, tps, b"w", 400, [150, 120])
        wiped, other = 1, 2
        cluster.brokers[wiped].kill()
        shutil.rmtree(cluster.brokers[wiped].data_dir)
        wait_until(lambda: all(p.broker_id == other
                               for p in admin.describe_topic("wiped").partitions),
                   "the other broker to lead both partitions")
        cluster.start_broker(wiped)
        wait_until(lambda: isrs() == [[1, 2], [1, 2]], "the wiped broker to catch up", 60)
        cluster.brokers[other].kill()
        wait_until(lambda: all(p.broker_id == wiped
                               for p in admin.describe_topic("wiped").partitions)
                   and leads(cluster, wiped, "wiped"), "the wiped broker to lead")
    assert_group_sees(cluster, tps, [150, 120], [b"w%d" % i for i in range(400)])


def test_every_broker_killed_at_once_comes_back_with_every_acknowledged_record(cluster):
    """A power cut: both brokers SIGKILLed together (sync durability: acknowledged means on
    disk on every in-sync replica), then started again. Each partition gets a leader back,
    both replicas return to the ISR, and the records and the group's offsets are all there."""
    tps = [TopicPartition("cut", 0), TopicPartition("cut", 1)]
    with AdminClient(cluster.master_addresses) as admin:
        admin.create_topic("cut", partitions=2, replication_factor=2, durability="sync")
        produce_and_commit(cluster, tps, b"c", 200, [40, 70])
        for b in (1, 2):
            cluster.brokers[b].kill()
        time.sleep(3.0)  # past broker_timeout_ms: the master sees both dead
        for b in (1, 2):
            cluster.start_broker(b)

        def settled() -> bool:
            parts = admin.describe_topic("cut").partitions
            return all(p.available and sorted(p.isr) == [1, 2] for p in parts)

        wait_until(settled, "leaders back and both replicas in sync", 60)
    assert_group_sees(cluster, tps, [40, 70], [b"c%d" % i for i in range(200)])
