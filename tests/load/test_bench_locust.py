"""load/bench_locust runs end to end (its own master and broker processes, real Locust runs)
and its two sides agree. The rate is low enough that both sides hold it on any machine, so
the check is of what Locust reports (its request rate times the messages per request, its
mean response time), not of speed."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_locust_and_tubeq_bench_report_the_same_rate_and_sync_latency():
    proc = subprocess.run([sys.executable, "-m", "load.bench_locust", "--rate", "1000",
                           "--seconds", "6", "--rounds", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    [round_] = out["rounds"]
    steady, sync = round_["steady"], round_["send_sync"]
    assert steady["bench_failures"] == 0 and steady["locust_failures"] == 0, steady
    # Both hold the offered 1,000 msgs/s, and Locust's own figure says so. Locust's rate is its
    # requests over the span from the first start to the last end, a little short of the run:
    # ~60 requests in 6 s read up to ~10 % high (at 20 s it reads 1.00); on a machine busy
    # with other work its users start late and their pacing catches up, in a still shorter
    # span (1,499 with two cores' worth of busy loops beside the suite). A figure per request
    # instead of per message would be 100 times off.
    assert 800 <= steady["bench_msgs_per_s"] <= 1100, steady
    assert 800 <= steady["locust_msgs_per_s"] <= 2000, steady
    # What the users stored in the 6 s: their start-up eats into it on a loaded machine
    # (3,600 once in CI, 1,600 beside two busy loops), so a sixth of the offered 6,000 is the
    # floor; more than the offered rate allows is the ceiling.
    assert 1000 <= steady["locust_acknowledged"] <= 7 * 1000, steady
    assert 0 < sync["bench_mean_ms"] and 0 < sync["locust_mean_ms"], sync
    assert sync["locust_calls"] > 100, sync
    assert out["locust_vs_bench"]["msgs_per_s_at_rate"] == steady["ratio"]


def test_bad_options_are_refused_with_the_rule():
    proc = subprocess.run([sys.executable, "-m", "load.bench_locust", "--size", "10"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "--size >= 28" in proc.stderr
