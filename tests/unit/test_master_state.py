"""The master's LMDB state machine: commands, atomic audit, survival across reopen."""
from __future__ import annotations

import lmdb
import pytest

from lib.errors import InvalidArgument, NotLeader, TopicExists, UnknownBroker, UnknownTopic
from master.principals import Principals
from master.state import MetaState
from master.state_brokers import BrokerRecords
from master.state_groups import GroupRecords
from master.state_tables import SeqLog
from master.state_topics import TopicRecords

SETTINGS = {"partitions": 2, "stores": 1, "durability": "async", "retention_ms": 1000,
            "retention_bytes": -1, "max_message_bytes": 1024}


@pytest.fixture
def state(tmp_path):
    s = MetaState(tmp_path / "meta", map_size=1 << 24, tombstones_kept=3, audit_kept=5)
    yield s
    s.close()


def create(state, name, audit=None, **extra):
    return state.apply({"op": "create_topic", "time_ms": 10, "topic": name,
                        "settings": SETTINGS, "placement": [1, 2], "audit": audit, **extra})


def test_epoch_grows_at_every_leadership_and_records_the_leader(tmp_path):
    s = MetaState(tmp_path / "m")
    assert s.apply({"op": "lead", "time_ms": 1, "node": "h:1", "address": "h:10"}) == 1
    assert s.apply({"op": "lead", "time_ms": 2, "node": "h:2", "address": "h:20"}) == 2
    s.close()
    s = MetaState(tmp_path / "m")
    assert s.epoch == 2 and s.leader() == {"node": "h:2", "address": "h:20", "epoch": 2,
                                           "time_ms": 2}
    assert s.apply({"op": "lead", "time_ms": 3}) == 3
    s.close()


def test_a_log_position_is_applied_once_even_when_the_command_fails(tmp_path):
    s = MetaState(tmp_path / "m")
    cmd = {"op": "create_topic", "time_ms": 10, "topic": "t", "settings": SETTINGS,
           "placement": [1, 2]}
    assert s.apply(cmd, index=5)["topic_id"] == 1
    assert s.apply(cmd, index=5) is None and s.applied_index == 5  # a replay: skipped
    with pytest.raises(TopicExists):
        s.apply(cmd, index=6)
    assert s.applied_index == 6
    with pytest.raises(InvalidArgument, match="unknown state command"):
        s.apply({"op": "nope"}, index=7)
    s.close()
    s = MetaState(tmp_path / "m")
    assert s.applied_index == 7 and s.apply(cmd, index=7) is None
    assert len(s.topics()) == 1


def test_create_alter_delete_topic_and_reopen(tmp_path):
    s = MetaState(tmp_path / "m")
    rec = create(s, "t", audit={"principal": "alice", "peer": "p", "action": "create_topic",
                                "target": "t", "details": "{}"})
    assert rec["topic_id"] == 1 and s.topic("t")["placement"] == [1, 2]
    s.apply({"op": "alter_topic", "time_ms": 11, "topic": "t",
             "settings": {**SETTINGS, "partitions": 3}, "placement": [1, 2, 1]})
    s.apply({"op": "delete_topic", "time_ms": 12, "topic": "t"})
    assert create(s, "t")["topic_id"] == 2, "a re-created topic gets a new id"
    s.close()
    s = MetaState(tmp_path / "m")
    assert s.topic("t")["topic_id"] == 2
    assert s.tombstones() == [{"topic": "t", "topic_id": 1, "time_ms": 12}]
    assert s.audit(10)[0]["principal"] == "alice" and s.audit(10)[0]["time_ms"] == 10
    s.close()


def test_invalid_commands_change_nothing(state):
    create(state, "t")
    with pytest.raises(TopicExists):
        create(state, "t", audit={"principal": "x", "action": "create_topic"})
    with pytest.raises(UnknownTopic):
        state.apply({"op": "delete_topic", "time_ms": 1, "topic": "nope"})
    with pytest.raises(InvalidArgument):
        state.apply({"op": "alter_topic", "time_ms": 1, "topic": "t", "settings": SETTINGS,
                     "placement": [2, 1]})
    with pytest.raises(InvalidArgument):
        create(state, "u", max_topics=1)
    with pytest.raises(InvalidArgument):
        state.apply({"op": "launch_missiles", "time_ms": 1})
    assert list(state.topics()) == ["t"] and state.audit(10) == []


