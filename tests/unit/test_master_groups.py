"""Group coordination with a fake clock: join, rebalance at once, heartbeat, expiry, leave."""
from __future__ import annotations

import pytest

from lib.errors import InvalidArgument, InvalidName, UnknownMember, UnknownTopic
from master.groups import GroupCoordinator, SessionLimits


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def env():
    clock = Clock()
    topics = {"t": 6, "u": 2}
    events = []
    coord = GroupCoordinator(3, topics.get, SessionLimits(10_000, 1000, 60_000), clock=clock,
                             wall=clock, on_rebalance=lambda g, r, gen: events.append(r))
    return coord, clock, topics, events


def parts(view, topic="t"):
    return view.assignments.get(topic, [])


def test_join_assigns_member_id_and_generation_with_epoch(env):
    coord, _, _, events = env
    view = coord.join("g", ["t"])
    assert view.member_id.startswith("g-") and len(view.member_id) == len("g-") + 8
    assert view.generation >> 32 == 3 and view.generation & 0xFFFFFFFF == 1
    assert parts(view) == [0, 1, 2, 3, 4, 5] and view.heartbeat_interval_ms == 10_000 // 3
    assert events == ["join"]


def test_second_join_rebalances_at_once_and_generations_grow(env):
    coord, _, _, _ = env
    a = coord.join("g", ["t"])
    b = coord.join("g", ["t"])
    a2 = coord.heartbeat("g", a.member_id)
    assert b.generation == a2.generation > a.generation
    assert sorted(parts(a2) + parts(b)) == list(range(6)) and len(parts(b)) == 3
    c = coord.join("g", ["t"])
    views = [coord.heartbeat("g", m.member_id) for m in (a, b)] + [c]
    assert [len(parts(v)) for v in views] == [2, 2, 2]
    assert set(parts(views[0])) <= set(parts(a2)), "sticky: a keeps what it had"


def test_rejoin_with_same_topics_does_not_rebalance(env):
    coord, _, _, events = env
    a = coord.join("g", ["t"])
    again = coord.join("g", ["t"], member_id=a.member_id)
    assert again.member_id == a.member_id and again.generation == a.generation
    coord.join("g", ["t", "u"], member_id=a.member_id)
    assert events == ["join", "topics_changed"]


def test_silent_member_expires_and_partitions_move(env):
    coord, clock, _, events = env
    a = coord.join("g", ["t"], session_ms=2000)
    b = coord.join("g", ["t"], session_ms=5000)
    clock.now += 2001
    coord.heartbeat("g", b.member_id)
    assert coord.expire() == [("g", a.member_id)]
    assert parts(coord.heartbeat("g", b.member_id)) == list(range(6))
    with pytest.raises(UnknownMember):
        coord.heartbeat("g", a.member_id)
    assert events[-1] == "expired"


def test_leave_rebalances_and_unknown_leave_is_harmless(env):
    coord, _, _, _ = env
    a = coord.join("g", ["t"])
    b = coord.join("g", ["t"])
    coord.leave("g", a.member_id)
    coord.leave("g", "nobody")
    coord.leave("other", "nobody")
    assert parts(coord.heartbeat("g", b.member_id)) == list(range(6))
    assert coord.live_groups() == ["g"] and coord.has_members("g")
    coord.leave("g", b.member_id)
    assert coord.live_groups() == [] and not coord.has_members("g")


def test_grown_topic_rebalances_subscribed_groups(env):
    coord, _, topics, _ = env
    a = coord.join("g", ["t"])
    topics["t"] = 8
    coord.topics_changed({"t"})
    view = coord.heartbeat("g", a.member_id)
    assert parts(view) == list(range(8)) and view.generation > a.generation


def test_bad_requests_are_refused(env):
    coord, _, _, _ = env
    with pytest.raises(UnknownTopic):
        coord.join("g", ["nope"])
    with pytest.raises(InvalidName):
        coord.join("../g", ["t"])
    with pytest.raises(InvalidName):
        coord.join("g", ["bad/topic"])
    with pytest.raises(InvalidArgument):
        coord.join("g", [])
    with pytest.raises(InvalidArgument):
        coord.join("g", ["t"], session_ms=10)
    with pytest.raises(UnknownMember):
        coord.heartbeat("g", "g-12345678")
    assert coord.live_groups() == []


def test_generation_never_goes_back_when_a_group_empties_and_returns(env):
    coord, _, _, _ = env
    a = coord.join("g", ["t"])
    coord.leave("g", a.member_id)
    b = coord.join("g", ["t"])
    assert b.generation > a.generation
