"""Batch write and read through Spark against a real cluster, checked by Spark and by lib."""
from __future__ import annotations

import json
import time
import zlib

import pytest
from pyspark.sql import functions as F

from lib.consumer.pull import PullConsumer
from lib.producer.producer import Producer
from lib.types import TopicPartition
from spark_sink.pipelines.queries import run_query

ROWS = 100_000
TASKS = 4  # spark.range cuts ids into TASKS contiguous blocks, one write task each


def read(spark, masters: str, **options: str):
    reader = spark.read.format("tubeq").option("masters", masters)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def lib_read_all(masters: str, topic: str, partitions: int, total: int) -> list:
    with PullConsumer(masters, auto_offset_reset="earliest", enable_auto_commit=False) as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        records: list = []
        deadline = time.monotonic() + 60
        while len(records) < total and time.monotonic() < deadline:
            records += c.poll(timeout=1.0)
    return records


def test_spark_writes_100k_rows_and_spark_and_lib_read_them_back_in_order(
        spark, masters, new_topic):
    topic = new_topic(partitions=4)
    ids = spark.range(0, ROWS, numPartitions=TASKS)
    df = ids.select(
        F.format_string("k%d", F.col("id") % 97).alias("key"),  # string: sent as UTF-8
        F.format_string("value-%d", F.col("id")).cast("binary").alias("value"),
        F.when(F.col("id") % 3 == 0, F.lit("red")).otherwise(F.lit(None)).alias("tag"))
    before_ms = int(time.time() * 1000)
    df.write.format("tubeq").option("masters", masters).option("topic", topic) \
        .mode("append").save()
    after_ms = int(time.time() * 1000)

    table = read(spark, masters, subscribe=topic).toArrow()
    assert table.num_rows == ROWS
    rows = table.to_pylist()
    by_value = {r["value"]: r for r in rows}
    assert len(by_value) == ROWS
    for i in (0, 1, 2, 12345, ROWS - 1):
        r = by_value[b"value-%d" % i]
        key = b"k%d" % (i % 97)
        assert r["key"] == key
        assert r["partition"] == zlib.crc32(key) % 4  # placed by key, as Producer.send does
        assert r["tag"] == ("red" if i % 3 == 0 else None)
        assert r["topic"] == topic
        assert before_ms - 1000 <= r["timestamp"].timestamp() * 1000 <= after_ms + 1000

    # Every partition is dense from 0, and the rows of each write task keep their order in it.
    per_partition: dict[int, list] = {}
    for r in sorted(rows, key=lambda r: (r["partition"], r["offset"])):
        per_partition.setdefault(r["partition"], []).append(r)
    for p, part_rows in per_partition.items():
        assert [r["offset"] for r in part_rows] == list(range(len(part_rows))), p
        ids_seen = [int(r["value"].split(b"-")[1]) for r in part_rows]
        for task in range(TASKS):
            mine = [i for i in ids_seen if i * TASKS // ROWS == task]
            assert mine == sorted(mine), (p, task)

    records = lib_read_all(masters, topic, 4, ROWS)
    assert len(records) == ROWS
    assert {(x.partition, x.offset, x.value, x.key, x.tag or None) for x in records} == \
        {(r["partition"], r["offset"], r["value"], r["key"], r["tag"]) for r in rows}


def produce(masters: str, topic: str, counts: dict[int, int], tag_of=None) -> None:
    with Producer(masters) as producer:
        for p, n in counts.items():
            values = [b"p%d-%d" % (p, i) for i in range(n)]
            tags = [tag_of(i) for i in range(n)] if tag_of else None
            producer.send_batch(topic, values, tags=tags, partition=p).result(30)


def test_read_honours_starting_and_ending_offsets_given_as_json(spark, masters, new_topic):
    topic = new_topic(partitions=2)
    produce(masters, topic, {0: 100, 1: 50})
    df = read(spark, masters, subscribe=topic,
              startingOffsets=json.dumps({topic: {"0": 10, "1": -2}}),
              endingOffsets=json.dumps({topic: {"0": 20, "1": -1}}))
    got = sorted((r.partition, r.offset, r.value) for r in df.collect())
    assert got == [(0, o, b"p0-%d" % o) for o in range(10, 20)] + \
                  [(1, o, b"p1-%d" % o) for o in range(50)]


def test_assign_reads_only_the_named_partitions_and_min_partitions_splits_the_range(
        spark, masters, new_topic):
    topic = new_topic(partitions=3)
    produce(masters, topic, {0: 10, 1: 100, 2: 10})
    df = read(spark, masters, assign=json.dumps({topic: [1]}), minPartitions="5",
              startingOffsets="earliest", endingOffsets="latest")
    assert df.rdd.getNumPartitions() == 5
    got = df.select("partition", "offset").orderBy("offset").collect()
    assert [(r.partition, r.offset) for r in got] == [(1, o) for o in range(100)]


def test_tags_option_returns_only_records_with_those_tags(spark, masters, new_topic):
    topic = new_topic(partitions=2)
    tags = ["a", "b", "", "c"]
    produce(masters, topic, {0: 400, 1: 400}, tag_of=lambda i: tags[i % 4])
    df = read(spark, masters, subscribe=topic, tags="a, c")
    got = sorted((r.partition, r.offset, r.tag) for r in df.collect())
    want = sorted((p, o, tags[o % 4]) for p in (0, 1) for o in range(400) if o % 4 in (0, 3))
    assert got == want


def test_write_routes_rows_by_topic_and_partition_columns(spark, masters, new_topic):
    first, second = new_topic(partitions=2), new_topic(partitions=3)
    df = spark.createDataFrame(
        [(first, 1, "x0"), (second, 2, "y0"), (first, None, "x1"), (second, 2, "y1"),
         (first, 1, "x2")], "topic string, partition int, value string")
    df.coalesce(1).write.format("tubeq").option("masters", masters).mode("append").save()
    got = read(spark, masters, subscribePattern=f"({first}|{second})").collect()
    placed = sorted((r.topic, r.partition, r.offset, r.value) for r in got)
    assert [x for x in placed if x[0] == second] == [(second, 2, 0, b"y0"), (second, 2, 1, b"y1")]
    ones = [x[3] for x in placed if x[0] == first and x[1] == 1]
    assert ones in ([b"x0", b"x2"], [b"x0", b"x1", b"x2"])  # x1 (no partition, no key): 0 or 1
    assert sorted(x[3] for x in placed if x[0] == first) == [b"x0", b"x1", b"x2"]


def test_include_headers_adds_a_headers_map_column(spark, masters, new_topic):
    topic = new_topic(partitions=1)
    with Producer(masters) as producer:
        producer.send(topic, b"v", headers={"trace": b"\x01\x02"}, partition=0).result(30)
    df = read(spark, masters, subscribe=topic, includeHeaders="true")
    assert df.schema["headers"].dataType.simpleString() == "map<string,binary>"
    table = df.toArrow()
    assert table.column("headers").to_pylist() == [[("trace", b"\x01\x02")]]
    assert table.column("value").to_pylist() == [b"v"]


def test_headers_written_by_spark_read_back_the_same_and_copy_through_a_stream(
        spark, masters, new_topic, tmp_path):
    topic, copy = new_topic(partitions=1), new_topic(partitions=1)
    df = spark.createDataFrame(
        [("a", {"trace": b"\x01", "user": b"u1"}), ("b", None), ("c", {})],
        "value string, headers map<string,binary>")
    df.coalesce(1).write.format("tubeq").option("masters", masters).option("topic", topic) \
        .mode("append").save()
    texts = spark.createDataFrame([("d", {"lang": "fr"})],
                                  "value string, headers map<string,string>")
    texts.write.format("tubeq").option("masters", masters).option("topic", topic) \
        .mode("append").save()
    got = read(spark, masters, subscribe=topic, includeHeaders="true").toArrow()
    want = [{"trace": b"\x01", "user": b"u1"}, {}, {}, {"lang": b"fr"}]  # a map has no order
    assert [dict(h) for h in got.column("headers").to_pylist()] == want
    assert got.column("value").to_pylist() == [b"a", b"b", b"c", b"d"]
    writer = (spark.readStream.format("tubeq").option("masters", masters).option("subscribe", topic)
              .option("startingOffsets", "earliest").option("includeHeaders", "true").load()
              .select("value", "headers").writeStream.format("tubeq").option("masters", masters)
              .option("topic", copy).option("checkpointLocation", str(tmp_path / "ckpt"))
              .trigger(availableNow=True))
    stream = run_query(writer.start, 120)
    assert stream.exception() is None
    copied = read(spark, masters, subscribe=copy, includeHeaders="true").toArrow()
    assert [dict(h) for h in copied.column("headers").to_pylist()] == want


@pytest.mark.parametrize("ending", ["latest", "earliest"])
def test_empty_ranges_give_an_empty_frame(spark, masters, new_topic, ending):
    topic = new_topic(partitions=2)
    produce(masters, topic, {0: 5})
    df = read(spark, masters, subscribe=topic, startingOffsets="latest", endingOffsets=ending) \
        if ending == "latest" else read(spark, masters, subscribe=topic, endingOffsets=ending)
    assert df.count() == 0


def test_a_read_committed_read_ends_at_the_last_stable_offset_and_skips_aborted_records(
        spark, masters, new_topic):
    topic = new_topic(partitions=1)
    with Producer(masters, transactional_id=f"{topic}-writer", linger_ms=1) as producer:
        with producer.transaction():
            producer.send_batch(topic, [b"committed-%d" % i for i in range(5)])
        producer.begin()
        producer.send_batch(topic, [b"aborted-%d" % i for i in range(3)])
        producer.abort()
        producer.begin()
        producer.send_batch(topic, [b"open-%d" % i for i in range(2)])
        producer.flush()
        with Producer(masters) as plain:  # after the open transaction: not stable yet
            plain.send_sync(topic, b"plain-after")

        def values(isolation: str) -> list[bytes]:
            rows = read(spark, masters, subscribe=topic, isolationLevel=isolation).toArrow()
            return rows.column("value").to_pylist()

        assert values("read_committed") == [b"committed-%d" % i for i in range(5)], \
            "stops before the open transaction; the aborted one left out"
        assert len(values("read_uncommitted")) == 11, "everything but the markers"
        producer.commit()
    assert values("read_committed") == [*(b"committed-%d" % i for i in range(5)),
                                        b"open-0", b"open-1", b"plain-after"]
