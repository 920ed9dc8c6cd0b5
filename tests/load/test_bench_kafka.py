"""load/bench_kafka runs end to end (a master and a broker with a Kafka port as processes,
confluent-kafka beside tubeq's own clients) and prints one well-formed JSON object.
Throughput is not asserted: benchmarks are not timed tests."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PHASES = {"produce_tubeq", "produce_kafka", "consume_tubeq", "consume_kafka",
          "produce_kafka_ceiling"}


def test_a_quick_run_reports_both_clients_both_ways(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "load.bench_kafka", "--messages", "500",
                           "--rounds", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert set(out["median_msgs_per_s"]) == PHASES
    assert all(rate > 0 for rate in out["median_msgs_per_s"].values())
    assert out["produce_kafka_of_tubeq"] > 0 and out["consume_kafka_of_tubeq"] > 0
    assert out["ceiling_of_tubeq"] > 0 and out["produce_kafka_of_ceiling"] > 0
    assert set(out["broker_cpu_us_per_record"]) == PHASES
    assert min(out["broker_cpu_us_per_record"].values()) >= 0  # 10 ms clock ticks
    assert set(out["translation_us_per_record"]) == {"produce", "consume"}
    assert not list(tmp_path.iterdir())  # the cluster's files are gone with it


def test_bad_counts_are_refused_with_the_rule():
    proc = subprocess.run([sys.executable, "-m", "load.bench_kafka", "--rounds", "0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "--messages and --rounds must be >= 1" in proc.stderr
