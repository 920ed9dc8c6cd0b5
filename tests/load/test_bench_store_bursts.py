"""load/bench_store_bursts.py, tiny: every figure is there, per store count, with its ratio."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("idempotent", [False, True])
def test_a_tiny_run_reports_every_figure_for_every_store_count(idempotent):
    done = subprocess.run([sys.executable, "-m", "load.bench_store_bursts", "--stores", "1,5",
                           "--bursts", "10", "--rounds", "1",
                           *(["--idempotent"] if idempotent else [])], cwd=ROOT,
                          capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    out = json.loads(done.stdout)
    assert [r["stores"] for r in out["results"]] == [1, 5]
    for row in out["results"]:
        assert row["wall_ms_per_burst"] > 0 and row["append_thread_ms_per_burst"] > 0
        assert row["user_ms_per_burst"] + row["kernel_ms_per_burst"] > 0
        # /proc/stat counts in 10 ms ticks: ten tiny bursts may take less than one
        assert row["machine_ms_per_burst"] >= 0
    assert out["results"][0]["cpu_vs_first"] == 1.0
    assert out["setup"].endswith("; idempotent batches") == idempotent


def test_bad_arguments_are_refused_with_a_reason():
    done = subprocess.run([sys.executable, "-m", "load.bench_store_bursts", "--stores", "x"],
                          cwd=ROOT, capture_output=True, timeout=60)
    assert done.returncode == 2 and b"--stores takes counts" in done.stderr
