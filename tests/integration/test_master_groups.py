"""Consumer groups on a real master process: join, rebalance, expiry, leave, reset, describe."""
from __future__ import annotations

import time

import pytest

from lib import errors
from lib.proto import admin_pb2 as apb
from lib.proto import master_pb2 as mpb
from tests.integration.test_master_common import MasterSession, Repeater, wait_for


@pytest.fixture
def m(tmp_path):
    session = MasterSession(tmp_path / "m")
    keep_brokers = None
    try:  # a failing setup must stop the master too
        session.register(1)
        session.register(2)
        keep_brokers = Repeater(lambda: (session.heartbeat(1), session.heartbeat(2)), 0.2)
        session.call(session.admin.CreateTopic, apb.CreateTopicRequest(
            topic="t", settings=mpb.TopicSettings(partitions=6)))
        yield session
    finally:
        if keep_brokers is not None:
            keep_brokers.close()
        session.close()


def join(m, group="g", topics=("t",), member_id="", session_ms=0):
    return m.call(m.master.JoinGroup, mpb.JoinGroupRequest(
        group=group, topics=list(topics), member_id=member_id, client_host="tester",
        session_timeout_ms=session_ms))


def beat(m, state, group="g"):
    return m.call(m.master.GroupHeartbeat, mpb.GroupHeartbeatRequest(
        group=group, member_id=state.member_id, generation=state.generation))


def owned(state, topic="t"):
    return sorted(p for a in state.assignments if a.topic == topic for p in a.partitions)


def test_two_then_three_members_rebalance_at_once_evenly_and_sticky(m):
    a = join(m)
    assert a.member_id.startswith("g-") and owned(a) == [0, 1, 2, 3, 4, 5]
    assert a.generation >> 32 == m.epoch and a.heartbeat_interval_ms == 10_000 // 3
    assert [r.topic for r in a.routes] == ["t"] and len(a.routes[0].partitions) == 6
    b = join(m)
    a2 = beat(m, a)
    assert a2.generation == b.generation > a.generation
    assert sorted(owned(a2) + owned(b)) == list(range(6)) and len(owned(b)) == 3
    c = join(m)
    a3, b3 = beat(m, a2), beat(m, b)
    assert a3.generation == b3.generation == c.generation > b.generation
    assert [len(owned(s)) for s in (a3, b3, c)] == [2, 2, 2]
    assert set(owned(a3)) <= set(owned(a2)) and set(owned(b3)) <= set(owned(b)), "sticky"


def test_silent_member_expires_within_its_session_and_partitions_move(m):
    a = join(m, session_ms=1000)
    b = join(m, session_ms=10_000)
    start = time.monotonic()
    keep_b = Repeater(lambda: beat(m, b), 0.2)
    try:
        moved = wait_for(lambda: owned(beat(m, b)) == list(range(6)), 5.0,
                         "the silent member's partitions to move")
        elapsed = time.monotonic() - start
    finally:
        keep_b.close()
    assert moved and elapsed < 1.0 + 1.0, f"moved after {elapsed:.2f} s (session 1 s)"
    with pytest.raises(errors.UnknownMember):
        beat(m, a)


def test_leave_hands_partitions_to_the_rest_at_once(m):
    a, b = join(m), join(m)
    m.call(m.master.LeaveGroup, mpb.LeaveGroupRequest(group="g", member_id=a.member_id))
    b2 = beat(m, b)
    assert owned(b2) == list(range(6)) and b2.generation > b.generation
    with pytest.raises(errors.UnknownMember):
        beat(m, a)


def test_join_refuses_unknown_topic_bad_names_and_bad_session(m):
    with pytest.raises(errors.UnknownTopic):
        join(m, topics=["nope"])
    with pytest.raises(errors.InvalidName):
        join(m, group="a/b")
    with pytest.raises(errors.InvalidArgument, match="session_timeout_ms"):
        join(m, session_ms=10)
    with pytest.raises(errors.UnknownMember):
        m.call(m.master.GroupHeartbeat, mpb.GroupHeartbeatRequest(group="g", member_id="x"))


def test_growing_a_subscribed_topic_rebalances_at_once(m):
    a = join(m)
    m.call(m.admin.AlterTopic, apb.AlterTopicRequest(
        topic="t", settings=mpb.TopicSettings(partitions=8)))
    a2 = beat(m, a)
    assert owned(a2) == list(range(8)) and a2.generation > a.generation


def test_reset_is_refused_while_members_are_live(m):
    join(m)
    with pytest.raises(errors.GroupNotEmpty):
        m.call(m.admin.ResetGroupOffsets,
               apb.ResetGroupOffsetsRequest(group="g", topic="t", earliest=True))
    with pytest.raises(errors.InvalidArgument, match="target"):
        m.call(m.admin.ResetGroupOffsets, apb.ResetGroupOffsetsRequest(group="h", topic="t"))


def test_describe_and_list_groups_show_members_and_assignments(m):
    a, b = join(m), join(m)
    desc = m.call(m.admin.DescribeGroup, apb.DescribeGroupRequest(group="g"))
    assert desc.generation == b.generation
    assert sorted(x.member_id for x in desc.members) == sorted([a.member_id, b.member_id])
    assert all(x.client_host == "tester" and x.last_heartbeat_ms > 0 for x in desc.members)
    assert sorted((p.topic, p.partition) for p in desc.partitions) == [("t", p)
                                                                      for p in range(6)]
    owners = {p.partition: p.member_id for p in desc.partitions}
    assert set(owners.values()) == {a.member_id, b.member_id}
    assert m.call(m.admin.ListGroups, apb.ListGroupsRequest()).groups == ["g"]


def test_generations_grow_across_a_master_restart(m):
    a = join(m)
    m.restart()
    with pytest.raises(errors.UnknownMember):
        beat(m, a)
    again = join(m)
    assert again.generation > a.generation and again.generation >> 32 == m.epoch
    assert m.call(m.admin.ListGroups, apb.ListGroupsRequest()).groups == ["g"]
