"""Starting from a timestamp (batch and stream) and reporting a stream's progress to a group."""
from __future__ import annotations

import json
import time

import pytest
from pyspark.errors.exceptions.captured import CapturedException

from lib.admin import AdminClient
from lib.consumer.pull import PullConsumer
from lib.producer.producer import Producer
from spark_sink.options import OptionError, read_options
from spark_sink.pipelines.queries import run_query


def produce(masters: str, topic: str, counts: dict[int, int], phase: str) -> None:
    with Producer(masters) as producer:
        for p, n in counts.items():
            if n:
                values = [b"%s-p%d-%d" % (phase.encode(), p, i) for i in range(n)]
                producer.send_batch(topic, values, partition=p).result(30)


def two_phases(masters: str, topic: str) -> int:
    """Records before and after a boundary (epoch ms) that no record's timestamp equals;
    partition 1 gets nothing after it."""
    produce(masters, topic, {0: 6, 1: 4}, "old")
    time.sleep(0.05)
    boundary = int(time.time() * 1000)
    time.sleep(0.05)
    produce(masters, topic, {0: 3, 1: 0}, "new")
    return boundary


def load(spark, **options: str):
    reader = spark.read.format("tubeq")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_batch_read_from_a_timestamp_returns_exactly_the_rows_from_then_on(
        spark, masters, new_topic):
    topic = new_topic(partitions=2)
    boundary = two_phases(masters, topic)
    rows = load(spark, masters=masters, subscribe=topic,
                startingTimestamp=str(boundary)).collect()
    assert sorted((r.partition, r.offset, r.value) for r in rows) == \
        [(0, 6 + i, b"new-p0-%d" % i) for i in range(3)]
    assert all(r.timestamp.timestamp() * 1000 >= boundary for r in rows)
    # per partition: partition 1 is not named, so it is read from its earliest offset
    by_partition = json.dumps({topic: {"0": boundary}})
    rows = load(spark, masters=masters, subscribe=topic,
                startingOffsetsByTimestamp=by_partition).collect()
    assert sorted((r.partition, r.value) for r in rows) == \
        [(0, b"new-p0-%d" % i) for i in range(3)] + [(1, b"old-p1-%d" % i) for i in range(4)]


def run_available_now(spark, masters: str, topic: str, tmp_path, **options: str):
    reader = spark.readStream.format("tubeq").option("masters", masters) \
        .option("subscribe", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    out = str(tmp_path / "out")
    writer = (reader.load().select("partition", "offset", "value").writeStream
              .format("parquet").option("path", out)
              .option("checkpointLocation", str(tmp_path / "ckpt"))
              .trigger(availableNow=True))
    query = run_query(writer.start, 120)
    assert not query.isActive
    assert query.exception() is None
    return sorted((r.partition, r.offset, r.value) for r in spark.read.parquet(out).collect())


def test_stream_with_group_id_commits_its_end_offsets_so_the_group_shows_no_lag(
        spark, masters, new_topic, tmp_path):
    topic = new_topic(partitions=2)
    boundary = two_phases(masters, topic)
    group = f"g-{topic}"
    got = run_available_now(spark, masters, topic, tmp_path, groupId=group,
                            startingTimestamp=str(boundary), maxOffsetsPerTrigger="2")
    assert got == [(0, 6 + i, b"new-p0-%d" % i) for i in range(3)]
    rows = described(masters, group, {topic})
    assert sorted((r.topic, r.partition, r.committed, r.latest, r.lag) for r in rows) == \
        [(topic, 0, 9, 9, 0), (topic, 1, 4, 4, 0)]


def test_a_group_with_a_live_member_elsewhere_also_shows_the_streams_topic(
        spark, masters, new_topic, tmp_path):
    # The stream commits as a manual assignment beside the group's live member (on another
    # topic); the brokers report the new (group, topic) and the master lists both.
    topic, other = new_topic(partitions=1), new_topic(partitions=1)
    group = f"g-{topic}"
    produce(masters, topic, {0: 5}, "old")
    with PullConsumer(masters, group=group, enable_auto_commit=False) as member:
        member.subscribe([other])
        got = run_available_now(spark, masters, topic, tmp_path, groupId=group,
                                startingOffsets="earliest")
        assert [o for _, o, _ in got] == [0, 1, 2, 3, 4]
        rows = described(masters, group, {topic, other})
    assert [(r.partition, r.committed, r.lag) for r in rows if r.topic == topic] == [(0, 5, 0)]


def described(masters: str, group: str, topics: set[str], timeout: float = 20.0) -> list:
    """The group's partitions once ``describe_group`` lists every one of ``topics`` (the
    brokers report a new (group, topic) in their next heartbeat)."""
    deadline = time.monotonic() + timeout
    with AdminClient(masters) as admin:
        while True:
            rows = admin.describe_group(group).partitions
            if {r.topic for r in rows} >= topics or time.monotonic() > deadline:
                return rows
            time.sleep(0.1)


@pytest.mark.parametrize(("options", "expected"), [
    ({"startingTimestamp": "yesterday"},
     "tubeq option 'startingTimestamp': expected an integer, got 'yesterday'"),
    ({"startingTimestamp": "-1"}, "tubeq option 'startingTimestamp': must be >= 0, got -1"),
    ({"startingTimestamp": "5", "startingOffsets": "earliest"},
     "tubeq option 'startingTimestamp': cannot be combined with startingOffsets"),
    ({"startingOffsetsByTimestamp": '{"t": {"0": -5}}'},
     "tubeq option 'startingOffsetsByTimestamp': t[0] = -5: partitions are numbers, "
     "timestamps are epoch milliseconds >= 0"),
    ({"startingOffsetsByTimestamp": '{"t": {"0": 1}}', "startingTimestamp": "1"},
     "tubeq option 'startingOffsetsByTimestamp': cannot be combined with startingTimestamp"),
    ({"groupId": "no/slash"}, "tubeq option 'groupId': invalid group name"),
])
def test_bad_timestamp_and_group_options_name_the_option(options, expected):
    with pytest.raises(OptionError) as info:
        read_options({"masters": "h:1", "subscribe": "t", **options})
    assert expected in str(info.value)


@pytest.mark.parametrize(("options", "expected"), [
    ({"startingTimestamp": "1.5e12"}, "tubeq option 'startingTimestamp': expected an integer"),
    ({"groupId": "g"}, "tubeq option 'groupId': a batch read commits no progress"),
])
def test_bad_timestamp_and_group_options_fail_on_the_driver(spark, masters, new_topic,
                                                              options, expected):
    topic = new_topic(partitions=1)
    with pytest.raises(CapturedException) as info:
        load(spark, masters=masters, subscribe=topic, **options).collect()
    assert expected in str(info.value)


def test_starting_offsets_by_timestamp_must_name_partitions_the_read_covers(
        spark, masters, new_topic):
    topic = new_topic(partitions=2)
    with pytest.raises(CapturedException) as info:
        load(spark, masters=masters, subscribe=topic,
             startingOffsetsByTimestamp=json.dumps({topic: {"7": 0}})).collect()
    assert f"tubeq option 'startingOffsetsByTimestamp': topic {topic!r} has 2 partitions: " \
        "no partition 7" in str(info.value)
