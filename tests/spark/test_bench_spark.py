"""load/bench_spark.py runs end to end on a tiny dataset: every figure, every row read back, in
rounds.

It runs in this process on the session's Spark (the benchmark's local_spark lends an active
session, as it would a notebook's), with a cluster of its own: a Spark JVM of its own would
cost this machine about a minute of CPU. No timing is asserted.
"""
from __future__ import annotations

import json
import os
import signal

import pytest

from load import bench_spark

ROWS, SIZE = 2000, 256


@pytest.mark.slow
def test_bench_spark_reports_every_figure_and_reads_back_every_row(spark, tmp_path, capsys,
                                                                   monkeypatch):
    for var in ("TUBEQ_USER", "TUBEQ_PASSWORD"):  # the benchmark logs its clients in as
        monkeypatch.setenv(var, os.environ[var])  # its cluster's admin: set back after
    out = tmp_path / "bench.json"
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        assert bench_spark.main(["--rows", str(ROWS), "--size", str(SIZE), "--rounds", "2",
                                 "--out", str(out)]) == 0
    finally:
        signal.signal(signal.SIGTERM, sigterm)
    result = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == result
    assert (result["rows"], result["value_bytes"]) == (ROWS, SIZE)
    for name in ("tubeq_write", "tubeq_read", "parquet_write", "parquet_read",
                 "pyds_ceiling_write", "pyds_ceiling_read", "grpc_ceiling_write",
                 "grpc_ceiling_read"):
        assert result[f"{name}_rows_per_s"] > 0, name
    assert result["write_ratio"] > 0 and result["read_ratio"] > 0
    assert result["write_of_grpc_ceiling"] > 0 and result["read_of_grpc_ceiling"] > 0
    assert result["tubeq_read_rows"] == result["parquet_read_rows"] == ROWS
    assert result["tubeq_read_value_bytes"] == result["parquet_read_value_bytes"] == ROWS * SIZE
    # Two rounds, each timing all eight runs (each read checked whole inside the benchmark);
    # the reported seconds are their medians.
    assert result["rounds"] == 2 and len(result["rounds_seconds"]) == 2
    assert len(result["seconds"]) == 8
    for name, seconds in result["seconds"].items():
        each = sorted(r[name] for r in result["rounds_seconds"])
        assert all(s > 0 for s in each) and each[0] <= seconds <= each[1], name
