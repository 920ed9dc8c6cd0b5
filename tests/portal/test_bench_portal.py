"""load/bench_portal.py in quick mode, so the benchmark keeps working: every page answers 200
on a small filled cluster and the report has a figure for each (no timing is asserted)."""
from __future__ import annotations

import pytest

from load.bench_portal import pages, run

pytestmark = pytest.mark.slow


def test_the_portal_benchmark_measures_every_page():
    result = run(topics=5, groups=3, big_gb=0.002, repeats=1)
    assert set(result["pages"]) == set(pages(5, 3))
    assert result["cluster"]["big_records"] == int(0.002 * (1 << 30)) // 1024
    for figures in result["pages"].values():
        assert 0 < figures["p50_ms"] <= figures["max_ms"]
