"""Spark batch write and read through ``format("tubeq")``, against Spark's own parquet files.

    .venv/bin/python -m load.bench_spark [--rows 1000000] [--size 1024] [--rounds 3]
                                         [--out FILE]

Starts 1 master and 1 broker as real processes on 127.0.0.1 (``tests/cluster.py``; an async
topic of 4 partitions) and a Spark ``local[2]`` session bound to 127.0.0.1. One DataFrame of
``--rows`` incompressible values of ``--size`` bytes (AES-GCM output, so parquet's compression
gains nothing tubeq does not) is cached, then written to the topic and to parquet files, and
both are read back with ``count(*)`` and ``sum(length(value))``, which makes every value be
materialised. Parquet in the same run is the ceiling: the ratios (tubeq / parquet rows/s) are
what to compare between runs on this small, noisy machine. A third source shows what a Python
data source can reach at all (``load/spark_ceiling.py``: ready-made Arrow batches in, Arrow
batches dropped out): ``pyds_ceiling_*`` and tubeq's ratio to it. A fourth is that source
fed over Python gRPC by a bare server that does nothing with the bytes
(``load/transport_ceiling.py``): ``grpc_ceiling_*``, what any broker reached over Python gRPC
could give, and tubeq's ratio to it. A warm-up of 1,000 rows
goes through each first (Python workers, JIT, connections), untimed; then ``--rounds`` rounds
of all eight runs, each round on a topic and files of its own and starting with another source;
each figure is the median of its rounds (``rounds_seconds`` has them all). Prints one JSON object
(and writes it to ``--out``), with the 1-minute load average before and after as a hint of
other work.
Every process is stopped by PID and the temp dir removed, also on error or SIGTERM.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
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

    def __init__(self, spark: Any, masters: str, root: Path, transport: str = "") -> None:
        self.spark, self.masters, self.root = spark, masters, root
        self.transport = transport  # the bare gRPC server (load/transport_ceiling.py)

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

    def drop(self, name: str) -> None:
        """A round's topic and parquet files go once measured (1M rows: 1 GiB each)."""
        from spark_sink.options import Connection
        from spark_sink.plan import admin_client

        with admin_client(Connection(self.masters)) as admin:
            admin.delete_topic(name)
        shutil.rmtree(self.root / name, ignore_errors=True)

    def parquet_write(self, frame: Any, name: str) -> None:
        frame.write.mode("overwrite").parquet(str(self.root / name))

    def parquet_read(self, name: str) -> tuple[int, int]:
        return read_totals(self.spark.read.parquet(str(self.root / name)))

    def ceiling_write(self, frame: Any, transport: str = "") -> None:
        from load.spark_ceiling import NAME

        frame.write.format(NAME).option("transport", transport).mode("append").save()

    def ceiling_read(self, rows: int, size: int, transport: str = "") -> tuple[int, int]:
        from load.spark_ceiling import NAME

        return read_totals(self.spark.read.format(NAME).option("rows", rows)
                           .option("size", size).option("partitions", TOPIC_PARTITIONS)
                           .option("transport", transport).load())


