"""Streaming read through Spark: micro-batch limits, AvailableNow, restart from a checkpoint."""
from __future__ import annotations

import time

import pytest

from lib.producer.producer import Producer
from spark_sink.pipelines.queries import run_query, start_query
from spark_sink.stream import cap


def produce(masters: str, topic: str, counts: dict[int, int], first: int = 0) -> None:
    with Producer(masters) as producer:
        for p, n in counts.items():
            values = [b"p%d-%d" % (p, i) for i in range(first, first + n)]
            producer.send_batch(topic, values, partition=p).result(30)


def stream(spark, masters: str, topic: str, **options: str):
    reader = spark.readStream.format("tubeq").option("masters", masters) \
        .option("subscribe", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def run_available_now(df, out_dir: str, checkpoint: str):
    """Run to the end of what is there now, appending each micro-batch to parquet."""
    writer = (df.select("partition", "offset", "value").writeStream.format("parquet")
              .option("path", out_dir).option("checkpointLocation", checkpoint)
              .trigger(availableNow=True))
    query = run_query(writer.start, 120)
    assert not query.isActive
    assert query.exception() is None
    return query


def test_available_now_reads_everything_once_in_batches_bounded_by_max_offsets(
        spark, masters, new_topic, tmp_path):
    topic = new_topic(partitions=2)
    produce(masters, topic, {0: 180, 1: 70})
    df = stream(spark, masters, topic, startingOffsets="earliest", maxOffsetsPerTrigger="100")
    query = run_available_now(df, str(tmp_path / "out"), str(tmp_path / "ckpt"))
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes == [100, 100, 50]
    got = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted((r.partition, r.offset) for r in got) == \
        [(0, o) for o in range(180)] + [(1, o) for o in range(70)]


def test_restarted_query_reads_on_from_its_checkpoint_without_loss_or_repeats(
        spark, masters, new_topic, tmp_path):
    topic = new_topic(partitions=2)
    produce(masters, topic, {0: 30, 1: 20})
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    run_available_now(stream(spark, masters, topic, startingOffsets="earliest"), out, ckpt)
    assert spark.read.parquet(out).count() == 50
    produce(masters, topic, {0: 5, 1: 7}, first=1000)
    # startingOffsets only applies to a new query: the checkpoint wins on restart
    run_available_now(stream(spark, masters, topic, startingOffsets="earliest"), out, ckpt)
    got = sorted((r.partition, r.offset, r.value) for r in spark.read.parquet(out).collect())
    assert len(got) == 62 == len(set(got))
    assert got[30:35] == [(0, 30 + i, b"p0-%d" % (1000 + i)) for i in range(5)]


def test_a_new_stream_starts_at_latest_by_default(spark, masters, new_topic, tmp_path):
    topic = new_topic(partitions=1)
    produce(masters, topic, {0: 10})
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    df = stream(spark, masters, topic)
    writer = (df.select("offset").writeStream.format("parquet").option("path", out)
              .option("checkpointLocation", ckpt).trigger(processingTime="200 milliseconds"))
    query = start_query(writer.start, 60)  # the first trigger fixes the initial offsets
    try:
        deadline = time.monotonic() + 60
        assert query.recentProgress, f"no micro-batch ran: {query.exception()}"
        produce(masters, topic, {0: 3}, first=10)
        while sum(p["numInputRows"] for p in query.recentProgress) < 3 \
                and time.monotonic() < deadline:
            query.awaitTermination(0.5)
    finally:
        query.stop()
    assert sorted(r.offset for r in spark.read.parquet(out).collect()) == [10, 11, 12]


def test_ending_offsets_are_refused_for_a_stream(spark, masters, new_topic, tmp_path):
    topic = new_topic(partitions=1)
    df = stream(spark, masters, topic, endingOffsets="latest")
    with pytest.raises(Exception, match="tubeq option 'endingOffsets': a stream has no end"):
        df.writeStream.format("noop").option("checkpointLocation", str(tmp_path)).start() \
            .awaitTermination(30)


def test_cap_shares_the_limit_in_proportion_to_backlog_and_never_exceeds_it():
    begin = {("a", 0): 0, ("a", 1): 10, ("a", 2): 5}
    end = {("a", 0): 300, ("a", 1): 110, ("a", 2): 5}
    capped = cap(begin, end, 100)
    assert sum(capped[tp] - begin[tp] for tp in begin) == 100
    assert capped == {("a", 0): 75, ("a", 1): 35, ("a", 2): 5}
    assert cap(begin, end, 1000) == end
    one_each = cap({("a", 0): 0, ("a", 1): 0}, {("a", 0): 1, ("a", 1): 1}, 1)
    assert sorted(one_each.values()) == [0, 1]
