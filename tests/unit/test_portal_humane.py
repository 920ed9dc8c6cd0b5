"""The portal's figures for people (portal_web/humane.py): durations, times past, sizes and
counts as an operator reads them, limits of -1 as "no limit"."""
from __future__ import annotations

import pytest

from portal_web.humane import ago, count, duration, retention, size

DAY = 86_400_000


@pytest.mark.parametrize(("ms", "shown"), [
    (0, "0 ms"), (250, "250 ms"), (1000, "1 s"), (2500, "2.5 s"), (45_000, "45 s"),
    (330_000, "5 min 30 s"), (3_600_000, "1 h"), (3_605_000, "1 h"), (10_800_000, "3 h"),
    (DAY, "1 day"), (DAY + DAY // 2, "1 day 12 h"), (7 * DAY, "7 days"), (-1, "-")])
def test_a_duration_is_its_largest_unit_and_at_most_one_more(ms, shown):
    assert duration(ms) == shown


@pytest.mark.parametrize(("nbytes", "shown"), [
    (0, "0 B"), (512, "512 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"),
    (12_345, "12 KiB"), (1_048_575, "1.0 MiB"), (1 << 20, "1.0 MiB"), (300 << 20, "300 MiB"),
    (1 << 30, "1.0 GiB"), (10 << 40, "10 TiB"), (-1, "?")])
def test_a_size_is_in_binary_units_with_three_figures_at_most(nbytes, shown):
    assert size(nbytes) == shown


def test_a_time_past_says_how_long_ago():
    now = 1_700_000_000_000
    assert ago(now - 400, now) == "0.4 s ago"
    assert ago(now - 3_000, now) == "3 s ago"
    assert ago(now - 3 * 60_000, now) == "3 min ago"
    assert ago(now - 2 * DAY, now) == "2 days ago"
    assert ago(now + 50, now) == "just now"  # another host's clock a little ahead
    assert ago(0, now) == ago(-1, now) == "never"


def test_retention_says_no_limit_for_minus_one():
    assert retention(604_800_000, -1) == "7 days, no size limit"
    assert retention(-1, 10 << 30) == "10 GiB, no time limit"
    assert retention(DAY, 1 << 30) == "1 day or 1.0 GiB, whichever comes first"
    assert retention(-1, -1) == "no limit"


def test_a_count_has_thousands_separators():
    assert count(0) == "0" and count(1_234_567) == "1,234,567" and count(-1) == "?"
