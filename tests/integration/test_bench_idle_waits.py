"""load/bench_idle_waits runs end to end (real master, broker and holder processes) and prints
one well-formed JSON object. Latencies are not asserted: benchmarks are not timed tests."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_quick_run_reports_both_phases_and_their_ratio(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "load.bench_idle_waits", "--quick"],
                          env={**os.environ, "TMPDIR": str(tmp_path)},
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not list(tmp_path.glob("tubeq-bench-*")), "the benchmark left its data behind"
    out = json.loads(proc.stdout)
    for phase in ("idle_broker", "with_waiters"):
        assert out[phase]["acked"] == out[phase]["sends"] == 50, out[phase]
        assert 0 < out[phase]["p50_ms"] <= out[phase]["p99_ms"]
    assert out["opened"]["opened"] == 400
    assert out["push_streams_seen_by_broker"] == 200
    assert out["holder_at_end"]["fetch_errors"] == 0
    assert set(out["ratio"]) == {"p50_ms", "p99_ms"}
