"""load/bench_e2e runs end to end (a master and three brokers as processes) and prints one
well-formed JSON object with every case's latencies and round trips. Latency is not asserted
against its target: benchmarks are not timed tests."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_quick_run_reports_both_cases_against_the_round_trip(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "load.bench_e2e", "--messages", "1000",
                           "--rate", "2000"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert set(out["summary"]) == {"rf1", "rf3_acks_all"}
    assert out["replica_stream"] is True  # the default; --no-replica-stream turns it off
    for name, runs in out["runs"].items():
        (run,) = runs
        assert run["consumed"] >= 1000, name  # every record came through
        assert run["round_trips"] > 0 and run["grpc_round_trip_ms"]["p99_ms"] > 0
        assert run["e2e_ms"]["p99_ms"] >= run["e2e_ms"]["p50_ms"] >= 0
        # every record carried its send time; the floored millisecond timestamps read later
        assert run["e2e_clock"] == "send stamp (ns)", name
        by_ts = run["e2e_ms_from_record_timestamps"]
        assert by_ts["mean_ms"] >= run["e2e_ms"]["mean_ms"], name
        assert out["summary"][name]["complete"]
    assert not list(tmp_path.iterdir())  # the cluster's files are gone with it


def test_bad_arguments_are_refused_with_the_rule():
    proc = subprocess.run([sys.executable, "-m", "load.bench_e2e", "--rate", "0"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "--rate > 0" in proc.stderr


def test_a_send_stamp_reads_back_and_leaves_other_values_alone():
    from lib.cli.bench import STAMPED_BYTES, sent_ns, stamped

    value = os.urandom(1024)
    before = time.time_ns()
    out = stamped(value)
    assert len(out) == len(value) and out[STAMPED_BYTES:] == value[STAMPED_BYTES:]
    assert before <= sent_ns(out) <= time.time_ns()
    assert sent_ns(value) is None  # a value never stamped
    assert sent_ns(out[:STAMPED_BYTES - 1]) is None  # cut short: no stamp to read
