"""What a follower copies besides the records, on real TopicManagers, stores and offset
stores (the fetch loop's round run by hand):

- idempotent producers' de-duplication windows: the leader lists them in ReplicaFetch
  answers, a follower keeps them for what it copied and forgets them for what it truncates,
  so as the next leader it answers a retry with the original offsets instead of appending it
  again;
- consumer groups' committed offsets: sent once whole, then as they change."""
from __future__ import annotations

import asyncio

import pytest

from broker.config import BrokerConfig
from broker.data import DataPlane
from broker.inline_reads import INLINE_READ_RECORDS
from broker.metrics import BrokerMetrics
from broker.offsets import OffsetsPlane
from broker.replica_fetcher import LeaderLoop, ReplicaFetcher, read_answer
from broker.replication import ReplicaLeader
from broker.term import TermWatermark
from broker.topics import PartitionRole, TopicManager, TopicSpec
from lib.errors import OutOfOrderSequence
from lib.proto import broker_pb2 as pb
from lib.records import Record, encode_batch
from storage.config import StoreConfig
from storage.offsets import OffsetStore

SPEC = {"t": TopicSpec(partitions=1, topic_id=1)}
PID = 41


def role(leader: int, epoch: int) -> PartitionRole:
    return PartitionRole(leader, epoch, (1, 2), (1, 2), "127.0.0.1:1")


