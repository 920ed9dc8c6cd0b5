"""The chaos options of ``tubeq load run`` (load/chaos.py): intervals, targets, the fault limit."""
from __future__ import annotations

import pytest

from load.chaos import more_faults_wanted, parse_interval, parse_targets


def test_no_limit_means_faults_to_the_end():
    assert more_faults_wanted(0, 0) and more_faults_wanted(50, 0)  # a 0 limit once made none
    assert more_faults_wanted(1, 2) and not more_faults_wanted(2, 2)


@pytest.mark.parametrize(("text", "seconds"), [("30", 30), ("30s", 30), ("2m", 120),
                                               ("0.5s", 0.5)])
def test_intervals(text, seconds):
    assert parse_interval(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "0s", "-5", "m"])
def test_bad_intervals_name_the_option(text):
    with pytest.raises(ValueError, match="--chaos takes an interval"):
        parse_interval(text)


def test_targets_in_turn_and_unknown_ones_refused():
    assert parse_targets("master, broker") == ("master", "broker")
    with pytest.raises(ValueError, match="--chaos-targets"):
        parse_targets("broker,disk")
    with pytest.raises(ValueError, match="--chaos-targets"):
        parse_targets(" , ")
