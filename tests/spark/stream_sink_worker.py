"""A Spark driver for the exactly-once sink test: stream topic A into topic B, then exit.

    python -m tests.spark.stream_sink_worker MASTERS SOURCE TARGET CHECKPOINT MAX_PER_TRIGGER

Run as a child process so that the test can SIGKILL the whole driver (Python and its JVM, one
process group) in the middle of the stream, and start it again on the same checkpoint.
"""
from __future__ import annotations

import sys

from pyspark.sql import functions as F

from spark_sink.pipelines.local import get_or_create, session_builder
from spark_sink.pipelines.queries import run_query


def main(masters: str, source: str, target: str, checkpoint: str, per_trigger: str) -> None:
    spark = get_or_create(session_builder("local[2]", "tubeq-sink-worker",
                                          {"spark.sql.shuffle.partitions": "2"}))
    rows = (spark.readStream.format("tubeq").option("masters", masters)
            .option("subscribe", source).option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", per_trigger).load())
    out = rows.select(F.concat(F.lit(b"seen:"), F.col("value")).alias("value"), "key")
    writer = (out.writeStream.format("tubeq").option("masters", masters).option("topic", target)
              .option("checkpointLocation", checkpoint).trigger(availableNow=True))
    query = run_query(writer.start)
    if query.exception() is not None:
        raise SystemExit(f"query failed: {query.exception()}")
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:6])
