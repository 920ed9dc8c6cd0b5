"""The master's Kafka group coordinator (master/kafka_groups.py) on a fake clock: joins gather
every member before a generation completes, polls of a pending join never start another
round, the leader's assignments reach every member, sessions expire, commits are fenced."""
from __future__ import annotations

from master.kafka_groups import (
    COMPLETING,
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    REBALANCE_IN_PROGRESS,
    STABLE,
    UNKNOWN_MEMBER_ID,
    KafkaGroups,
)

RANGE = [("range", b"sub")]


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def coordinator(tubeq_live=lambda group: False):
    clock = Clock()
    return KafkaGroups(3, tubeq_live, clock, initial_delay_ms=500), clock


def join(groups, member="", again=False, protocols=RANGE, session_ms=10_000):
    return groups.join("g", member, "client", "host", "consumer", protocols, session_ms,
                       30_000, again)


def test_a_first_member_waits_the_initial_delay_then_leads_alone():
    groups, clock = coordinator()
    first = join(groups)
    assert first.pending and first.member_id
    clock.now += 100
    assert join(groups, first.member_id, again=True).pending
    clock.now += 500
    done = join(groups, first.member_id, again=True)
    assert (done.pending, done.generation, done.leader) == (False, 1, first.member_id)
    assert done.members == ((first.member_id, b"sub"),)


def test_three_members_rebalance_and_polls_start_no_new_round():
    groups, clock = coordinator()
    a = join(groups).member_id
    clock.now += 600
    assert join(groups, a, again=True).generation == 1
    assert groups.sync("g", a, 1, {a: b"all"}).assignment == b"all"
    b = join(groups).member_id  # a new member: a rebalance starts, a must rejoin
    assert groups.heartbeat("g", a, 1).error == REBALANCE_IN_PROGRESS
    c = join(groups).member_id
    assert join(groups, b, again=True).pending
    leader = join(groups, a)  # a rejoins: everyone is back, the round completes
    assert (leader.generation, leader.leader) == (2, a) and len(leader.members) == 3
    for member in (b, c):  # the others' polls get the same round, and start none
        answer = join(groups, member, again=True)
        assert (answer.pending, answer.generation, answer.members) == (False, 2, ())
    assert join(groups, a, again=True).generation == 2  # the leader's poll too
    assert groups.sync("g", b, 2, {}).pending  # until the leader hands out assignments
    groups.sync("g", a, 2, {a: b"pa", b: b"pb", c: b"pc"})
    assert groups.sync("g", b, 2, {}).assignment == b"pb"
    assert groups.sync("g", c, 2, {}).assignment == b"pc"
    assert groups.heartbeat("g", c, 2).error == 0
    assert groups.described("g").state == STABLE


def test_a_member_that_stops_heartbeating_is_dropped_and_the_others_rebalance():
    groups, clock = coordinator()
    a = join(groups).member_id
    b = join(groups).member_id
    clock.now += 600
    assert join(groups, a, again=True).generation == 1
    assert join(groups, b, again=True).generation == 1
    groups.sync("g", a, 1, {a: b"1", b: b"2"})
    clock.now += 8_000
    assert groups.heartbeat("g", a, 1).error == 0
    clock.now += 3_000  # b is silent past its 10 s session
    assert groups.heartbeat("g", a, 1).error == REBALANCE_IN_PROGRESS
    assert groups.heartbeat("g", b, 1).error == UNKNOWN_MEMBER_ID
    again = join(groups, a)
    assert (again.generation, again.members) == (2, ((a, b"sub"),))


def test_commits_are_checked_against_the_member_and_generation():
    groups, clock = coordinator()
    a = join(groups).member_id
    clock.now += 600
    join(groups, a, again=True)
    assert groups.check("g", a, 1).error == REBALANCE_IN_PROGRESS  # awaiting the assignment
    groups.sync("g", a, 1, {a: b"x"})
    assert groups.check("g", a, 1).fencing_generation == (3 << 32) | 1
    assert groups.check("g", a, 0).error == ILLEGAL_GENERATION
    assert groups.check("g", "ghost", 1).error == UNKNOWN_MEMBER_ID
    assert groups.check("g", "", -1).error == UNKNOWN_MEMBER_ID  # live members: not manual
    b = join(groups).member_id  # preparing a rebalance: a may still commit what it read
    assert groups.check("g", a, 1).error == 0
    assert groups.leave("g", [a, b]).error == 0
    assert groups.check("g", "", -1).fencing_generation == 0  # empty: manual commits pass


def test_a_group_is_kafka_or_tubeq_managed_and_protocols_must_agree():
    groups, _ = coordinator(tubeq_live=lambda group: group == "g")
    assert join(groups).error == INCONSISTENT_GROUP_PROTOCOL
    groups, clock = coordinator()
    a = join(groups).member_id
    assert groups.live("g")
    refused = groups.join("g", "", "c", "h", "connect", RANGE, 10_000, 30_000)
    assert refused.error == INCONSISTENT_GROUP_PROTOCOL
    b = join(groups, protocols=[("roundrobin", b"rr"), ("range", b"r2")]).member_id
    clock.now += 600
    first = join(groups, a, again=True)
    join(groups, b, again=True)
    assert first.protocol == "range" and dict(first.members)[b] == b"r2"
    assert groups.described("g").state == COMPLETING
    assert join(groups, "unknown-member").error == UNKNOWN_MEMBER_ID
