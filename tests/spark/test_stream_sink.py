"""Streaming write through Spark: the exactly-once tubeq sink (spark_sink/sink.py)."""
from __future__ import annotations

import collections

import pytest

from lib.admin import AdminClient
from spark_sink.options import OptionError
from spark_sink.pipelines.queries import run_query
from tests.integration.test_producer_cluster import fetch_partition
from tests.spark.drivers import produce, topic_values


def write_stream(spark, masters: str, source: str, target: str, checkpoint: str, **options):
    rows = (spark.readStream.format("tubeq").option("masters", masters)
            .option("subscribe", source).option("startingOffsets", "earliest"))
    for k, v in options.items():
        rows = rows.option(k, v)
    writer = (rows.load().select("value", "key").writeStream.format("tubeq")
              .option("masters", masters).option("topic", target)
              .option("checkpointLocation", checkpoint).trigger(availableNow=True))
    query = run_query(writer.start, 180)
    assert query.exception() is None
    return query


def test_stream_write_lands_every_row_once_and_a_restart_adds_only_new_rows(
        spark, masters, new_topic, tmp_path):
    source, target = new_topic(partitions=2), new_topic(partitions=3)
    sent = produce(masters, source, 3000)
    ckpt = str(tmp_path / "ckpt")
    query = write_stream(spark, masters, source, target, ckpt, maxOffsetsPerTrigger="1000")
    assert len([p for p in query.recentProgress if p["numInputRows"]]) >= 3
    assert sorted(topic_values(masters, target)) == sorted(sent)
    more = produce(masters, source, 500, first=3000)
    write_stream(spark, masters, source, target, ckpt)
    assert sorted(topic_values(masters, target)) == sorted(sent + more)


def test_keyed_rows_keep_their_partition_and_order(spark, masters, new_topic, tmp_path):
    source, target = new_topic(partitions=1), new_topic(partitions=3)
    sent = produce(masters, source, 1200)
    write_stream(spark, masters, source, target, str(tmp_path / "ckpt"),
                 maxOffsetsPerTrigger="400")
    with AdminClient(masters) as admin:
        info = admin.describe_topic(target)
    import zlib
    for p in info.partitions:
        records = fetch_partition(masters, p.address, target, p.partition)
        assert all(zlib.crc32(r.key) % 3 == p.partition for r in records)
        per_key = collections.defaultdict(list)
        for r in records:
            per_key[r.key].append(r.value)
        for values in per_key.values():
            assert values == sorted(values)  # one source partition: row order kept per key
    assert sorted(topic_values(masters, target)) == sorted(sent)


def test_a_stream_write_without_checkpoint_or_sink_id_is_refused(spark, masters, new_topic):
    from spark_sink.options import write_options
    from spark_sink.sink import sink_id

    with pytest.raises(OptionError, match="checkpointLocation"):
        sink_id(write_options({"masters": masters}))
    with pytest.raises(OptionError, match="sinkId"):
        write_options({"masters": masters, "sinkId": "bad/id"})
    assert sink_id(write_options({"masters": masters, "checkpointLocation": "/a/b/"})) == \
        sink_id(write_options({"masters": masters, "checkpointLocation": "/a/b"}))
