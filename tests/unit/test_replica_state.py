"""Idempotent producers across a leader change, on real TopicManagers and stores: the leader
lists its de-duplication windows in ReplicaFetch answers, a follower keeps them for what it
copied and forgets them for what it truncates, so as the next leader it answers a retry with
the original offsets instead of appending it again."""
from __future__ import annotations

import asyncio

import pytest

from broker.config import BrokerConfig
from broker.data import DataPlane
from broker.dedup import Dedup
from broker.metrics import BrokerMetrics
from broker.replica_fetcher import ReplicaFetcher, _LeaderLoop
from broker.replication import ReplicaLeader
from broker.topics import PartitionRole, TopicManager, TopicSpec
from lib.errors import OutOfOrderSequence
from lib.proto import broker_pb2 as pb
from lib.records import Record, encode_batch
from storage.config import StoreConfig

SPEC = {"t": TopicSpec(partitions=1, topic_id=1)}
PID = 41


def role(leader: int, epoch: int) -> PartitionRole:
    return PartitionRole(leader, epoch, (1, 2), (1, 2), "127.0.0.1:1")


class Side:
    """One broker's half: its topics, de-duplication windows and data plane."""

    def __init__(self, path, broker_id: int) -> None:
        self.id = broker_id
        self.topics = TopicManager(path / str(broker_id), StoreConfig(cache_flush_interval_ms=10))
        self.dedup = Dedup()
        self.leader = ReplicaLeader(self.topics, broker_id, self.dedup)
        self.plane = DataPlane(BrokerConfig(), self.topics, self.dedup, BrokerMetrics(),
                               self.leader)
        self.loop = _LeaderLoop(ReplicaFetcher(self.topics, broker_id, dedup=self.dedup),
                                "127.0.0.1:1")

    def be(self, leader: int, epoch: int) -> None:
        self.topics.apply(SPEC, [("t", 0)], roles={("t", 0): role(leader, epoch)},
                          broker_id=self.id)

    def produce(self, seq: int, n: int) -> tuple[int, int]:
        values = [b"s%d-" % (seq + i) + b"x" * 200 for i in range(n)]
        batch = encode_batch([Record(v, timestamp=1) for v in values], producer_id=PID,
                             producer_epoch=0, base_sequence=seq)
        r = self.plane.produce(pb.ProduceRequest(topic="t", partition=0, batch=batch))
        return r.base_offset, r.last_offset

    def fetch_from(self, leader: Side, max_bytes: int = 1 << 20) -> pb.ReplicaFetchData:
        """One round of this follower's fetcher against ``leader``, applied here."""
        store = self.topics.replica_store("t", 0)
        r = self.topics.role("t", 0)
        key = ("t", 0, r.leader_epoch)
        epochs = store.leader_epochs(0)
        req = pb.ReplicaFetchRequest(replica_id=self.id, max_wait_ms=0, max_bytes=max_bytes,
                                     partitions=[pb.ReplicaFetchPartition(
                                         topic="t", partition=0, topic_id=1,
                                         fetch_offset=store.latest(0),
                                         leader_epoch=r.leader_epoch,
                                         last_fetched_epoch=epochs[-1][0] if epochs else 0,
                                         producer_state=key not in self.loop._synced)])

        async def run(fn, *args):
            return fn(*args)
        data = asyncio.run(leader.leader.fetch(req, run)).partitions[0]
        self.loop._apply(store, key, data)
        return data

    def close(self) -> None:
        self.topics.close()


@pytest.fixture
def pair(tmp_path):
    one, two = Side(tmp_path, 1), Side(tmp_path, 2)
    one.be(1, 3)
    two.be(1, 3)
    yield one, two
    one.close()
    two.close()


def test_an_idempotent_batch_is_stamped_with_the_leader_epoch(pair):
    one, _ = pair
    one.produce(0, 2)
    assert one.topics.store_for("t", 0).leader_epochs(0) == [(3, 0)]


def test_the_leader_lists_only_the_batches_its_frames_complete(pair):
    one, two = pair
    assert one.produce(0, 4) == (0, 3)
    assert one.produce(4, 4) == (4, 7)
    frame = len(one.topics.store_for("t", 0).read(0, 0, 1 << 20).frames) // 8
    data = two.fetch_from(one, max_bytes=6 * frame)  # offsets 0-5: the second batch is cut
    assert len(data.sizes) // 4 == 6
    assert [(b.base_sequence, b.base_offset) for b in data.producer_batches] == [(0, 0)]
    data = two.fetch_from(one)  # 6-7: it completes now
    assert [(b.base_sequence, b.base_offset, b.count) for b in data.producer_batches] == \
        [(4, 4, 4)]
    assert two.fetch_from(one).producer_batches == []  # nothing new, nothing listed


def test_the_next_leader_answers_a_retry_with_the_original_offsets(pair):
    one, two = pair
    first, second = one.produce(0, 3), one.produce(3, 2)
    two.fetch_from(one)
    two.be(2, 4)  # failover: broker 2 leads at epoch 4
    assert two.produce(3, 2) == second, "a retry of an acknowledged batch is not appended"
    assert two.produce(0, 3) == first
    assert two.topics.store_for("t", 0).latest(0) == 5
    assert two.produce(5, 1) == (5, 5)  # the sequence goes on where the old leader left it
    with pytest.raises(OutOfOrderSequence):
        two.produce(9, 1)


def test_a_replica_that_joins_late_gets_the_whole_windows(pair):
    one, two = pair
    one.produce(0, 3)
    two.fetch_from(one)
    two.dedup = Dedup()  # as after a restart: the records are here, the windows are not
    two.loop = _LeaderLoop(ReplicaFetcher(two.topics, 2, dedup=two.dedup), "127.0.0.1:1")
    two.plane.dedup = two.dedup
    one.produce(3, 1)
    data = two.fetch_from(one)  # the first fetch of this loop asks for the whole state
    assert [b.base_sequence for b in data.producer_batches] == [0, 3]
    two.be(2, 4)
    assert two.produce(0, 3) == (0, 2)


def test_a_truncated_batch_is_forgotten(pair):
    one, two = pair
    one.produce(0, 3)
    two.fetch_from(one)
    two.be(2, 4)
    two.produce(3, 2)  # offsets 3-4, written only by broker 2 at epoch 4
    one.be(1, 5)  # broker 2's leadership is lost before broker 1 copied them
    two.be(1, 5)
    data = two.fetch_from(one)
    assert data.diverging_end_offset == 3
    assert two.topics.replica_store("t", 0).latest(0) == 3
    assert two.dedup.remembered("t", 0, -1, 1 << 60)[-1].batch.base_sequence == 0
    assert two.dedup.check(PID, 0, 3, 2, "t", 0) is None, "sequence 3 may be written again"
