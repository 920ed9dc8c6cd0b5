"""The leader's side of replication on a real TopicManager and stores: high watermark from the
followers' fetches, divergence answers, and a new leadership starting its high watermark over."""
from __future__ import annotations

import asyncio

import pytest

from broker.replica_fetcher import read_answer
from broker.replication import ReplicaLeader
from broker.topics import PartitionRole, TopicManager, TopicSpec
from lib.proto import broker_pb2 as pb
from storage.config import StoreConfig
from tests.helpers import batch_of

SPEC = {"t": TopicSpec(partitions=1, topic_id=1)}


@pytest.fixture
def tm(tmp_path):
    m = TopicManager(tmp_path, StoreConfig(cache_flush_interval_ms=10))
    yield m
    m.close()


def lead(tm: TopicManager, epoch: int, isr=(1, 2)) -> None:
    tm.apply(SPEC, [("t", 0)], roles={("t", 0): PartitionRole(1, epoch, (1, 2), tuple(isr))},
             broker_id=1)


def fetch(leader: ReplicaLeader, offset: int, epoch: int, last_epoch: int):
    async def run(fn, *args):
        return fn(*args)
    req = pb.ReplicaFetchRequest(replica_id=2, max_wait_ms=0, partitions=[
        pb.ReplicaFetchPartition(topic="t", partition=0, topic_id=1, fetch_offset=offset,
                                 leader_epoch=epoch, last_fetched_epoch=last_epoch)])
    answer = asyncio.run(leader.fetch(req, run))
    return read_answer(answer.SerializeToString(), "leader")[0][0]  # as the wire has it


def test_the_high_watermark_follows_the_slowest_in_sync_replica(tm):
    lead(tm, 1)
    leader = ReplicaLeader(tm, broker_id=1)
    tm.store_for("t", 0).append(0, batch_of([b"a"] * 10), leader_epoch=1)
    assert leader.high_watermark("t", 0) == 0  # the follower has not fetched yet
    data = fetch(leader, 0, 1, 0)
    assert (data.base_offset, len(data.sizes) // 4, data.high_watermark) == (0, 10, 0)
    assert [(e.epoch, e.start_offset) for e in data.epochs] == [(1, 0)]
    assert fetch(leader, 10, 1, 1).high_watermark == 10
    lead(tm, 1, isr=(1,))  # the follower left the ISR: the leader alone decides
    tm.store_for("t", 0).append(0, batch_of([b"b"] * 5), leader_epoch=1)
    assert leader.high_watermark("t", 0) == 15


def test_a_follower_ahead_of_what_its_epoch_wrote_here_is_told_to_truncate(tm):
    lead(tm, 3)
    leader = ReplicaLeader(tm, broker_id=1)
    store = tm.store_for("t", 0)
    store.append(0, batch_of([b"x"] * 4), leader_epoch=2)
    store.append(0, batch_of([b"y"] * 4), leader_epoch=3)
    data = fetch(leader, 7, 3, 2)  # its epoch-2 records run to 7; ours to 4
    assert data.diverging_end_offset == 4 and not data.frames
    assert fetch(leader, 4, 3, 2).diverging_end_offset == -1
    stale = fetch(leader, 4, 2, 2)
    assert stale.error_code == "FENCED" and "leader is at 3" in stale.error_message


def test_a_new_leadership_does_not_inherit_an_old_high_watermark(tm):
    lead(tm, 1)
    leader = ReplicaLeader(tm, broker_id=1)
    store = tm.store_for("t", 0)
    store.append(0, batch_of([b"a"] * 10), leader_epoch=1)
    fetch(leader, 10, 1, 1)
    assert leader.high_watermark("t", 0) == 10
    # It lost the leadership, was truncated as a follower, and leads again at epoch 3.
    tm.apply(SPEC, [("t", 0)], roles={("t", 0): PartitionRole(2, 2, (1, 2), (1, 2))},
             broker_id=1)
    tm.replica_store("t", 0).truncate(0, 6)
    lead(tm, 3)
    assert leader.high_watermark("t", 0) == 0, "the old high watermark (10) is past the log"
    assert fetch(leader, 6, 3, 1).high_watermark == 6
