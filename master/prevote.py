"""Raft pre-vote and leader stickiness (Raft thesis §9.6), as pure decisions. Unit-tested.

Why: a master cut off from the others keeps timing out and standing for election, and plain
Raft raises its term each time. When the network heals, that higher term deposes the healthy
leader the majority elected meanwhile: one more election, one more master epoch and one more
rebalance of every consumer group, for a fault that is already over. etcd and HashiCorp Raft
prevent it the thesis's way, and so does master/raft.py's adapter, with these decisions:

* **Pre-vote.** Before it raises its term, a master whose election timer fired asks its peers
  whether they *would* vote for it at the next term (:func:`would_vote`); nobody changes its
  term or records a vote for that question. Only when a majority (itself included) says yes
  does the real election start. A master that cannot reach a majority gets no majority of
  answers, so its term stays where it was, and when the network heals it simply follows the
  leader it finds.
* **Leader stickiness.** A master that heard from a live leader within the minimum election
  timeout (the *lease*) answers no to a pre-vote and ignores a real vote request of a higher
  term (:func:`disruptive`); the leader itself does the same. So a master whose term is high
  already (an old version without pre-vote, a restart) cannot depose a leader that a majority
  still follows.
* **Catching up.** Every answer carries the voter's term; a candidate behind it adopts that
  term as a follower (Raft's rule for any message of a higher term). Without that, two
  masters each refusing the other (one has the longer log, the other the higher term) would
  never elect anyone.

Check-quorum, the other half of §9.6, is pysyncobj's own ``leaderFallbackTimeout``: a leader
that has not heard from a majority for ``raft_leader_fallback_ms`` steps down.

:class:`Campaign` is the candidate's side, one round of questions at a time, clock passed in.
Threading: none of its own; the adapter calls it from pysyncobj's one tick thread only.
"""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Position:
    """What a vote is decided on: a master's current term and the last entry of its log."""

    term: int
    last_index: int
    last_term: int

    def at_least_as_current_as(self, other: Position) -> bool:
        """Raft's "up-to-date" rule (§5.4.1): the later last term wins, then the longer log."""
        return (self.last_term, self.last_index) >= (other.last_term, other.last_index)


def in_lease(leader_heard_s_ago: float | None, lease_s: float, is_leader: bool) -> bool:
    """Whether a master still follows (or is) a live leader: a leader, or one heard from less
    than ``lease_s`` ago (None: no leader heard since the last election)."""
    return is_leader or (leader_heard_s_ago is not None and leader_heard_s_ago < lease_s)


def would_vote(candidate: Position, voter: Position, leader_heard_s_ago: float | None,
               lease_s: float, is_leader: bool = False) -> bool:
    """The pre-vote answer: would ``voter`` grant ``candidate`` its vote at ``candidate.term
    + 1``? No while the voter follows a live leader; no if that term is not above the
    voter's (the candidate is behind: it learns the voter's term from the answer); no if the
    candidate's log lacks entries the voter has (it could not win)."""
    if in_lease(leader_heard_s_ago, lease_s, is_leader):
        return False
    if candidate.term + 1 <= voter.term:
        return False
    return candidate.at_least_as_current_as(voter)


def disruptive(request_term: int, voter_term: int, leader_heard_s_ago: float | None,
               lease_s: float, is_leader: bool = False) -> bool:
    """Whether a real vote request should be ignored: it would raise the term of a master
    that follows (or is) a live leader. A request of the voter's own term or lower is left
    to Raft (it never deposes anyone)."""
    return request_term > voter_term and in_lease(leader_heard_s_ago, lease_s, is_leader)


@dataclass
class Round:
    """One round of pre-vote questions, asked at the candidate's current ``term`` (the
    election would be for ``term + 1``)."""

    number: int
    term: int
    started: float
    expires: float
    granted: set[str] = field(default_factory=set)  # peers that said yes


class Campaign:
    """The candidate's side of pre-vote: when to ask again, and whether a majority said yes.

    ``voters`` counts every master of the group, this one included (it always votes for
    itself). A round that has no majority by its expiry is followed by a new one after a
    random pause in ``retry_s`` (a short one: questions cost two small messages and no disk
    write, and the followers' lease may have run out a moment after the first question).
    """

    def __init__(self, voters: int, retry_s: tuple[float, float],
                 rand: Callable[[float, float], float] = random.uniform) -> None:
        self.voters, self.retry_s, self._rand = voters, retry_s, rand
        self.round: Round | None = None
        self._numbers = 0
        self._granted_at: float | None = None
        self.failed_rounds = 0  # rounds without a majority since the last success or leader

    def due(self, now: float) -> bool:
        """Whether to ask (again) now: no round yet, or the last one expired unanswered."""
        return self._granted_at is None and (self.round is None or now >= self.round.expires)

    def start(self, term: int, now: float) -> Round:
        """A new round of questions at ``term``; the previous one's answers no longer count."""
        if self.round is not None and now >= self.round.expires:
            self.failed_rounds += 1
        self._numbers += 1
        self.round = Round(self._numbers, term, now, now + self._rand(*self.retry_s))
        if 1 > self.voters / 2:
            self._granted_at = now  # a lone master is its own majority
        return self.round

    def answer(self, number: int, term: int, peer: str, granted: bool, now: float) -> bool:
        """Count one answer; True when it completes a majority (the election may start)."""
        r = self.round
        if r is None or r.number != number or r.term != term or not granted:
            return False
        r.granted.add(peer)
        if self._granted_at is None and len(r.granted) + 1 > self.voters / 2:
            self._granted_at = now
            return True
        return False

    def take(self, now: float, fresh_s: float) -> bool:
        """Use up a majority granted less than ``fresh_s`` ago (one election per majority;
        an older one may no longer hold: the peers may have heard from a leader since)."""
        ok = self._granted_at is not None and now - self._granted_at < fresh_s
        if ok or self._granted_at is not None:
            self.reset()
        return ok

    def reset(self) -> None:
        """Forget the round (a leader was heard, or this master leads)."""
        self.round, self._granted_at, self.failed_rounds = None, None, 0
