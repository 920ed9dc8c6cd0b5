"""Feed a topic through ``format("tubeq")``: a generated dataset, a CSV file or a Parquet file.

    python -m spark_sink.pipelines.feed --masters M --topic T
        (--rows N [--size B] | --csv FILE | --parquet FILE)
        [--key-column C] [--value-column C] [--partitions P] [--spark-master local[2]]

(also ``tubeq spark feed ...``). The topic is created if missing (``--partitions``, else the
master's default; an existing topic keeps its own). A generated dataset has the columns ``id``
and ``value`` (``"<id>:"`` padded with dots to ``--size`` bytes); a file's rows are sent with
the ``--value-column`` as the value, or, without one, the whole row as a JSON object. The
``--key-column`` (any type; not a string or binary: as its string) keys the records, which then
go to ``crc32(key) % partitions`` as with ``Producer.send``; without one, rows are spread.

While Spark writes, a line of progress goes to stderr every few seconds: the records stored
in the topic since the start (the sum of its partitions' latest offsets, asked of the brokers)
and Spark's finished tasks. The summary counts the same way, so it is exact unless something
else writes to the topic meanwhile (and, the write being at-least-once, it includes the records
a retried task sent again). Missing files and columns are :class:`FeedError`, found before any
row is written.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lib.errors import InvalidArgument, TopicExists, TubeqError, UnknownTopic
from spark_sink.options import write_options

Say = Callable[[str], None]


class FeedError(InvalidArgument):
    """A feed cannot start: a missing file or column, or no (or two) sources."""

    code = "INVALID_FEED"


@dataclass(frozen=True)
class FeedSpec:
    """What to feed where; checked on construction (no network, no Spark)."""

    masters: str
    topic: str
    rows: int | None = None
    size: int = 1024
    csv: Path | None = None
    parquet: Path | None = None
    key_column: str | None = None
    value_column: str | None = None
    partitions: int | None = None

    def __post_init__(self) -> None:
        write_options({"masters": self.masters, "topic": self.topic})  # OptionError if wrong
        given = [s for s in ("rows", "csv", "parquet") if getattr(self, s) is not None]
        if len(given) != 1:
            raise FeedError("give exactly one source: --rows N, --csv FILE or --parquet FILE "
                            f"(got {', '.join(given) or 'none'})")
        if (self.rows is not None and self.rows < 1) or self.size < 1:
            raise FeedError("--rows and --size must be >= 1", rows=self.rows, size=self.size)
        if self.partitions is not None and self.partitions < 1:
            raise FeedError("--partitions must be >= 1", partitions=self.partitions)
        path = self.csv or self.parquet
        if path is not None and not Path(path).exists():
            raise FeedError(f"no such file: {path}", path=str(path))

    @property
    def source(self) -> str:
        if self.rows is not None:
            return f"{self.rows:,} generated rows of {self.size} B"
        return f"CSV {self.csv}" if self.csv is not None else f"Parquet {self.parquet}"


@dataclass(frozen=True)
class FeedResult:
    """What a feed stored: records added to the topic and how long the write took."""

    topic: str
    rows: int
    seconds: float
    created: bool

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        return (f"fed {self.rows:,} rows into {self.topic} in {self.seconds:.1f} s "
                f"({self.rows_per_s:,.0f} rows/s)")


def source_frame(spark: Any, spec: FeedSpec) -> Any:
    """The rows to feed, as Spark reads or generates them."""
    from pyspark.sql import functions as F

    if spec.rows is not None:
        tasks = max(2, spark.sparkContext.defaultParallelism)
        ids = spark.range(0, spec.rows, numPartitions=tasks)
        return ids.select("id", F.rpad(F.concat(F.col("id").cast("string"), F.lit(":")),
                                       spec.size, ".").alias("value"))
    if spec.csv is not None:
        return spark.read.option("header", "true").csv(str(spec.csv))
    return spark.read.parquet(str(spec.parquet))


def records(frame: Any, spec: FeedSpec) -> Any:
    """``value`` (and ``key``) as the tubeq writer takes them; FeedError for a missing column."""
    from pyspark.sql import functions as F

    value_column = spec.value_column or ("value" if spec.rows is not None else None)
    for column in (spec.key_column, value_column):
        if column is not None and column not in frame.columns:
            raise FeedError(f"no column {column!r} in {spec.source}; its columns: "
                            f"{', '.join(frame.columns)}", column=column)
    if value_column is None:
        value = F.to_json(F.struct(*[F.col(f"`{c}`") for c in frame.columns]))
    else:
        value = _bytes_or_string(frame, value_column)
    out = [value.alias("value")]
    if spec.key_column is not None:
        out.append(_bytes_or_string(frame, spec.key_column).alias("key"))
    return frame.select(*out)


def _bytes_or_string(frame: Any, column: str) -> Any:
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    kind = frame.schema[column].dataType
    col = F.col(f"`{column}`")
    return col if isinstance(kind, (T.BinaryType, T.StringType)) else col.cast("string")


def ensure_topic(masters: str, topic: str, partitions: int | None = None,
                 durability: str | None = None, timeout: float = 30.0) -> bool:
    """Create the topic if missing, then wait until every partition is served; True if created.

    Brokers learn that they host a new topic's partitions at their next heartbeat; until then
    its offsets read -1."""
    from lib.admin import AdminClient

    created = False
    with AdminClient(masters) as admin:
        try:
            admin.describe_topic(topic)
        except UnknownTopic:
            try:
                admin.create_topic(topic, partitions=partitions, durability=durability)
                created = True
            except TopicExists:
                pass
        deadline = time.monotonic() + timeout
        while not all(p.available and p.latest >= 0
                      for p in admin.describe_topic(topic).partitions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {topic}: partitions not served after {timeout} s")
            time.sleep(0.1)
    return created


def stored(admin: Any, topic: str) -> int:
    """Records in the topic so far: the sum of its partitions' latest offsets."""
    return sum(max(p.latest, 0) for p in admin.describe_topic(topic).partitions)