def test_tombstones_and_audit_keep_only_the_newest(state):
    for i in range(5):
        create(state, f"t{i}")
        state.apply({"op": "delete_topic", "time_ms": i, "topic": f"t{i}",
                     "audit": {"action": "delete_topic", "target": f"t{i}"}})
    state.apply({"op": "audit", "time_ms": 99, "audit": {"action": "x"}})
    assert [t["topic"] for t in state.tombstones()] == ["t2", "t3", "t4"]
    entries = state.audit(100)
    assert len(entries) == 5 and entries[-1]["action"] == "x"
    assert [e.get("target") for e in state.audit(2)] == ["t4", None]


def test_groups_and_brokers_are_recorded(state):
    state.apply({"op": "record_group", "time_ms": 1, "group": "g", "topics": ["a"]})
    state.apply({"op": "record_group", "time_ms": 2, "group": "g", "topics": ["b"]})
    state.apply({"op": "register_broker", "time_ms": 3, "broker_id": 7, "address": "h:1"})
    assert state.groups()["g"] == {"created_ms": 1, "updated_ms": 2, "topics": ["a", "b"]}
    assert state.brokers() == {7: "h:1"}


def test_a_retried_create_with_the_same_request_id_gets_the_topic_not_topic_exists(tmp_path):
    s = MetaState(tmp_path / "m")
    first = create(s, "t", request_id="r1")
    assert create(s, "t", request_id="r1") == first  # the answer of the first was lost
    with pytest.raises(TopicExists):
        create(s, "t", request_id="r2")
    with pytest.raises(TopicExists):
        create(s, "t")
    s.close()


def test_commands_of_a_deposed_leadership_are_refused_everywhere(tmp_path):
    s = MetaState(tmp_path / "m")
    assert s.apply({"op": "lead", "time_ms": 1, "after": 0}, index=2) == 1
    assert s.apply({"op": "lead", "time_ms": 2, "after": 1}, index=3) == 2  # a failover
    with pytest.raises(NotLeader, match="stale"):  # the deposed master's late claim
        s.apply({"op": "lead", "time_ms": 3, "after": 0}, index=4)
    with pytest.raises(NotLeader, match="deposed"):  # its forwarded write
        create(s, "late", epoch=1)
    assert s.topic("late") is None and s.epoch == 2 and s.applied_index == 4
    assert create(s, "now", epoch=2)["topic"] == "now"
    s.close()


def drain(state, broker_id, draining=True, **extra):
    return state.apply({"op": "set_draining", "time_ms": 5, "broker_id": broker_id,
                        "draining": draining, **extra})


def test_a_drained_broker_stays_drained_across_registrations_reopen_and_snapshots(tmp_path):
    s = MetaState(tmp_path / "m")
    s.apply({"op": "register_broker", "time_ms": 1, "broker_id": 1, "address": "h:1"})
    s.apply({"op": "register_broker", "time_ms": 1, "broker_id": 2, "address": "h:2"})
    assert s.draining() == frozenset()
    assert drain(s, 1) == {"broker_id": 1, "draining": True, "changed": True, "moving": 0}
    assert drain(s, 1)["changed"] is False  # idempotent
    s.apply({"op": "register_broker", "time_ms": 6, "broker_id": 1, "address": "h:9"})
    assert s.draining() == {1} and s.brokers() == {1: "h:9", 2: "h:2"}
    s.close()
    s = MetaState(tmp_path / "m")
    assert s.draining() == {1}
    snapshot = tmp_path / "snapshot.mdb"
    with open(snapshot, "wb") as f:
        s.copy_to(f.fileno())
    s.close()
    other = MetaState(tmp_path / "other")
    other.restore_from(snapshot)
    assert other.draining() == {1} and other.brokers()[1] == "h:9"
    assert drain(other, 1, False)["changed"] is True and other.draining() == frozenset()
    other.close()


def test_draining_an_unknown_broker_is_unknown_broker_and_changes_nothing(state):
    with pytest.raises(UnknownBroker, match="unknown broker 4") as err:
        drain(state, 4, audit={"principal": "a", "peer": "", "action": "drain_broker",
                               "target": "broker 4", "details": "{}"})
    assert err.value.broker_id == 4
    assert state.draining() == frozenset() and state.brokers() == {} and state.audit(5) == []


RF3 = {**SETTINGS, "replication_factor": 3, "min_insync_replicas": 2}


