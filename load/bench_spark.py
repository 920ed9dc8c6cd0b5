"""Spark batch write and read through ``format("tubeq")``, against Spark's own parquet files.

    .venv/bin/python -m load.bench_spark [--rows 1000000] [--size 1024] [--out FILE]

Starts 1 master and 1 broker as real processes on 127.0.0.1 (``tests/cluster.py``; an async
topic of 4 partitions) and a Spark ``local[2]`` session bound to 127.0.0.1. One DataFrame of
``--rows`` incompressible values of ``--size`` bytes (AES-GCM output, so parquet's compression
gains nothing tubeq does not) is cached, then written to the topic and to parquet files, and
both are read back with ``count(*)`` and ``sum(length(value))``, which makes every value be
materialised. Parquet in the same run is the ceiling: the ratios (tubeq / parquet rows/s) are
what to compare between runs on this small, noisy machine. A third source shows what a Python
data source can reach at all (``load/spark_ceiling.py``: ready-made Arrow batches in, Arrow
batches dropped out): ``pyds_ceiling_*`` and tubeq's ratio to it. A warm-up of 1,000 rows
goes through each first (Python workers, JIT, connections), untimed. Prints one JSON object
(and writes it to ``--out``), with the 1-minute load average before and after as a hint of
other work.
Every process is stopped by PID and the temp dir removed, also on error or SIGTERM.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from load import stop_on_sigterm

ROOT = Path(__file__).resolve().parents[1]
TOPIC_PARTITIONS = 4
WRITE_TASKS = 4
WARM_UP_ROWS = 1000
SPARK_CONF = {"spark.driver.memory": "4g",  # room to cache 1 GiB of values
              "spark.ui.showConsoleProgress": "false",
              "spark.sql.shuffle.partitions": "2"}


def values_frame(spark: Any, rows: int, size: int) -> Any:
    """``rows`` rows of one binary ``value`` column, ``size`` random-looking bytes each."""
    from pyspark.sql import functions as F

    plain = F.expr(f"repeat('x', {max(size, 1)})")
    # GCM with Spark's random IV per row: ciphertext is size + 28 bytes; keep the first ``size``.
    sealed = F.aes_encrypt(plain, F.lit(b"tubeq-bench-key!"), F.lit("GCM"))
    return (spark.range(0, rows, numPartitions=WRITE_TASKS)
            .select(F.substring(sealed, 1, size).alias("value")))


def read_totals(frame: Any) -> tuple[int, int]:
    """(rows, value bytes): reads every value to the end."""
    from pyspark.sql import functions as F

    row = frame.select(F.count(F.lit(1)).alias("n"),
                       F.coalesce(F.sum(F.length("value")), F.lit(0)).alias("b")).collect()[0]
    return int(row["n"]), int(row["b"])


class Targets:
    """Where the DataFrame goes: one tubeq topic and one parquet directory per name."""

    def __init__(self, spark: Any, masters: str, root: Path) -> None:
        self.spark, self.masters, self.root = spark, masters, root

    def create_topic(self, topic: str) -> None:
        """Untimed: it waits until the brokers serve the new topic (their next heartbeat)."""
        from spark_sink.pipelines.feed import ensure_topic

        ensure_topic(self.masters, topic, TOPIC_PARTITIONS, durability="async")

    def tubeq_write(self, frame: Any, topic: str) -> None:
        frame.write.format("tubeq").option("masters", self.masters).option("topic", topic) \
            .mode("append").save()

    def tubeq_read(self, topic: str) -> tuple[int, int]:
        return read_totals(self.spark.read.format("tubeq").option("masters", self.masters)
                           .option("subscribe", topic).load())

    def parquet_write(self, frame: Any, name: str) -> None:
        frame.write.mode("overwrite").parquet(str(self.root / name))

    def parquet_read(self, name: str) -> tuple[int, int]:
        return read_totals(self.spark.read.parquet(str(self.root / name)))

    def ceiling_write(self, frame: Any) -> None:
        from load.spark_ceiling import NAME

        frame.write.format(NAME).mode("append").save()

    def ceiling_read(self, rows: int, size: int) -> tuple[int, int]:
        from load.spark_ceiling import NAME

        return read_totals(self.spark.read.format(NAME).option("rows", rows)
                           .option("size", size).option("partitions", TOPIC_PARTITIONS).load())


def timed(fn: Any, *args: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - start, result


def measure(spark: Any, masters: str, root: Path, rows: int, size: int) -> dict[str, Any]:
    """The four timed runs over one cached DataFrame; the figures as one dict."""
    frame = values_frame(spark, rows, size).cache()
    cached_rows, cached_bytes = read_totals(frame)  # fills the cache, untimed
    if (cached_rows, cached_bytes) != (rows, rows * size):
        raise RuntimeError(f"generated {cached_rows} rows / {cached_bytes} bytes, "
                           f"expected {rows} / {rows * size}")
    t = Targets(spark, masters, root)
    warm = frame.limit(WARM_UP_ROWS)
    for topic in ("bench-spark-warm-up", "bench-spark"):
        t.create_topic(topic)
    t.tubeq_write(warm, "bench-spark-warm-up")
    t.tubeq_read("bench-spark-warm-up")
    t.parquet_write(warm, "warm-up")
    t.parquet_read("warm-up")
    t.ceiling_write(warm)
    t.ceiling_read(WARM_UP_ROWS, size)

    tq_write_s, _ = timed(t.tubeq_write, frame, "bench-spark")
    pq_write_s, _ = timed(t.parquet_write, frame, "bench-spark")
    tq_read_s, (tq_rows, tq_bytes) = timed(t.tubeq_read, "bench-spark")
    pq_read_s, (pq_rows, pq_bytes) = timed(t.parquet_read, "bench-spark")
    ceil_write_s, _ = timed(t.ceiling_write, frame)
    ceil_read_s, (ceil_rows, ceil_bytes) = timed(t.ceiling_read, rows, size)
    frame.unpersist()
    if (ceil_rows, ceil_bytes) != (rows, rows * size):
        raise RuntimeError(f"the ceiling source read {ceil_rows} rows / {ceil_bytes} bytes, "
                           f"expected {rows} / {rows * size}")
    figures = {"tubeq_write": rows / tq_write_s, "tubeq_read": tq_rows / tq_read_s,
               "parquet_write": rows / pq_write_s, "parquet_read": pq_rows / pq_read_s,
               "pyds_ceiling_write": rows / ceil_write_s,
               "pyds_ceiling_read": rows / ceil_read_s}
    return {
        "rows": rows,
        "value_bytes": size,
        **{f"{k}_rows_per_s": round(v) for k, v in figures.items()},
        **{f"{k}_MBps": round(v * size / 1e6, 1) for k, v in figures.items()},
        "write_ratio": round(figures["tubeq_write"] / figures["parquet_write"], 3),
        "read_ratio": round(figures["tubeq_read"] / figures["parquet_read"], 3),
        # What any Python data source reaches here, and how close tubeq comes to it.
        "pyds_ceiling_write_ratio": round(figures["pyds_ceiling_write"]
                                          / figures["parquet_write"], 3),
        "pyds_ceiling_read_ratio": round(figures["pyds_ceiling_read"]
                                         / figures["parquet_read"], 3),
        "write_of_ceiling": round(figures["tubeq_write"] / figures["pyds_ceiling_write"], 3),
        "read_of_ceiling": round(figures["tubeq_read"] / figures["pyds_ceiling_read"], 3),
        "tubeq_read_rows": tq_rows, "tubeq_read_value_bytes": tq_bytes,
        "parquet_read_rows": pq_rows, "parquet_read_value_bytes": pq_bytes,
        "seconds": {"tubeq_write": round(tq_write_s, 2), "parquet_write": round(pq_write_s, 2),
                    "tubeq_read": round(tq_read_s, 2), "parquet_read": round(pq_read_s, 2),
                    "pyds_ceiling_write": round(ceil_write_s, 2),
                    "pyds_ceiling_read": round(ceil_read_s, 2)},
    }


def run(rows: int, size: int) -> dict[str, Any]:
    """Start the cluster and Spark, measure, stop both (by PID) and remove the temp dir."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from spark_sink.pipelines.local import local_spark
    from tests.cluster import Cluster  # the same process handling the tests use

    load_before = os.getloadavg()[0]
    root = Path(tempfile.mkdtemp(prefix="tubeq-bench-spark-"))
    cluster = Cluster(root / "cluster")
    try:
        cluster.start(brokers=1)
        cluster.use_admin_env()  # auth is on: clients log in as the admin
        conf = {**SPARK_CONF, "spark.local.dir": str(root / "spark-local")}
        with local_spark("local[2]", "tubeq-bench-spark", conf) as spark:
            from load.spark_ceiling import CeilingSource

            spark.dataSource.register(CeilingSource)
            result = measure(spark, cluster.master_addresses, root / "parquet", rows, size)
    finally:
        cluster.stop_all()
        shutil.rmtree(root, ignore_errors=True)
    result["setup"] = (f"Spark local[2], 1 master + 1 broker (async topic, {TOPIC_PARTITIONS} "
                       f"partitions), {WRITE_TASKS} write tasks, {os.cpu_count()} CPUs")
    # Other work on the machine shows here; the ratios hold up better than the rows/s.
    result["load_avg_1m"] = {"before": round(load_before, 2),
                             "after": round(os.getloadavg()[0], 2)}
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m load.bench_spark", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000, help="rows written and read")
    p.add_argument("--size", type=int, default=1024, help="bytes per value")
    p.add_argument("--out", type=Path, help="also write the JSON here")
    args = p.parse_args(argv)
    if args.rows < 1 or args.size < 1:
        p.error("--rows and --size must be >= 1")
    stop_on_sigterm()
    text = json.dumps(run(args.rows, args.size), indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