class Side:
    """One broker's half: its topics, de-duplication windows and data plane."""

    def __init__(self, path, broker_id: int) -> None:
        self.id = broker_id
        self.topics = TopicManager(path / str(broker_id), StoreConfig(cache_flush_interval_ms=10))
        self.offset_store = OffsetStore(path / f"offsets{broker_id}", map_size=1 << 24)
        self.offsets = OffsetsPlane(self.topics, self.offset_store, TermWatermark())
        self.leader = ReplicaLeader(self.topics, broker_id, self.offsets)
        self.plane = DataPlane(BrokerConfig(), self.topics, BrokerMetrics(), self.leader)
        self.new_loop()

    def new_loop(self) -> None:
        """A fetch loop of its own (as after a restart: it has been told nothing yet)."""
        self.loop = LeaderLoop(ReplicaFetcher(self.topics, self.id, offsets=self.offsets),
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

    def fetch_from(self, leader: Side, max_bytes: int = 1 << 20,
                   hops: list | None = None) -> pb.ReplicaFetchData:
        """One round of this follower's fetcher against ``leader``, applied here; ``hops``
        collects the functions the leader sent to its executor."""
        store = self.topics.replica_store("t", 0)
        r = self.topics.role("t", 0)
        key = ("t", 0, r.leader_epoch)
        epochs = store.leader_epochs(0)
        incarnation, version = self.loop._offsets_at.get(("t", 0), (0, 0))
        req = pb.ReplicaFetchRequest(replica_id=self.id, max_wait_ms=0, max_bytes=max_bytes,
                                     partitions=[pb.ReplicaFetchPartition(
                                         topic="t", partition=0, topic_id=1,
                                         fetch_offset=store.latest(0),
                                         leader_epoch=r.leader_epoch,
                                         last_fetched_epoch=epochs[-1][0] if epochs else 0,
                                         producer_state=key not in self.loop._synced,
                                         offsets_incarnation=incarnation,
                                         offsets_version=version)])

        async def run(fn, *args):
            if hops is not None:
                hops.append(fn)
            return fn(*args)
        answer = asyncio.run(leader.leader.fetch(req, run))  # as the wire carries it
        data, frames = read_answer(answer.SerializeToString(), "leader")[0]
        self.loop._apply(store, key, data, frames)
        return data

    def commit(self, group: str, offset: int) -> None:
        self.offsets.commit(pb.CommitOffsetsRequest(
            group=group, topic="t", offsets=[pb.OffsetCommit(partition=0, offset=offset)]))

    def committed(self) -> dict[str, int]:
        return {g: c.offset for g, c in self.offset_store.partition_offsets("t", 0).items()}

    def close(self) -> None:
        self.topics.close()
        self.offset_store.close()


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


def test_a_follower_keeping_up_is_answered_without_the_executor(pair):
    """At most INLINE_READ_RECORDS behind: read on the loop (no hop); further behind, in the
    executor (a read that may wait for the disk)."""
    one, two = pair
    total = 0
    while total <= INLINE_READ_RECORDS:
        one.produce(total, 200)
        total += 200
    hops: list = []
    far = two.fetch_from(one, max_bytes=64 << 10, hops=hops)
    assert len(hops) == 1 and far.base_offset == 0, "behind by more: the executor"
    while two.topics.replica_store("t", 0).latest(0) < total:
        two.fetch_from(one)
    one.produce(total, 200)
    hops.clear()
    near = two.fetch_from(one, hops=hops)
    assert hops == [], "200 records behind: on the loop"
    assert near.base_offset == total and near.log_end == total + 200
    assert two.topics.replica_store("t", 0).latest(0) == total + 200


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
    # as after losing the windows: the records are here, the windows are not
    two.topics.replica_store("t", 0).producers.adopt(0, [], replace=True)
    two.new_loop()
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
    assert two.topics.replica_store("t", 0).producers.batches(0, -1, 1 << 60)[-1] \
        .base_sequence == 0
    one.be(1, 6)
    assert one.produce(3, 2) == (3, 4), "sequence 3 may be written again"


def test_committed_offsets_reach_the_follower_once_whole_then_as_they_change(pair):
    one, two = pair
    one.produce(0, 8)
    one.commit("early", 2)  # before the follower's first fetch
    first = two.fetch_from(one)
    assert [(g.group, g.offset) for g in first.group_offsets] == [("early", 2)]
    assert two.committed() == {"early": 2}
    one.commit("late", 5)
    one.commit("early", 6)
    data = two.fetch_from(one)
    assert sorted((g.group, g.offset) for g in data.group_offsets) == [("early", 6), ("late", 5)]
    assert two.fetch_from(one).group_offsets == [], "nothing changed, nothing sent"
    assert two.offset_store.fetch("late", "t", [0])[0].commit_time_ms == \
        one.offset_store.fetch("late", "t", [0])[0].commit_time_ms
    two.be(2, 4)  # the follower leads: consumers get the offsets there
    got = two.offsets.fetch(pb.FetchOffsetsRequest(group="early", topic="t", partitions=[0]))
    assert [(c.partition, c.offset) for c in got.offsets] == [(0, 6)]


def test_a_new_leader_process_sends_every_group_again(pair):
    one, two = pair
    one.produce(0, 4)
    one.commit("g", 1)
    two.fetch_from(one)
    one.offsets = OffsetsPlane(one.topics, one.offset_store, TermWatermark())  # a restart
    one.leader = ReplicaLeader(one.topics, one.id, one.offsets)
    data = two.fetch_from(one)  # another incarnation: the whole state again
    assert [(g.group, g.offset) for g in data.group_offsets] == [("g", 1)]


def test_a_leader_is_reported_unreachable_only_while_followed_and_failing(pair):
    _, two = pair
    fetcher, told = two.loop.owner, []
    fetcher.on_unreachable = lambda: told.append(fetcher.unreachable_leaders())
    fetcher.reached({1}, False)
    fetcher.reached({1}, False)  # still failing: said once
    assert told == [[1]]
    fetcher.reached({1}, True)
    assert fetcher.unreachable_leaders() == []
    fetcher.reached({1, 5}, False)
    fetcher._forget_unfollowed([r for _, _, r in two.topics.followed()])  # follows 1's only
    assert fetcher.unreachable_leaders() == [1]


def test_a_follower_copies_transactions_markers_and_aborted_ranges(pair):
    """The leader lists its transactional batches with their attrs and every marker is a
    self-describing frame: the follower's open transactions, last stable offset and aborted
    index match the leader's, so a new leader serves read_committed readers the same."""
    one, two = pair

    def txn(pid: int, n: int) -> None:
        batch = encode_batch([Record(b"t%d-%d" % (pid, i), timestamp=1) for i in range(n)],
                             producer_id=pid, producer_epoch=0, base_sequence=0,
                             transactional=True)
        one.plane.produce(pb.ProduceRequest(topic="t", partition=0, batch=batch))
    txn(7, 2)  # 0-1, aborted
    txn(8, 1)  # 2, left open
    leader = one.topics.store_for("t", 0)
    assert leader.producers.write_marker(0, 7, 0, commit=False, leader_epoch=3) == 3
    one.produce(0, 1)  # 4
    copy = two.topics.replica_store("t", 0)
    while copy.latest(0) < 5:  # a read stops where the leader's files end and its cache begins
        two.fetch_from(one)
    assert copy.latest(0) == 5 and copy.producers.transactional(0)
    assert copy.producers.last_stable(0) == leader.producers.last_stable(0) == 2
    assert copy.producers.aborted_ranges(0, 0, 10).tolist() == \
        leader.producers.aborted_ranges(0, 0, 10).tolist()
    assert leader.producers.write_marker(0, 8, 0, commit=True, leader_epoch=3) == 5
    while copy.latest(0) < 6:
        two.fetch_from(one)
    assert copy.producers.last_stable(0) == 6


def test_a_transactional_batch_copied_in_pieces_joins_its_transaction(pair):
    one, two = pair
    batch = encode_batch([Record(b"p%d" % i + b"x" * 200, timestamp=1) for i in range(4)],
                         producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
    one.plane.produce(pb.ProduceRequest(topic="t", partition=0, batch=batch))
    leader = one.topics.store_for("t", 0)
    leader.flush()
    frame = len(leader.read(0, 0, 1 << 20).frames) // 4
    two.fetch_from(one, max_bytes=2 * frame)  # offsets 0-1: the batch is cut
    copy = two.topics.replica_store("t", 0)
    assert copy.latest(0) == 2
    two.fetch_from(one)  # 2-3: it completes, listed as transactional
    assert copy.latest(0) == 4 and copy.producers.last_stable(0) == 0
    leader.producers.write_marker(0, 7, 0, commit=False, leader_epoch=3)
    while copy.latest(0) < 5:
        two.fetch_from(one)
    assert copy.producers.last_stable(0) == 5
    assert copy.producers.aborted_ranges(0, 0, 9).tolist() == [(0, 3)]
