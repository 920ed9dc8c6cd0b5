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
