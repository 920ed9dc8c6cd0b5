"""Broadcast groups without processes: the master's membership rules (every partition to every
instance, nobody rebalanced, one live member per instance id, one mode per group), the
instances' own offsets in the offset store, and the client's settings and default id."""
from __future__ import annotations

import pytest

from lib import PullConsumer, PushConsumer
from lib.consumer.instance import default_instance_id
from lib.errors import (
    GroupModeConflict,
    InstanceInUse,
    InvalidArgument,
    InvalidName,
)
from lib.names import offsets_owner
from master.groups import GroupCoordinator, SessionLimits
from storage.offsets import OffsetStore


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def env():
    clock = Clock()
    topics = {"t": 4, "u": 2}
    events: list[str] = []
    coord = GroupCoordinator(3, topics.get, SessionLimits(10_000, 1000, 60_000), clock=clock,
                             wall=clock, on_rebalance=lambda g, r, gen: events.append(r))
    return coord, clock, topics, events


def test_every_broadcast_instance_gets_every_partition_and_nobody_rebalances(env):
    coord, _, _, events = env
    a = coord.join("g", ["t", "u"], mode="broadcast", instance_id="a")
    b = coord.join("g", ["t"], mode="broadcast", instance_id="b")
    assert a.assignments == {"t": [0, 1, 2, 3], "u": [0, 1]}
    assert b.assignments == {"t": [0, 1, 2, 3]}
    assert events == []
    before = coord.heartbeat("g", a.member_id)
    coord.leave("g", b.member_id)
    after = coord.heartbeat("g", a.member_id)
    assert (after.generation, after.assignments) == (before.generation, before.assignments)
    assert coord.mode("g") == "broadcast"


def test_new_partitions_reach_broadcast_instances_at_their_next_heartbeat(env):
    coord, _, topics, _ = env
    a = coord.join("g", ["u"], mode="broadcast", instance_id="a")
    topics["u"] = 3
    coord.topics_changed({"u"})
    assert coord.heartbeat("g", a.member_id).assignments == {"u": [0, 1, 2]}


def test_a_second_live_instance_with_the_same_id_is_refused_until_the_first_expires(env):
    coord, clock, _, _ = env
    coord.join("g", ["t"], mode="broadcast", instance_id="a", session_ms=10_000)
    clock.now += 4_000
    with pytest.raises(InstanceInUse, match="already has a live instance 'a'") as err:
        coord.join("g", ["t"], mode="broadcast", instance_id="a")
    assert err.value.expires_in_ms == 6_000
    clock.now += 6_001
    coord.expire()
    assert coord.join("g", ["t"], mode="broadcast", instance_id="a").assignments == {
        "t": [0, 1, 2, 3]}


def test_a_member_rejoining_with_its_own_id_keeps_its_instance(env):
    coord, _, _, _ = env
    a = coord.join("g", ["t"], mode="broadcast", instance_id="a")
    again = coord.join("g", ["t"], member_id=a.member_id, mode="broadcast", instance_id="a")
    assert again.member_id == a.member_id


def test_a_group_is_in_one_mode_at_a_time(env):
    coord, _, _, _ = env
    member = coord.join("g", ["t"]).member_id
    with pytest.raises(GroupModeConflict, match="clustering mode"):
        coord.join("g", ["t"], mode="broadcast", instance_id="a")
    coord.leave("g", member)
    coord.join("g", ["t"], mode="broadcast", instance_id="a")
    with pytest.raises(GroupModeConflict, match="broadcast mode"):
        coord.join("g", ["t"])


@pytest.mark.parametrize("mode, instance, error, words", [
    ("fanout", "a", InvalidArgument, "mode must be"),
    ("broadcast", "", InvalidName, "invalid instance id"),
    ("broadcast", "a/b", InvalidName, "invalid instance id"),
    ("broadcast", "x" * 65, InvalidName, "longer than 64"),
    ("clustering", "a", InvalidArgument, "instance_id is for broadcast"),
])
def test_bad_broadcast_joins_are_refused_naming_the_problem(env, mode, instance, error, words):
    coord, _, _, _ = env
    with pytest.raises(error, match=words):
        coord.join("g", ["t"], mode=mode, instance_id=instance)
    assert coord.describe("g") == (0, [])


def test_instances_offsets_are_kept_apart_from_the_groups_and_each_others(tmp_path):
    store = OffsetStore(tmp_path / "offsets", map_size=1 << 24)
    try:
        store.commit("g", "t", {0: 5})
        store.commit(offsets_owner("g", "a"), "t", {0: 7, 1: 2})
        store.commit(offsets_owner("g", "b"), "t", {0: 9})
        store.commit(offsets_owner("g", "b"), "t-other", {0: 1})
        store.commit(offsets_owner("g2", "a"), "t", {0: 1})
        assert {p: c.offset for p, c in store.fetch("g", "t").items()} == {0: 5}
        got = store.instance_offsets("g", "t")
        assert {i: {p: c.offset for p, c in ps.items()} for i, ps in got.items()} == {
            "a": {0: 7, 1: 2}, "b": {0: 9}}
        assert store.instance_offsets("g", "t", [1]).keys() == {"a"}
        assert store.delete("g@a", "t") == 2
    finally:
        store.close()


def test_an_offset_key_too_long_for_the_store_is_refused_naming_the_names(tmp_path):
    store = OffsetStore(tmp_path / "offsets", map_size=1 << 24)
    try:
        with pytest.raises(InvalidArgument, match="shorter group, instance id or topic"):
            store.commit(offsets_owner("g" * 240, "i" * 64), "t" * 240, {0: 1})
    finally:
        store.close()


def test_the_default_instance_id_is_the_client_id_else_the_host():
    assert default_instance_id("billing-1", host="h") == "billing-1"
    assert default_instance_id("", host="web 3.example") == "web-3.example"
    assert default_instance_id("", host="") == "instance"


@pytest.mark.parametrize("cls, settings, words", [
    (PullConsumer, {"mode": "broadcast"}, "needs a group"),
    (PullConsumer, {"group": "g", "mode": "broadcast", "instance_id": "a b"},
     "invalid instance id"),
    (PullConsumer, {"group": "g", "instance_id": "a"}, "only for mode='broadcast'"),
    (PushConsumer, {"group": "g", "mode": "everyone"}, "mode must be"),
])
def test_consumer_settings_for_broadcast_are_checked(cls, settings, words):
    with pytest.raises(InvalidArgument, match=words):
        cls("127.0.0.1:1", **settings)
