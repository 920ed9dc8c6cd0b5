"""Partition reassignment (master/reassign.py) and its state commands (master/state_topics.py)."""
from __future__ import annotations

import pytest

from lib.errors import InvalidArgument, NotEnoughBrokers
from master import reassign
from master.state import MetaState

RF2 = {"partitions": 2, "stores": 1, "durability": "async", "retention_ms": 1000,
       "retention_bytes": -1, "max_message_bytes": 1024, "replication_factor": 2,
       "min_insync_replicas": 1}


@pytest.fixture
def state(tmp_path):
    s = MetaState(tmp_path / "meta", map_size=1 << 24)
    yield s
    s.close()


def record(replicas, isr=None, placement=None, epochs=None):
    return {"topic": "t", "topic_id": 7, "replicas": replicas,
            "isr": isr or [list(r) for r in replicas],
            "placement": placement or [r[0] for r in replicas],
            "leader_epochs": epochs or [1] * len(replicas)}


def test_new_replicas_join_first_and_out_of_sync_ones_go_at_once():
    rec = record([[1, 2, 3]], isr=[[1, 2]])
    moved = reassign.start(rec, 0, [1, 4, 5])
    assert moved["replicas"] == [[1, 4, 5, 2]], "3 is out of sync: it holds nothing needed"
    assert moved["targets"] == [[1, 4, 5]] and moved["isr"] == [[1, 2]]
    assert reassign.in_progress(moved) == [0]
    assert reassign.finish(moved, 0, leader_may_leave=False) is moved, "4, 5 not in sync yet"
    done = reassign.finish({**moved, "isr": [[1, 2, 4, 5]]}, 0, leader_may_leave=False)
    assert (done["replicas"], done["isr"], done["targets"]) == ([[1, 4, 5]], [[1, 4, 5]], [[]])
    assert done["placement"] == [1] and done["leader_epochs"] == [1], "the leader stayed"


def test_a_leaving_leader_hands_over_only_when_it_asks():
    rec = reassign.start(record([[1, 2]]), 0, [3, 2])
    synced = {**rec, "isr": [[1, 2, 3]]}
    assert reassign.finish(synced, 0, leader_may_leave=False) is synced
    done = reassign.finish(synced, 0, leader_may_leave=True)
    assert (done["replicas"], done["placement"], done["leader_epochs"], done["isr"]) == \
        ([[3, 2]], [3], [2], [[2, 3]]), "the first in-sync target replica leads, next epoch"


def test_reassigning_to_the_current_replicas_cancels_and_may_reorder():
    moving = reassign.start(record([[1, 2]]), 0, [1, 3])
    assert moving["replicas"] == [[1, 3, 2]]
    back = reassign.start(moving, 0, [2, 1])
    assert back["targets"] == [[]] and back["replicas"] == [[2, 1]], \
        "2 and 1 are in sync and the leader stays: done at once, 3 (still copying) goes"
    assert reassign.start(record([[1, 2]]), 0, [2, 1])["replicas"] == [[2, 1]]


def test_a_drain_moves_every_replica_of_the_broker_to_the_least_loaded_other():
    topics = {"t": record([[1, 2], [2, 3], [3, 1]])}
    moves, stuck = reassign.drain_moves(topics, 2, load={1: 2, 2: 2, 3: 2, 4: 0},
                                        draining={2})
    assert [(m["partition"], m["target"]) for m in moves] == [(0, [1, 4]), (1, [4, 3])]
    assert stuck == []
    moves, stuck = reassign.drain_moves({"t": record([[1, 2, 3], [3, 1]])}, 2,
                                        load={1: 2, 2: 1, 3: 2}, draining={2})
    assert (moves, stuck) == ([], [("t", 0)]), "every other live broker holds a copy already"


def test_a_replication_factor_change_adds_least_loaded_brokers_or_drops_out_of_sync_ones():
    rec = record([[1, 2], [2, 3]], isr=[[1, 2], [2]])
    up = reassign.resize_moves(rec, 3, load={1: 1, 2: 2, 3: 1, 4: 0}, draining=())
    assert [m["target"] for m in up] == [[1, 2, 4], [2, 3, 1]]
    down = reassign.resize_moves(rec, 1, load={1: 1, 2: 2, 3: 1}, draining=())
    assert [m["target"] for m in down] == [[1], [2]], "the leader stays"
    down = reassign.resize_moves(record([[1, 2, 3]], isr=[[1, 3]]), 2, load={}, draining=())
    assert [m["target"] for m in down] == [[1, 3]], "the in-sync follower stays"
    with pytest.raises(NotEnoughBrokers, match="replication_factor 4 needs 4 live brokers"):
        reassign.resize_moves(rec, 4, load={1: 1, 2: 2, 3: 1, 4: 0}, draining={4})


def test_state_reassign_then_the_leader_finishes_through_alter_isr(state):
    rec = state.apply({"op": "create_topic", "time_ms": 1, "topic": "t", "settings": RF2,
                       "replicas": [[1, 2], [2, 1]]})
    change = {"topic": "t", "topic_id": rec["topic_id"], "partition": 0, "target": [3, 2]}
    assert state.apply({"op": "reassign", "time_ms": 2, "changes": [change]}) == [change]
    t = state.topic("t")
    assert t["replicas"][0] == [3, 2, 1] and t["targets"][0] == [3, 2]
    isr = {"op": "alter_isr", "time_ms": 3, "topic": "t", "topic_id": rec["topic_id"],
           "partition": 0, "broker_id": 1, "leader_epoch": 1, "isr": [1, 2, 3]}
    assert state.apply(isr)["placement"][0] == 1, "not asked to finish: 1 still leads"
    done = state.apply({**isr, "time_ms": 4, "complete": True})
    assert (done["replicas"][0], done["placement"][0], done["leader_epochs"][0],
            done["isr"][0], done["targets"][0]) == ([3, 2], 3, 2, [2, 3], [])
    assert state.topic("t")["replicas"][1] == [2, 1], "the other partition did not move"


def test_state_reassign_refuses_bad_lists_and_skips_a_recreated_topic(state):
    rec = state.apply({"op": "create_topic", "time_ms": 1, "topic": "t", "settings": RF2,
                       "replicas": [[1, 2], [2, 1]]})
    for target, partition in (([1, 1], 0), ([], 0), ([1, 2], 5)):
        with pytest.raises(InvalidArgument):
            state.apply({"op": "reassign", "time_ms": 2, "changes": [
                {"topic": "t", "topic_id": rec["topic_id"], "partition": partition,
                 "target": target}]})
    stale = {"topic": "t", "topic_id": rec["topic_id"] + 1, "partition": 0, "target": [3, 4]}
    assert state.apply({"op": "reassign", "time_ms": 3, "changes": [stale]}) == []
    assert state.topic("t")["replicas"] == [[1, 2], [2, 1]]


def test_state_drain_reassigns_in_the_same_command(state):
    state.apply({"op": "register_broker", "time_ms": 1, "broker_id": 2, "address": "b:2"})
    rec = state.apply({"op": "create_topic", "time_ms": 1, "topic": "t", "settings": RF2,
                       "replicas": [[1, 2], [2, 1]]})
    moves = [{"topic": "t", "topic_id": rec["topic_id"], "partition": p, "target": target}
             for p, target in ((0, [1, 3]), (1, [3, 1]))]
    got = state.apply({"op": "set_draining", "time_ms": 2, "broker_id": 2, "draining": True,
                       "reassign": moves})
    assert got["moving"] == 2 and state.draining() == {2}
    assert state.topic("t")["targets"] == [[1, 3], [3, 1]]
