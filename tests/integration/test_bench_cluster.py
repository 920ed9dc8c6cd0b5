"""load/bench_cluster runs end to end (real master, broker and client processes) and prints one
well-formed JSON object. Speeds are not asserted: benchmarks are not timed tests."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from load.bench_cluster import TARGETS, best

ROOT = Path(__file__).resolve().parents[2]


def test_a_tiny_run_reports_every_target_with_ceilings(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "load.bench_cluster", "--scale", "0.01"],
                          env={**os.environ, "TMPDIR": str(tmp_path)},
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not list(tmp_path.glob("tubeq-bench-*")), "the benchmark left its data behind"
    out = json.loads(proc.stdout)
    assert set(out["met"]) == set(TARGETS)
    figures = out["figures"]
    assert all(figures[k] > 0 for k in TARGETS)
    assert figures["e2e_p50_ms_at_10k_per_s"] <= figures["e2e_p99_ms_at_10k_per_s"]
    assert out["ceilings"]["loopback_MBps"] > 0 and out["ceilings"]["disk_fsync_1MiB_MBps"] > 0


def test_the_best_round_is_the_highest_rate_and_the_lowest_latency():
    rounds = [{"produce_1KiB_msgs_per_s": 10, "e2e_p99_ms_at_10k_per_s": 9.0},
              {"produce_1KiB_msgs_per_s": 30, "e2e_p99_ms_at_10k_per_s": 12.0}]
    assert best(rounds) == {"produce_1KiB_msgs_per_s": 30, "e2e_p99_ms_at_10k_per_s": 9.0}
