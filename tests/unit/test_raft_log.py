"""RaftLog (the pysyncobj adapter) with three nodes in this process, on 127.0.0.1 ports."""
from __future__ import annotations

import time

import pytest

from lib.errors import NotLeader, TopicExists, TubeqError
from lib.process import free_ports
from master.raft import RaftLog, RaftSettings
from master.state import MetaState
from tests.integration.test_consumer_common import wait_for


class Trio:
    def __init__(self, root, **extra) -> None:
        self.root = root
        self.addrs = [f"127.0.0.1:{p}" for p in free_ports(3)]
        self.extra = extra
        self.nodes: dict[int, RaftLog] = {}
        for i in range(3):
            self.start(i)

    def start(self, i: int, password: str = "s3cret") -> RaftLog:
        state = MetaState(self.root / f"m{i}" / "meta")
        settings = RaftSettings(
            node=self.addrs[i], peers=tuple(a for a in self.addrs if a != self.addrs[i]),
            password=password, data_dir=str(self.root / f"m{i}"), election_min_s=0.4,
            election_max_s=0.8, **self.extra)
        self.nodes[i] = RaftLog(settings, state)
        return self.nodes[i]

    def stop(self, i: int) -> None:
        node = self.nodes.pop(i)
        node.close()
        node.state.close()

    def leader(self) -> RaftLog:
        return wait_for(lambda: next((n for n in self.nodes.values() if n.is_leader()), None), 15)

    def close(self) -> None:
        for i in list(self.nodes):
            self.stop(i)


@pytest.fixture
def trio(tmp_path):
    t = Trio(tmp_path)
    yield t
    t.close()


def create(name: str) -> dict:
    return {"op": "create_topic", "time_ms": 1, "topic": name,
            "settings": {"partitions": 1}, "placement": [1]}


def test_a_committed_command_is_applied_on_every_master(trio):
    leader = trio.leader()
    record = leader.submit(create("orders"))
    assert record["topic"] == "orders" and record["topic_id"] == 1
    wait_for(lambda: all(n.state.topic("orders") for n in trio.nodes.values()), 15)
    indexes = {n.state.applied_index for n in trio.nodes.values()}
    assert len(indexes) == 1 and indexes.pop() > 1


def test_errors_of_a_command_come_back_to_the_caller_and_change_nothing(trio):
    leader = trio.leader()
    leader.submit(create("dup"))
    with pytest.raises(TopicExists, match="dup"):
        leader.submit(create("dup"))
    wait_for(lambda: len({n.state.applied_index for n in trio.nodes.values()}) == 1, 15)
    assert all(len(n.state.topics()) == 1 for n in trio.nodes.values())


def test_a_standby_refuses_to_submit(trio):
    trio.leader()
    standby = next(n for n in trio.nodes.values() if not n.is_leader())
    # A standby learns who leads from the leader's first append, which may come a moment
    # after the leader knows it won (seen once on a loaded machine).
    wait_for(lambda: standby.leader_node() in trio.addrs, 15)
    with pytest.raises(NotLeader):
        standby.submit(create("x"))


def test_restart_replays_nothing_twice_and_a_snapshot_catches_up_a_lagging_master(tmp_path):
    trio = Trio(tmp_path, compaction_entries=20)
    try:
        leader = trio.leader()
        lagging = next(i for i, n in trio.nodes.items() if n is not leader)
        trio.stop(lagging)
        for k in range(60):  # > compaction_entries: the log before a snapshot goes
            leader.submit(create(f"t{k}"))
        leader.force_compaction()
        wait_for(lambda: (tmp_path / f"m{next(i for i, n in trio.nodes.items() if n is leader)}"
                          / "raft" / "snapshot").is_file(), 15)
        time.sleep(0.5)
        leader.submit(create("after-snapshot"))
        node = trio.start(lagging)
        wait_for(lambda: node.state.topic("after-snapshot") is not None, 20)
        assert set(node.state.topics()) == set(leader.state.topics())
        assert (tmp_path / f"m{lagging}" / "raft" / "snapshot").is_file()  # sent by the leader
        ids = {r["topic_id"] for r in node.state.topics().values()}
        assert ids == {r["topic_id"] for r in leader.state.topics().values()}
        # every master restarts: the same state, nothing applied twice
        before = {i: (n.state.applied_index, dict(n.state.topics())) for i, n in
                  trio.nodes.items()}
        for i in list(trio.nodes):
            trio.stop(i)
        for i in range(3):
            trio.start(i)
        leader = trio.leader()
        leader.submit(create("post-restart"))
        for i, n in trio.nodes.items():
            wait_for(lambda n=n: n.state.topic("post-restart") is not None, 15)
            assert {k: v for k, v in n.state.topics().items() if k != "post-restart"} == \
                before[i][1]
            assert n.state.topic("post-restart")["topic_id"] == 62  # 60 + after-snapshot + 1
    finally:
        trio.close()


def test_a_master_with_the_wrong_password_never_joins(tmp_path):
    trio = Trio.__new__(Trio)
    trio.root, trio.extra, trio.nodes = tmp_path, {}, {}
    trio.addrs = [f"127.0.0.1:{p}" for p in free_ports(3)]
    try:
        trio.start(0, password="right")
        trio.start(1, password="wrong")
        time.sleep(3)
        assert not any(n.is_leader() for n in trio.nodes.values())  # no majority of 3
        trio.start(2, password="right")
        leader = trio.leader()
        assert leader is not trio.nodes[1]
    finally:
        trio.close()


def test_the_password_is_required(tmp_path):
    with pytest.raises(TubeqError, match="password"):
        RaftLog(RaftSettings(node="127.0.0.1:1", peers=("127.0.0.1:2",),
                             data_dir=str(tmp_path)), MetaState(tmp_path / "meta"))