class Progress:
    """Says every ``interval`` seconds how many records the topic gained and Spark's tasks."""

    def __init__(self, spark: Any, masters: str, topic: str, say: Say,
                 interval: float = 2.0) -> None:
        from lib.admin import AdminClient

        self.spark, self.topic, self.say, self.interval = spark, topic, say, interval
        self.admin = AdminClient(masters)
        try:
            self.base = stored(self.admin, topic)
        except BaseException:
            self.admin.close()
            raise
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="feed-progress", daemon=True)

    def __enter__(self) -> Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def added(self) -> int:
        return stored(self.admin, self.topic) - self.base

    def close(self) -> None:
        self.admin.close()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                rows, tasks = self.added(), self._tasks()
            except Exception as exc:  # noqa: BLE001 - progress must never end the feed
                self.say(f"  (progress unavailable: {exc})")
                continue
            if rows == 0:  # Spark is still starting workers and planning
                self.say(f"  waiting for the first rows{tasks}")
                continue
            rate = rows / (time.monotonic() - self.started)
            self.say(f"  {rows:,} rows stored ({rate:,.0f} rows/s){tasks}")

    def _tasks(self) -> str:
        tracker = self.spark.sparkContext.statusTracker()
        done = total = 0
        for stage in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage)
            if info is not None:
                done, total = done + info.numCompletedTasks, total + info.numTasks
        return f", Spark tasks {done}/{total}" if total else ""


def feed(spark: Any, spec: FeedSpec, say: Say | None = None,
         interval: float = 2.0) -> FeedResult:
    """Write the source's rows into the topic (created if missing); what was stored."""
    say = say or _to_stderr
    frame = records(source_frame(spark, spec), spec)  # column errors before any topic change
    created = ensure_topic(spec.masters, spec.topic, spec.partitions)
    say(f"feeding {spec.source} into {'new' if created else 'existing'} topic {spec.topic}")
    progress = Progress(spark, spec.masters, spec.topic, say, interval)
    try:
        start = time.monotonic()
        with progress:
            frame.write.format("tubeq").option("masters", spec.masters) \
                .option("topic", spec.topic).mode("append").save()
        seconds = time.monotonic() - start
        return FeedResult(spec.topic, progress.added(), seconds, created)
    finally:
        progress.close()


def run_feed(spec: FeedSpec, spark_master: str = "local[2]", say: Say | None = None) -> FeedResult:
    """``feed`` in the active Spark session, or in one started here and stopped afterwards."""
    from spark_sink.pipelines.local import local_spark

    with local_spark(spark_master, f"tubeq-feed-{spec.topic}",
                     {"spark.ui.showConsoleProgress": "false"}) as spark:
        return feed(spark, spec, say)


def _to_stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _stop_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through local_spark: its JVM is stopped by PID


def parse(argv: list[str] | None) -> tuple[FeedSpec, str]:
    p = argparse.ArgumentParser(prog="python -m spark_sink.pipelines.feed",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--masters", default=os.environ.get("TUBEQ_MASTERS"),
                   required="TUBEQ_MASTERS" not in os.environ,
                   help="master addresses host:port,... (env TUBEQ_MASTERS)")
    p.add_argument("--topic", required=True)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--rows", type=int, help="generate this many rows")
    source.add_argument("--csv", type=Path, help="a CSV file with a header line (or a dir)")
    source.add_argument("--parquet", type=Path, help="a Parquet file (or a dir)")
    p.add_argument("--size", type=int, default=1024, help="bytes per generated value")
    p.add_argument("--key-column", help="the column whose value keys each record")
    p.add_argument("--value-column", help="the column sent as the value (default: the row as "
                                          "JSON; generated rows: value)")
    p.add_argument("--partitions", type=int, help="partitions of the topic if it is created")
    p.add_argument("--spark-master", default="local[2]", help="Spark master (default local[2])")
    args = p.parse_args(argv)
    spec = FeedSpec(args.masters, args.topic, rows=args.rows, size=args.size, csv=args.csv,
                    parquet=args.parquet, key_column=args.key_column,
                    value_column=args.value_column, partitions=args.partitions)
    return spec, args.spark_master


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        spec, spark_master = parse(argv)
        print(run_feed(spec, spark_master).summary(), flush=True)
    except TubeqError as exc:
        print(f"error: {type(exc).__name__}: {exc.message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