def timed(fn: Any, *args: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - start, result


FIGURES = ("tubeq_write", "parquet_write", "pyds_ceiling_write", "grpc_ceiling_write",
           "tubeq_read", "parquet_read", "pyds_ceiling_read", "grpc_ceiling_read")
WRITES = len(FIGURES) // 2
RATIOS = {  # name: (figure, figure it is divided by)
    "write_ratio": ("tubeq_write", "parquet_write"),
    "read_ratio": ("tubeq_read", "parquet_read"),
    # What any Python data source reaches here, and how close tubeq comes to it.
    "pyds_ceiling_write_ratio": ("pyds_ceiling_write", "parquet_write"),
    "pyds_ceiling_read_ratio": ("pyds_ceiling_read", "parquet_read"),
    "write_of_ceiling": ("tubeq_write", "pyds_ceiling_write"),
    "read_of_ceiling": ("tubeq_read", "pyds_ceiling_read"),
    # What a Python data source fed over Python gRPC reaches (the bytes alone, nothing done
    # with them), of parquet and of the Python data source ceiling; and tubeq of it.
    "grpc_ceiling_write_ratio": ("grpc_ceiling_write", "parquet_write"),
    "grpc_ceiling_read_ratio": ("grpc_ceiling_read", "parquet_read"),
    "grpc_ceiling_write_of_ceiling": ("grpc_ceiling_write", "pyds_ceiling_write"),
    "grpc_ceiling_read_of_ceiling": ("grpc_ceiling_read", "pyds_ceiling_read"),
    "write_of_grpc_ceiling": ("tubeq_write", "grpc_ceiling_write"),
    "read_of_grpc_ceiling": ("tubeq_read", "grpc_ceiling_read"),
}


def measure(spark: Any, masters: str, root: Path, rows: int, size: int,
            rounds: int = 1, transport: str = "") -> dict[str, Any]:
    """``rounds`` rounds of the six timed runs over one cached DataFrame; medians as one dict.

    Why rounds: the JVM compiles each path (Arrow in from a Python worker, Arrow out to one,
    parquet's scan) only once it has run a while, and a 1,000-row warm-up does not get there;
    measured once, whichever source ran first on a shared path paid for the others' warm-up
    (tubeq's read of one topic: 34k rows/s cold, 240k warm). Each
    round starts with a different source, so none always follows another."""
    frame = values_frame(spark, rows, size).cache()
    cached_rows, cached_bytes = read_totals(frame)  # fills the cache, untimed
    if (cached_rows, cached_bytes) != (rows, rows * size):
        raise RuntimeError(f"generated {cached_rows} rows / {cached_bytes} bytes, "
                           f"expected {rows} / {rows * size}")
    t = Targets(spark, masters, root, transport)
    warm_up(t, frame.limit(WARM_UP_ROWS), size)
    per_round = [one_round(t, frame, rows, size, i) for i in range(rounds)]
    frame.unpersist()
    seconds = {k: statistics.median(r[k] for r in per_round) for k in FIGURES}
    figures = {k: rows / s for k, s in seconds.items()}
    return {
        "rows": rows,
        "value_bytes": size,
        "rounds": rounds,
        **{f"{k}_rows_per_s": round(v) for k, v in figures.items()},
        **{f"{k}_MBps": round(v * size / 1e6, 1) for k, v in figures.items()},
        **{name: round(figures[a] / figures[b], 3) for name, (a, b) in RATIOS.items()},
        "tubeq_read_rows": rows, "tubeq_read_value_bytes": rows * size,
        "parquet_read_rows": rows, "parquet_read_value_bytes": rows * size,
        "seconds": {k: round(v, 2) for k, v in seconds.items()},
        "rounds_seconds": [{k: round(r[k], 2) for k in FIGURES} for r in per_round],
    }


def warm_up(t: Targets, warm: Any, size: int) -> None:
    """Untimed: Python workers, connections and a first pass of every path."""
    t.create_topic("bench-spark-warm-up")
    t.tubeq_write(warm, "bench-spark-warm-up")
    t.tubeq_read("bench-spark-warm-up")
    t.parquet_write(warm, "warm-up")
    t.parquet_read("warm-up")
    t.ceiling_write(warm)
    t.ceiling_read(WARM_UP_ROWS, size)
    t.ceiling_write(warm, t.transport)
    t.ceiling_read(WARM_UP_ROWS, size, t.transport)


def one_round(t: Targets, frame: Any, rows: int, size: int, index: int) -> dict[str, float]:
    """Seconds of each figure, writes before reads, the sources rotated by ``index``. Every
    read must return every row and byte written, or the figure would be of something else."""
    name = f"bench-spark-{index}"
    t.create_topic(name)
    runs = {"tubeq_write": lambda: t.tubeq_write(frame, name),
            "parquet_write": lambda: t.parquet_write(frame, name),
            "pyds_ceiling_write": lambda: t.ceiling_write(frame),
            "grpc_ceiling_write": lambda: t.ceiling_write(frame, t.transport),
            "tubeq_read": lambda: t.tubeq_read(name),
            "parquet_read": lambda: t.parquet_read(name),
            "pyds_ceiling_read": lambda: t.ceiling_read(rows, size),
            "grpc_ceiling_read": lambda: t.ceiling_read(rows, size, t.transport)}
    turn = index % WRITES
    writes, reads = FIGURES[:WRITES], FIGURES[WRITES:]
    order = [*writes[turn:], *writes[:turn], *reads[turn:], *reads[:turn]]
    seconds = {}
    for figure in order:
        seconds[figure], result = timed(runs[figure])
        if figure.endswith("_read") and result != (rows, rows * size):
            raise RuntimeError(f"{figure} read {result[0]} rows / {result[1]} bytes, "
                               f"expected {rows} / {rows * size}")
    t.drop(name)
    return seconds


def run(rows: int, size: int, rounds: int = 1) -> dict[str, Any]:
    """Start the cluster and Spark, measure, stop both (by PID) and remove the temp dir."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from load.spark_ceiling import ROWS_PER_BATCH
    from load.transport_ceiling import TransportServer
    from spark_sink.pipelines.local import local_spark
    from tests.cluster import Cluster  # the same process handling the tests use

    load_before = os.getloadavg()[0]
    root = Path(tempfile.mkdtemp(prefix="tubeq-bench-spark-"))
    cluster = Cluster(root / "cluster")
    transport = None
    try:
        cluster.start(brokers=1)
        cluster.use_admin_env()  # auth is on: clients log in as the admin
        transport = TransportServer(root / "transport", ROWS_PER_BATCH, size)
        conf = {**SPARK_CONF, "spark.local.dir": str(root / "spark-local")}
        with local_spark("local[2]", "tubeq-bench-spark", conf) as spark:
            from load.spark_ceiling import CeilingSource

            spark.dataSource.register(CeilingSource)
            result = measure(spark, cluster.master_addresses, root / "parquet", rows, size,
                             rounds, transport.address)
    finally:
        if transport is not None:
            transport.stop()
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
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds of all eight runs; the figures are their medians")
    p.add_argument("--out", type=Path, help="also write the JSON here")
    args = p.parse_args(argv)
    if args.rows < 1 or args.size < 1 or args.rounds < 1:
        p.error("--rows, --size and --rounds must be >= 1")
    stop_on_sigterm()
    text = json.dumps(run(args.rows, args.size, args.rounds), indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
