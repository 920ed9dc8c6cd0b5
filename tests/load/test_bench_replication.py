"""load/bench_replication runs end to end (a master and three brokers as processes) and prints
one well-formed JSON object. Throughput is not asserted: benchmarks are not timed tests."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_quick_run_reports_every_setup_and_a_failover(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "load.bench_replication", "--messages", "300",
                           "--rounds", "1", "--tries", "1", "--ceiling-mib", "8"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["replica_stream"] is True
    assert set(out["median_msgs_per_s"]) == {"rf1", "rf3_acks1", "rf3_acks_all"}
    assert all(rate > 0 for rate in out["median_msgs_per_s"].values())
    assert out["rf3_acks1_of_rf1"] > 0 and out["rf3_acks_all_of_rf1"] > 0
    for setup, per_process in out["cpu_us_per_record"].items():  # the budget, per process
        assert set(per_process) == {"broker1", "broker2", "broker3", "producer"}, setup
        assert per_process["producer"] > 0, setup  # (a broker's clock ticks are 10 ms: 300
        assert min(per_process.values()) >= 0, setup  # records may cost it less than one)
        assert out["broker_cpu_us_per_record"][setup] >= 0, setup
    ceiling = out["copy_ceiling"]  # the bytes of a copy alone, in the same run
    assert set(ceiling) == {"leader_us_per_kib", "follower_us_per_kib", "copy_us_per_kib"}
    assert ceiling["copy_us_per_kib"] >= ceiling["follower_us_per_kib"] > 0
    assert 0 < out["rf3_ceiling_of_rf1"] < 1
    assert set(out["copy_us_per_record"]) == {"rf3_acks1", "rf3_acks_all"}
    failover = out["failover"]
    assert failover["tries"] == 1 and len(failover["produce_gap_s"]) == 1
    assert failover["produce_gap_median_s"] > 0 and failover["consume_gap_median_s"] > 0
    assert not list(tmp_path.iterdir())  # the cluster's files are gone with it


def test_followers_may_copy_over_grpc_only_for_a_side_by_side_run(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "load.bench_replication", "--messages", "300",
                           "--rounds", "1", "--tries", "0", "--no-replica-stream",
                           "--ceiling-mib", "0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["replica_stream"] is False and out["failover"] == {}
    assert "copy_ceiling" not in out and "rf3_ceiling_of_rf1" not in out
    assert all(rate > 0 for rate in out["median_msgs_per_s"].values())


def test_bad_counts_are_refused_with_the_rule():
    proc = subprocess.run([sys.executable, "-m", "load.bench_replication", "--rounds", "0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "--messages and --rounds must be >= 1" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "load.bench_replication", "--ceiling-mib", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "--ceiling-mib must be 0 (none) or >= 2" in proc.stderr