def test_a_replicated_topic_records_replicas_leaders_epochs_and_isr(tmp_path):
    s = MetaState(tmp_path / "m")
    rec = s.apply({"op": "create_topic", "time_ms": 1, "topic": "t", "settings": RF3,
                   "replicas": [[1, 2, 3], [2, 3, 1]]})
    assert rec["replicas"] == [[1, 2, 3], [2, 3, 1]]
    assert rec["placement"] == [1, 2], "the preferred (first) replica leads a new partition"
    assert rec["isr"] == [[1, 2, 3], [2, 3, 1]] and rec["leader_epochs"] == [1, 1]
    grown = s.apply({"op": "alter_topic", "time_ms": 2, "topic": "t",
                     "settings": {**RF3, "partitions": 3},
                     "replicas": [[1, 2, 3], [2, 3, 1], [3, 1, 2]]})
    assert grown["placement"] == [1, 2, 3] and grown["leader_epochs"] == [1, 1, 1]
    with pytest.raises(InvalidArgument, match="would move existing partitions"):
        s.apply({"op": "alter_topic", "time_ms": 3, "topic": "t",
                 "settings": {**RF3, "partitions": 3},
                 "replicas": [[1, 2, 3], [2, 1, 3], [3, 1, 2]]})
    s.close()
    s = MetaState(tmp_path / "m")
    assert s.topic("t") == grown
    assert s.topic("t")["settings"]["min_insync_replicas"] == 2
    s.close()


def test_a_replica_list_needs_distinct_brokers(state):
    with pytest.raises(InvalidArgument, match=r"bad replica list \[1, 1\]"):
        state.apply({"op": "create_topic", "time_ms": 1, "topic": "t", "settings": SETTINGS,
                     "replicas": [[1, 1], [2]]})
    with pytest.raises(InvalidArgument, match="does not cover every partition"):
        state.apply({"op": "create_topic", "time_ms": 1, "topic": "t", "settings": SETTINGS,
                     "replicas": [[1]]})
    assert state.topics() == {}


def test_a_topic_written_before_replication_reads_as_one_copy(tmp_path):
    """Records and Raft commands of earlier versions carry a placement list only."""
    import json

    import lmdb
    s = MetaState(tmp_path / "m")
    s.close()
    old = {"topic": "old", "topic_id": 7, "created_ms": 5, "settings": SETTINGS,
           "placement": [2, 1], "request_id": ""}
    env = lmdb.open(str(tmp_path / "m"), max_dbs=16)
    with env.begin(write=True, db=env.open_db(b"topics")) as txn:
        txn.put(b"old", json.dumps(old).encode())
    env.close()
    s = MetaState(tmp_path / "m")
    rec = s.topic("old")
    assert rec["replicas"] == [[2], [1]] and rec["isr"] == [[2], [1]]
    assert rec["placement"] == [2, 1] and rec["leader_epochs"] == [0, 0]
    assert rec["settings"]["replication_factor"] == 1
    assert rec["settings"]["min_insync_replicas"] == 1
    assert rec["settings"]["unclean_leader_election"] is False
    create(s, "cmd")  # a create command of an earlier version (placement only)
    assert s.topic("cmd")["replicas"] == [[1], [2]]
    assert s.topic("cmd")["leader_epochs"] == [1, 1], "new partitions count epochs from 1"
    s.close()


def test_only_the_current_leader_at_its_epoch_alters_the_isr(state):
    from lib.errors import Fenced
    rec = state.apply({"op": "create_topic", "time_ms": 1, "topic": "t", "settings": RF3,
                       "replicas": [[1, 2, 3], [2, 3, 1]]})
    change = {"op": "alter_isr", "time_ms": 2, "topic": "t", "topic_id": rec["topic_id"],
              "partition": 0, "broker_id": 1, "leader_epoch": 1}
    assert state.apply({**change, "isr": [1, 3]})["isr"] == [[1, 3], [2, 3, 1]]
    with pytest.raises(Fenced, match="the leader is broker 1 at epoch 1"):
        state.apply({**change, "broker_id": 2, "isr": [1]})
    with pytest.raises(Fenced):
        state.apply({**change, "leader_epoch": 0, "isr": [1]})
    with pytest.raises(InvalidArgument, match="must hold its leader 1"):
        state.apply({**change, "isr": [2, 3]})
    with pytest.raises(InvalidArgument, match="only its replicas"):
        state.apply({**change, "isr": [1, 4]})
    with pytest.raises(UnknownTopic):
        state.apply({**change, "topic_id": 99, "isr": [1]})
    assert state.apply({**change, "isr": [1, 2, 3]})["isr"][0] == [1, 2, 3]  # expanded back
    assert state.topic("t")["isr"] == [[1, 2, 3], [2, 3, 1]]


