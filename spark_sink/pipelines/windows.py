"""Count a topic's records over event-time windows, exactly once, into another topic.

    python -m spark_sink.pipelines.windows --masters M --source T --target T2
        --checkpoint DIR [--window "10 seconds"] [--watermark "30 seconds"]
        [--by key|tag|none] [--once] [--max-per-trigger N] [--spark-master local[2]]

(also ``tubeq spark run windows ...``). A Structured Streaming job: it reads ``--source`` with
``readStream.format("tubeq")``, takes each record's timestamp as its event time, counts records
and value bytes per window (and per key or tag) with a watermark, and writes every window once
it is closed (append mode: when the watermark, the newest event time seen minus
``--watermark``, passes the window's end) to ``--target`` through the exactly-once tubeq sink.
Each result is one record: the group as its key (none for ``--by none``) and as value the JSON
``{"window_start": ms, "window_end": ms, "group": str|null, "records": n, "bytes": n}``.

The checkpoint keeps the query's progress and state, and names the sink: a restart on the same
checkpoint goes on where it stopped and never writes a window twice. ``--once`` processes what
the source holds now and stops (Trigger.AvailableNow); otherwise it runs until Ctrl-C. A line
of progress (micro-batch, input rows, rows/s, windows written) goes to stderr every few
seconds.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lib.errors import InvalidArgument
from lib.names import check_name
from spark_sink.pipelines.queries import run_query

Say = Callable[[str], None]
GROUPS = ("key", "tag", "none")


@dataclass(frozen=True)
class WindowSpec:
    masters: str
    source: str
    target: str
    checkpoint: str
    window: str = "10 seconds"
    watermark: str = "30 seconds"
    by: str = "key"
    once: bool = False
    max_per_trigger: int | None = None

    def __post_init__(self) -> None:
        check_name(self.source)
        check_name(self.target)
        if self.by not in GROUPS:
            raise InvalidArgument(f"--by must be one of {', '.join(GROUPS)}, got {self.by!r}")
        if not self.checkpoint:
            raise InvalidArgument("--checkpoint is required: it holds the query's progress "
                                  "and names its exactly-once sink")
        if self.max_per_trigger is not None and self.max_per_trigger < 1:
            raise InvalidArgument("--max-per-trigger must be >= 1")


def window_counts(spark: Any, spec: WindowSpec) -> Any:
    """The streaming DataFrame of closed windows, in the sink's columns (key, value)."""
    from pyspark.sql import functions as F

    reader = (spark.readStream.format("tubeq").option("masters", spec.masters)
              .option("subscribe", spec.source).option("startingOffsets", "earliest"))
    if spec.max_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(spec.max_per_trigger))
    events = reader.load().withWatermark("timestamp", spec.watermark)
    group = {"key": F.col("key").cast("string"), "tag": F.col("tag"),
             "none": F.lit(None).cast("string")}[spec.by]
    counted = (events.groupBy(F.window("timestamp", spec.window).alias("w"),
                              group.alias("group"))
               .agg(F.count(F.lit(1)).alias("records"),
                    F.sum(F.length("value")).alias("bytes")))
    millis = F.unix_millis
    value = F.to_json(F.struct(millis(F.col("w.start")).alias("window_start"),
                               millis(F.col("w.end")).alias("window_end"),
                               F.col("group"), F.col("records"), F.col("bytes")),
                      {"ignoreNullFields": "false"})  # "group": null for --by none
    return counted.select(F.col("group").cast("binary").alias("key"), value.alias("value"))


def run_windows(spark: Any, spec: WindowSpec, say: Say, interval: float = 5.0) -> int:
    """Run the query (to the end of the source with ``once``); returns the windows written."""
    writer = (window_counts(spark, spec).writeStream.format("tubeq").outputMode("append")
              .option("masters", spec.masters).option("topic", spec.target)
              .option("checkpointLocation", spec.checkpoint))
    writer = writer.trigger(availableNow=True) if spec.once else \
        writer.trigger(processingTime="5 seconds")
    started: list[Any] = []  # the query of each start (run_query may start it again)
    written = [0]
    done = threading.Event()

    def start() -> Any:
        started.append(writer.start())
        return started[-1]

    def report() -> None:
        while not done.wait(interval):
            p = started[-1].lastProgress if started else None
            if p:
                say(f"  batch {p['batchId']}: {p['numInputRows']} rows in, "
                    f"{p.get('processedRowsPerSecond', 0):.0f} rows/s, windows written so far "
                    f"{written[0]}")

    def count(batch_progress: Any) -> None:
        written[0] += int(batch_progress.get("sink", {}).get("numOutputRows", 0) or 0)

    thread = threading.Thread(target=report, name="windows-progress", daemon=True)
    thread.start()
    try:
        query = run_query(start)
    except KeyboardInterrupt:
        if not started:
            raise
        query = started[-1]
        query.stop()
    finally:
        done.set()
    for p in query.recentProgress:
        count(p)
    if query.exception() is not None:
        raise RuntimeError(f"the windows query failed: {query.exception()}")
    return written[0]


def parse(argv: list[str] | None) -> tuple[WindowSpec, str]:
    p = argparse.ArgumentParser(prog="python -m spark_sink.pipelines.windows",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--masters", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--target", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--window", default="10 seconds")
    p.add_argument("--watermark", default="30 seconds")
    p.add_argument("--by", default="key", choices=GROUPS)
    p.add_argument("--once", action="store_true")
    p.add_argument("--max-per-trigger", type=int)
    p.add_argument("--spark-master", default="local[2]")
    a = p.parse_args(argv)
    return WindowSpec(a.masters, a.source, a.target, a.checkpoint, a.window, a.watermark, a.by,
                      a.once, a.max_per_trigger), a.spark_master


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # SIGTERM stops the query as Ctrl-C does


def main(argv: list[str] | None = None) -> int:
    from spark_sink.pipelines.local import local_spark

    spec, master = parse(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    with local_spark(master, "tubeq-windows", {"spark.sql.shuffle.partitions": "2"}) as spark:
        written = run_windows(spark, spec, lambda s: print(s, file=sys.stderr, flush=True))
    print(f"windows written to {spec.target}: {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
