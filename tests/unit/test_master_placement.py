"""Placement of new partitions: replicas on distinct brokers, least loaded first, leaders spread,
racks distinct where brokers declare them; deterministic."""
from __future__ import annotations

from collections import Counter

import pytest

from lib.errors import NotEnoughBrokers
from master.placement import load_of, place


def leaders(replica_lists):
    return [r[0] for r in replica_lists]


def test_partitions_spread_round_robin_over_equal_brokers():
    assert place(5, {1: 0, 2: 0}) == [[1], [2], [1], [2], [1]]


def test_least_loaded_broker_fills_first():
    # 2 is emptiest; then 2 and 3 tie on load and 3 has led fewer of these partitions.
    assert place(4, {1: 3, 2: 0, 3: 1}) == [[2], [3], [2], [3]]


def test_load_counts_only_live_brokers():
    assert load_of([[1, 2, 1], [3, 1]], [1, 2]) == {1: 3, 2: 1}


def test_no_live_broker_is_not_enough_brokers():
    with pytest.raises(NotEnoughBrokers):
        place(1, {})
    assert place(0, {}) == []


def test_a_draining_broker_gets_no_new_partition_but_keeps_its_load():
    assert place(4, {1: 0, 2: 5, 3: 1}, draining={1}) == [[3]] * 4
    assert place(3, {1: 0, 2: 0}, draining=[2]) == [[1]] * 3
    assert place(2, {1: 0, 2: 0}, draining={9}) == [[1], [2]]  # a draining broker that is down


def test_every_live_broker_draining_is_not_enough_brokers_naming_them():
    with pytest.raises(NotEnoughBrokers, match=r"every live broker is draining \(broker\(s\) "
                                               r"1, 2\).*tubeq broker undrain") as err:
        place(1, {2: 0, 1: 3}, draining={1, 2})
    assert err.value.draining == "1, 2" and err.value.needed == 1
    assert place(0, {1: 0}, draining={1}) == []  # nothing to place: an alter of settings only
    with pytest.raises(NotEnoughBrokers, match="no live broker"):
        place(1, {}, draining={1})


def test_replicas_are_distinct_brokers_and_leaders_spread_evenly():
    out = place(6, {1: 0, 2: 0, 3: 0}, replication_factor=3)
    assert all(sorted(r) == [1, 2, 3] for r in out)
    assert Counter(leaders(out)) == {1: 2, 2: 2, 3: 2}


def test_replicas_spread_over_more_brokers_than_copies():
    out = place(4, {1: 0, 2: 0, 3: 0, 4: 0}, replication_factor=2)
    assert all(len(set(r)) == 2 for r in out)
    assert Counter(b for r in out for b in r) == {1: 2, 2: 2, 3: 2, 4: 2}
    assert Counter(leaders(out)) == {1: 1, 2: 1, 3: 1, 4: 1}


def test_existing_leaderships_steer_new_leaders():
    # Every broker holds a copy of everything; broker 1 already leads 3 partitions.
    out = place(2, {1: 3, 2: 3, 3: 3}, replication_factor=3, leaders={1: 3, 2: 0, 3: 1})
    assert leaders(out) == [2, 2]  # then 2 and 3 tie on leaderships: the lower id


def test_followers_go_to_other_racks_first():
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    out = place(4, {1: 0, 2: 0, 3: 0, 4: 0}, replication_factor=2, racks=racks)
    assert all(racks[r[0]] != racks[r[1]] for r in out)
    # More copies than racks: the racks are used once each, then the least loaded.
    three = place(1, {1: 0, 2: 0, 3: 0}, replication_factor=3, racks={1: "a", 2: "a", 3: "b"})
    assert sorted(three[0]) == [1, 2, 3] and three[0][:2] == [1, 3]


def test_too_few_brokers_for_the_replication_factor_names_them():
    with pytest.raises(NotEnoughBrokers, match=r"replication_factor 3 needs 3 live brokers "
                                               r"that take new partitions; 2 do \(broker\(s\) "
                                               r"1, 3\)") as err:
        place(1, {1: 0, 2: 0, 3: 0}, draining={2}, replication_factor=3)
    assert err.value.needed == 3
