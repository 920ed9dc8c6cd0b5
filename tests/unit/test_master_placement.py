"""Placement of new partitions: least loaded live broker first, deterministic."""
from __future__ import annotations

import pytest

from lib.errors import NotEnoughBrokers
from master.placement import load_of, place


def test_partitions_spread_round_robin_over_equal_brokers():
    assert place(5, {1: 0, 2: 0}) == [1, 2, 1, 2, 1]


def test_least_loaded_broker_fills_first():
    assert place(4, {1: 3, 2: 0, 3: 1}) == [2, 2, 3, 2]


def test_load_counts_only_live_brokers():
    assert load_of([[1, 2, 1], [3, 1]], [1, 2]) == {1: 3, 2: 1}


def test_no_live_broker_is_not_enough_brokers():
    with pytest.raises(NotEnoughBrokers):
        place(1, {})
    assert place(0, {}) == []


def test_a_draining_broker_gets_no_new_partition_but_keeps_its_load():
    assert place(4, {1: 0, 2: 5, 3: 1}, draining={1}) == [3, 3, 3, 3]
    assert place(3, {1: 0, 2: 0}, draining=[2]) == [1, 1, 1]
    assert place(2, {1: 0, 2: 0}, draining={9}) == [1, 2]  # a draining broker that is down


def test_every_live_broker_draining_is_not_enough_brokers_naming_them():
    with pytest.raises(NotEnoughBrokers, match=r"every live broker is draining \(broker\(s\) "
                                               r"1, 2\).*tubeq broker undrain") as err:
        place(1, {2: 0, 1: 3}, draining={1, 2})
    assert err.value.draining == "1, 2" and err.value.needed == 1
    assert place(0, {1: 0}, draining={1}) == []  # nothing to place: an alter of settings only
    with pytest.raises(NotEnoughBrokers, match="no live broker"):
        place(1, {}, draining={1})
