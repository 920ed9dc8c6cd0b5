"""Streaming write through Spark: the exactly-once tubeq sink (spark_sink/sink.py)."""
from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lib.admin import AdminClient
from lib.errors import PartitionNotHosted, UnknownTopic
from lib.producer.producer import Producer
from spark_sink.options import OptionError
from spark_sink.pipelines.queries import run_query
from tests.integration.test_producer_cluster import fetch_partition
from tests.spark.conftest import ROOT, SPARK_ENV


def produce(masters: str, topic: str, n: int, first: int = 0) -> list[bytes]:
    values = [b"row-%06d" % i for i in range(first, first + n)]
    keys = [b"k%d" % (i % 13) for i in range(first, first + n)]
    with Producer(masters) as producer:
        producer.send_batch(topic, values, keys=keys).result(60)
    return values


def topic_values(masters: str, topic: str) -> list[bytes]:
    """Every value of ``topic``, read straight from its brokers (a broker learns a new topic,
    or a partition moved to it, at its next heartbeat: until then it says UnknownTopic or
    PartitionNotHosted, and this asks the master again)."""
    deadline = time.monotonic() + 30
    while True:
        with AdminClient(masters) as admin:
            info = admin.describe_topic(topic)
        try:
            return [r.value for p in info.partitions
                    for r in fetch_partition(masters, p.address, topic, p.partition)]
        except (UnknownTopic, PartitionNotHosted):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


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


def test_driver_killed_mid_stream_and_restarted_leaves_every_row_exactly_once(
        masters, new_topic, tmp_path):
    source, target = new_topic(partitions=2), new_topic(partitions=2)
    sent = produce(masters, source, 3_000)  # 6 micro-batches of 500
    ckpt = str(tmp_path / "ckpt")
    first = start_driver(masters, source, target, ckpt, tmp_path / "first.log")
    try:
        deadline = time.monotonic() + 240
        while len(topic_values(masters, target)) < 1000:  # 2 micro-batches are in
            assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the stream made no progress"
            time.sleep(0.2)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the driver: its Python and its JVM
        first.wait(30)
    landed = len(topic_values(masters, target))
    assert landed < len(sent), "the driver finished before it was killed: nothing was tested"
    second = start_driver(masters, source, target, ckpt, tmp_path / "second.log")
    try:
        assert second.wait(300) == 0, (tmp_path / "second.log").read_text()[-3000:]
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
            second.wait(30)
    got = topic_values(masters, target)
    assert len(got) == len(sent)
    assert sorted(got) == sorted(b"seen:" + v for v in sent)


def start_driver(masters: str, source: str, target: str, ckpt: str, log,
                 env: dict[str, str] | None = None) -> subprocess.Popen:
    """tests/spark/stream_sink_worker.py in its own session (``env`` on top of Spark's)."""
    # A SIGKILLed JVM leaves its scratch dirs (blockmgr-*, spark-*, artifacts-*) behind: keep
    # them in the test's own dir, not in /tmp.
    scratch = Path(ckpt).parent / "spark-scratch"
    scratch.mkdir(exist_ok=True)
    env = {**os.environ, **SPARK_ENV, "SPARK_LOCAL_DIRS": str(scratch),
           "PYSPARK_SUBMIT_ARGS": f"--driver-java-options -Djava.io.tmpdir={scratch} "
                                  "pyspark-shell", **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.spark.stream_sink_worker", masters, source, target, ckpt,
         "500"], cwd=ROOT, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
        start_new_session=True)
