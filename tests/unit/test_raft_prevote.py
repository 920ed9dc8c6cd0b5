"""Pre-vote and leader stickiness: the pure decisions (master/prevote.py), then three Raft
nodes of master/raft.py in this process whose links go through silenceable proxies."""
from __future__ import annotations

import time

import pytest

from master.prevote import Campaign, Position, disruptive, would_vote
from master.raft import RaftLog, RaftSettings
from master.state import MetaState
from tests.integration.test_consumer_common import wait_for
from tests.raftmesh import RaftMesh

LEASE = 0.8


def test_a_leaderless_voter_would_vote_for_a_candidate_as_current_as_itself():
    voter = Position(term=4, last_index=10, last_term=4)
    for candidate in (Position(4, 10, 4), Position(4, 12, 4), Position(5, 2, 5)):
        assert would_vote(candidate, voter, leader_heard_s_ago=None, lease_s=LEASE)
        assert would_vote(candidate, voter, leader_heard_s_ago=LEASE, lease_s=LEASE)


def test_a_voter_that_follows_a_live_leader_or_is_one_would_not_vote():
    voter = candidate = Position(4, 10, 4)
    assert not would_vote(candidate, voter, leader_heard_s_ago=0.3, lease_s=LEASE)
    assert not would_vote(candidate, voter, None, LEASE, is_leader=True)


def test_a_candidate_missing_entries_or_behind_in_term_would_not_win():
    voter = Position(term=4, last_index=10, last_term=4)
    assert not would_vote(Position(4, 9, 4), voter, None, LEASE)  # shorter log, same term
    assert not would_vote(Position(4, 30, 3), voter, None, LEASE)  # older last entry
    assert not would_vote(Position(3, 10, 4), voter, None, LEASE)  # its next term is ours
    assert would_vote(Position(3, 10, 4), Position(3, 10, 4), None, LEASE)


def test_only_a_vote_request_that_would_depose_a_live_leader_is_disruptive():
    assert disruptive(9, 4, leader_heard_s_ago=0.1, lease_s=LEASE)
    assert disruptive(9, 4, None, LEASE, is_leader=True)
    assert not disruptive(9, 4, leader_heard_s_ago=1.0, lease_s=LEASE)  # the leader is gone
    assert not disruptive(4, 4, leader_heard_s_ago=0.1, lease_s=LEASE)  # deposes nobody


def fixed(low: float, high: float) -> float:
    return low


def test_a_campaign_needs_a_majority_of_one_round_and_uses_it_once():
    c = Campaign(voters=3, retry_s=(0.2, 0.4), rand=fixed)
    assert c.due(10.0)
    first = c.start(term=4, now=10.0)
    assert not c.due(10.1) and c.due(10.2)  # the round expired unanswered
    second = c.start(term=4, now=10.2)
    assert c.failed_rounds == 1
    assert not c.answer(first.number, 4, "b", True, 10.21)  # an old round's answer
    assert not c.answer(second.number, 3, "b", True, 10.21)  # asked at another term
    assert not c.answer(second.number, 4, "b", False, 10.21)
    assert not c.take(10.21, fresh_s=LEASE)
    assert c.answer(second.number, 4, "b", True, 10.22)  # with itself: 2 of 3
    assert not c.due(10.5)  # a majority in hand: no need to ask
    assert c.take(10.3, fresh_s=LEASE)
    assert not c.take(10.3, fresh_s=LEASE)  # one election per majority
    assert c.due(10.3) and c.failed_rounds == 0


def test_a_stale_majority_is_not_used_and_five_masters_need_two_yeses():
    c = Campaign(voters=5, retry_s=(0.2, 0.4), rand=fixed)
    r = c.start(term=7, now=0.0)
    assert not c.answer(r.number, 7, "b", True, 0.01)
    assert not c.answer(r.number, 7, "b", True, 0.01)  # the same peer twice counts once
    assert c.answer(r.number, 7, "c", True, 0.02)
    assert not c.take(0.02 + LEASE, fresh_s=LEASE)  # peers may have heard a leader since
    assert c.due(1.0)


def test_a_lone_master_is_its_own_majority():
    c = Campaign(voters=1, retry_s=(0.2, 0.4), rand=fixed)
    c.start(term=0, now=0.0)
    assert c.take(0.0, fresh_s=LEASE)


class Meshed:
    """Three RaftLogs whose every link goes through a proxy that can be silenced."""

    def __init__(self, root, mesh: RaftMesh) -> None:
        self.mesh = mesh
        self.nodes = []
        for i in range(3):
            settings = RaftSettings(node=mesh.node(i), peers=tuple(mesh.peers(i)),
                                    password="s3cret", data_dir=str(root / f"m{i}"))
            self.nodes.append(RaftLog(settings, MetaState(root / f"m{i}" / "meta")))

    def leader(self, among=None) -> RaftLog:
        nodes = self.nodes if among is None else among
        return wait_for(lambda: next((n for n in nodes if n.is_leader()), None), 15, "a leader")

    def terms(self) -> list[int]:
        return [n.status()["term"] for n in self.nodes]

    def close(self) -> None:
        for n in self.nodes:
            n.close()
            n.state.close()


@pytest.fixture
def meshed(tmp_path):
    with RaftMesh(3) as mesh:
        m = Meshed(tmp_path, mesh)
        try:
            yield m
        finally:
            m.close()


def test_a_cut_off_leader_keeps_its_term_and_follows_the_new_leader_after_the_heal(meshed):
    old = meshed.leader()
    wait_for(lambda: len(set(meshed.terms())) == 1, 10, "every node at the leader's term")
    term = old.status()["term"]
    meshed.mesh.isolate(meshed.nodes.index(old))
    cut_at = time.monotonic()
    others = [n for n in meshed.nodes if n is not old]
    new = meshed.leader(others)
    assert time.monotonic() - cut_at < 5
    new_term = new.status()["term"]
    # several election timeouts of the cut-off node, past its step-down (3 s)
    watch(6, lambda: old.status()["term"] == term, "the cut-off node kept its term")
    assert not old.is_leader()
    meshed.mesh.heal()
    wait_for(lambda: old.leader_node() and old.status()["term"] == new_term, 10,
             "the healed node following the new leader")
    watch(3, lambda: new.is_leader() and meshed.terms() == [new_term] * 3,
          "the new leader kept leading, in its term")


def watch(seconds: float, holds, what: str) -> None:
    """Fail as soon as ``holds()`` is false during the next ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert holds(), what
        time.sleep(0.05)


def test_a_dead_leader_is_still_replaced_within_seconds(meshed):
    old = meshed.leader()
    wait_for(lambda: all(n.leader_node() for n in meshed.nodes), 10, "everyone follows")
    meshed.nodes.remove(old)
    old.close()
    old.state.close()
    killed_at = time.monotonic()
    meshed.leader()
    assert time.monotonic() - killed_at < 4  # election timeout 0.8-1.6 s, plus a pre-vote
