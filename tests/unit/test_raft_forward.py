"""RaftLog.forward: a standby hands a command to the leader through Raft, without waiting
(three nodes of master/raft.py in this process)."""
from __future__ import annotations

import queue

from tests.integration.test_consumer_common import wait_for
from tests.unit.test_raft_log import create, trio  # noqa: F401 - the fixture

AUDIT = {"op": "audit", "time_ms": 7, "audit": {
    "principal": "-", "peer": "10.0.0.9", "action": "refused", "target": "ListTopics",
    "details": "{\"count\": 5}"}}


def test_a_standby_forwards_a_command_that_every_master_applies(trio):  # noqa: F811
    trio.leader()
    standby = next(n for n in trio.nodes.values() if not n.is_leader())
    wait_for(lambda: standby.leader_node(), 10, "the standby knows the leader")
    done: queue.Queue = queue.Queue()
    standby.forward(AUDIT, done.put)
    assert done.get(timeout=10) is None
    wait_for(lambda: all(any(e["target"] == "ListTopics" and e["time_ms"] == 7
                             for e in n.state.audit(10)) for n in trio.nodes.values()),
             10, "the forwarded entry on every master")


def test_a_forwarded_command_the_state_refuses_reports_why(trio):  # noqa: F811
    trio.leader().submit(create("taken"))
    standby = next(n for n in trio.nodes.values() if not n.is_leader())
    wait_for(lambda: standby.state.topic("taken"), 10, "the topic on the standby")
    done: queue.Queue = queue.Queue()
    standby.forward(create("taken"), done.put)
    assert "taken" in done.get(timeout=10)