def test_elected_leaders_apply_unless_computed_from_a_stale_epoch(state):
    rec = state.apply({"op": "create_topic", "time_ms": 1, "topic": "t", "settings": RF3,
                       "replicas": [[1, 2, 3], [2, 3, 1]]})
    change = {"topic": "t", "topic_id": rec["topic_id"], "partition": 0, "leader": 2,
              "from_leader": 1, "from_epoch": 1, "leader_epoch": 2, "isr": [2, 3]}
    stale = {**change, "partition": 1, "from_epoch": 0, "leader": 3, "leader_epoch": 1}
    applied = state.apply({"op": "elect_leaders", "time_ms": 2, "changes": [change, stale]})
    assert applied == [change]
    t = state.topic("t")
    assert (t["placement"], t["leader_epochs"], t["isr"]) == \
        ([2, 2], [2, 1], [[2, 3], [2, 3, 1]])
    assert state.apply({"op": "elect_leaders", "time_ms": 3, "changes": [change]}) == [], \
        "the same election again is stale"


def test_a_brokers_incarnation_is_remembered_across_reopen(tmp_path):
    s = MetaState(tmp_path / "m")
    s.apply({"op": "register_broker", "time_ms": 1, "broker_id": 3, "address": "h:1",
             "incarnation": "first"})
    s.apply({"op": "register_broker", "time_ms": 2, "broker_id": 4, "address": "h:2"})
    s.close()
    s = MetaState(tmp_path / "m")
    assert (s.incarnation(3), s.incarnation(4), s.incarnation(5)) == ("first", "", "")
    s.apply({"op": "register_broker", "time_ms": 3, "broker_id": 3, "address": "h:9"})
    assert s.incarnation(3) == "first", "a command without one keeps the last"
    s.close()


def test_each_command_belongs_to_exactly_one_part_of_the_state(tmp_path):
    """The parts' handlers are merged into one table: a name two parts used would silently
    route one part's command to the other."""
    env = lmdb.open(str(tmp_path), max_dbs=1)
    db = env.open_db(b"x")
    topics = TopicRecords(env, db, db, SeqLog(env, db, 1))
    parts = [topics.handlers(), BrokerRecords(env, db, topics).handlers(),
             GroupRecords(env, db).handlers(), Principals(env, db, db, db).handlers()]
    ops = [op for handlers in parts for op in handlers] + ["lead", "audit"]
    assert len(ops) == len(set(ops))
    env.close()


def test_the_records_on_disk_keep_their_bytes(tmp_path):
    """An existing data dir and every Raft snapshot must keep loading: the databases, keys and
    value encoding (sorted compact JSON, big-endian sequence keys) are a format."""
    s = MetaState(tmp_path / "m", map_size=1 << 24)
    s.apply({"op": "register_broker", "time_ms": 1, "broker_id": 7, "address": "h:1"},
            index=1, term=2)
    create(s, "t")
    s.apply({"op": "delete_topic", "time_ms": 12, "topic": "t", "audit": {"action": "d"}})
    s.apply({"op": "record_group", "time_ms": 3, "group": "g", "topics": ["a"]})
    s.close()
    env = lmdb.open(str(tmp_path / "m"), max_dbs=8, readonly=True, lock=False)

    def raw(db, key):
        with env.begin(db=env.open_db(db, create=False)) as txn:
            return bytes(txn.get(key))
    assert raw(b"brokers", b"7") == b'{"address":"h:1","incarnation":"","time_ms":1}'
    assert raw(b"tombstones", (1).to_bytes(8, "big")) == b'{"time_ms":12,"topic":"t","topic_id":1}'
    assert raw(b"audit", (1).to_bytes(8, "big")) == b'{"action":"d","time_ms":12}'
    assert raw(b"groups", b"g") == b'{"created_ms":3,"topics":["a"],"updated_ms":3}'
    assert raw(b"meta", b"applied") == b'{"index":1,"term":2}'
    assert raw(b"meta", b"next_topic_id") == b"2"
    env.close()
