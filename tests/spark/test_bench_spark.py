"""load/bench_spark.py runs end to end on a tiny dataset: every figure, every row read back, in
rounds.

It runs in its own process: it starts its own cluster and its own Spark JVM, and a process has
one SparkContext (this one's belongs to the session fixture). No timing is asserted.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.spark.conftest import ROOT

ROWS, SIZE = 2000, 256


@pytest.mark.slow
def test_bench_spark_reports_every_figure_and_reads_back_every_row(tmp_path):
    if shutil.which("java") is None:
        pytest.skip("the Spark benchmark needs Java 17 on PATH (java not found)")
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "load.bench_spark", "--rows", str(ROWS), "--size", str(SIZE),
         "--rounds", "2", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert json.loads(done.stdout) == result
    assert (result["rows"], result["value_bytes"]) == (ROWS, SIZE)
    for name in ("tubeq_write", "tubeq_read", "parquet_write", "parquet_read"):
        assert result[f"{name}_rows_per_s"] > 0, name
    assert result["write_ratio"] > 0 and result["read_ratio"] > 0
    assert result["tubeq_read_rows"] == result["parquet_read_rows"] == ROWS
    assert result["tubeq_read_value_bytes"] == result["parquet_read_value_bytes"] == ROWS * SIZE
    # Two rounds, each timing all six runs (each read checked whole inside the benchmark);
    # the reported seconds are their medians.
    assert result["rounds"] == 2 and len(result["rounds_seconds"]) == 2
    for name, seconds in result["seconds"].items():
        each = sorted(r[name] for r in result["rounds_seconds"])
        assert all(s > 0 for s in each) and each[0] <= seconds <= each[1], name
