"""load/bench_transactions runs end to end (a master and a broker as processes, each case's
client in its own ``tubeq bench`` process) and prints one well-formed JSON object. Speeds are
not asserted: benchmarks are not timed tests."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from lib.cli.main import main as tubeq
from load.bench_transactions import PAIRS, TARGETS

ROOT = Path(__file__).resolve().parents[2]


def test_a_tiny_run_reports_every_case_ratio_and_where_a_transaction_waits(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "load.bench_transactions", "--messages", "200",
                           "--rounds", "1", "--txn-records", "100", "--abort-every", "2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    cases = {case for pair in PAIRS.values() for case in pair}
    assert set(out["medians_msgs_per_s"]) == cases
    assert all(rate > 0 for rate in out["medians_msgs_per_s"].values())
    assert set(out["ratios"]) == set(out["met"]) == set(TARGETS) == set(out["rounds_ratios"][0])
    assert all(ratio > 0 for ratio in out["ratios"].values())
    txn = out["transactions"]
    assert txn["transactions_per_run"] == 2 and txn["end_p50_ms"] > 0
    read = out["read_committed_topic"]  # 2 transactions of 100, the second aborted; warm-up 1
    assert (read["read_committed"], read["read_uncommitted"], read["aborted"]) == (101, 201, 100)
    assert not list(tmp_path.iterdir())  # the cluster's files are gone with it


def test_bad_counts_are_refused_with_the_rule():
    proc = subprocess.run([sys.executable, "-m", "load.bench_transactions", "--abort-every",
                           "0"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 2 and "--abort-every must be >= 1" in proc.stderr


def test_bench_produce_refuses_transactions_with_bulk_before_reaching_a_cluster():
    out = CliRunner().invoke(tubeq, ["--masters", "127.0.0.1:1", "bench", "produce",
                                     "--transactional-id", "t", "--bulk", "10"])
    assert out.exit_code == 2 and "not with --bulk or --rate" in out.output
