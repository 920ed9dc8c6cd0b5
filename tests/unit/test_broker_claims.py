"""Offset claims: fencing of older generations (pure table, no I/O)."""
from __future__ import annotations

import pytest

from broker.claims import ClaimTable
from lib.errors import Fenced


def test_newer_generation_claim_fences_commits_of_older_generation():
    t = ClaimTable()
    t.claim("g", "t", [0, 1], "m1", 1)
    t.claim("g", "t", [0], "m2", 2)
    with pytest.raises(Fenced) as info:
        t.check_commit("g", "t", [0], "m1", 1)
    assert info.value.owner == "m2" and info.value.owner_generation == 2
    t.check_commit("g", "t", [1], "m1", 1)  # partition 1 is still m1's
    t.check_commit("g", "t", [0], "m2", 2)


def test_claim_with_older_generation_is_fenced_and_changes_nothing():
    t = ClaimTable()
    t.claim("g", "t", [0], "m2", 5)
    with pytest.raises(Fenced):
        t.claim("g", "t", [1, 0], "m1", 4)
    assert t.get("g", "t", 1) is None
    assert t.get("g", "t", 0).member_id == "m2"


def test_commit_of_unclaimed_partition_takes_the_claim():
    t = ClaimTable()
    t.check_commit("g", "t", [3], "m1", 7)
    assert t.get("g", "t", 3).generation == 7
    with pytest.raises(Fenced):
        t.check_commit("g", "t", [3], "m0", 6)


def test_same_generation_other_member_cannot_commit():
    t = ClaimTable()
    t.claim("g", "t", [0], "m1", 3)
    with pytest.raises(Fenced):
        t.check_commit("g", "t", [0], "m2", 3)


def test_newer_generation_commit_becomes_the_claim():
    t = ClaimTable()
    t.claim("g", "t", [0], "m1", 3)
    t.check_commit("g", "t", [0], "m2", 4)
    with pytest.raises(Fenced):
        t.check_commit("g", "t", [0], "m1", 3)


def test_manual_assignment_never_claims_and_is_never_fenced():
    t = ClaimTable()
    t.claim("g", "t", [0], "m1", 9)
    t.claim("g", "t", [0], "", -1)
    t.check_commit("g", "t", [0], "", -1)
    assert t.get("g", "t", 0).member_id == "m1"


def test_groups_and_topics_are_independent_and_clear_forgets():
    t = ClaimTable()
    t.claim("g1", "t", [0], "a", 5)
    t.claim("g2", "t", [0], "b", 1)
    t.claim("g1", "u", [0], "c", 1)
    t.clear("g1", "t", [0])
    t.check_commit("g1", "t", [0], "z", 1)
    assert len(t) == 3
