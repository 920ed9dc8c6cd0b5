"""Streaming read under faults: retention deleting what a query has not read yet, and topics
and partitions that appear while a query runs.

The retention tests run their own one-broker cluster whose stores roll small segments and apply
retention every 200 ms (``[broker.store]``), with a size limit on the topic: producing past it
deletes whole old segments within a few checks, and the test waits on the partition's earliest
offset (``describe_topic`` asks the broker) instead of sleeping.
"""
from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest

from lib.admin import AdminClient
from lib.errors import UnknownTopic
from lib.producer.producer import Producer
from spark_sink.pipelines.queries import run_query, start_query
from tests.cluster import Cluster

# A topic's max_message_bytes raises its cache block and segment to at least that + 64 KiB
# (broker/config.py topic_store_config): with 2 KiB messages, segments roll at ~66 KiB.
STORE_TOML = """\
[broker.store]
cache_block_bytes = 65536
max_batch_bytes = 32768
max_message_bytes = 4096
segment_bytes = 65536
cache_flush_interval_ms = 50
retention_check_interval_ms = 200
"""
VALUE_BYTES = 1000
RETENTION_BYTES = 150_000  # per store: two segments and a bit
WAIT_S = 60.0


@pytest.fixture(scope="module")
def small_segments(tmp_path_factory) -> Iterator[str]:
    """Masters of a one-broker cluster with ~65 KiB segments and retention every 200 ms."""
    root = tmp_path_factory.mktemp("retention-cluster")
    config = root / "broker.toml"
    config.write_text(STORE_TOML)
    cluster = Cluster(root, broker_args=["--config", str(config)])
    try:
        yield cluster.start(1).master_addresses
    finally:
        cluster.stop_all()


def produce(masters: str, topic: str, partition: int, first: int, n: int,
            size: int = VALUE_BYTES) -> None:
    """Records ``first..first+n-1`` of ``partition``, in batches under max_batch_bytes."""
    with Producer(masters) as producer:
        for start in range(first, first + n, 25):
            values = [b"p%d-%d-" % (partition, i) + b"x" * size
                      for i in range(start, min(first + n, start + 25))]
            producer.send_batch(topic, values, partition=partition).result(30)


def earliest_when_settled(masters: str, topic: str, partition: int, above: int) -> int:
    """The partition's earliest offset once retention moved it past ``above`` and it has held
    still for a second (five retention checks: everything written has been judged)."""
    deadline = time.monotonic() + WAIT_S
    seen, since = -1, time.monotonic()
    with AdminClient(masters) as admin:
        while time.monotonic() < deadline:
            now = admin.describe_topic(topic).partitions[partition].earliest
            if now != seen:
                seen, since = now, time.monotonic()
            elif seen > above and time.monotonic() - since >= 1.0:
                return seen
            time.sleep(0.1)
    raise TimeoutError(f"{topic}[{partition}]: earliest offset {seen} did not settle above "
                       f"{above} within {WAIT_S} s")


def available_now(spark, masters: str, out: str, ckpt: str, **options: str):
    """Start an AvailableNow query writing (topic, partition, offset) to parquet; returns it
    once it has ended (or failed)."""
    reader = spark.readStream.format("tubeq").option("masters", masters)
    for k, v in options.items():
        reader = reader.option(k, v)
    writer = (reader.load().select("topic", "partition", "offset").writeStream
              .format("parquet").option("path", out).option("checkpointLocation", ckpt)
              .trigger(availableNow=True))
    query = run_query(writer.start, WAIT_S)  # a failed query: see query.exception()
    assert not query.isActive, "the query did not end in time"
    return query


def rows(spark, out: str) -> list[tuple[str, int, int]]:
    """Every (topic, partition, offset) the sink holds, sorted, duplicates kept."""
    return sorted((r.topic, r.partition, r.offset) for r in spark.read.parquet(out).collect())


def test_restart_after_retention_deleted_unread_offsets_fails_or_skips_the_gap(
        spark, small_segments, tmp_path):
    masters, topic = small_segments, f"loss-{uuid.uuid4().hex[:8]}"
    with AdminClient(masters) as admin:
        # two stores: partition 1's few records never leave its active segment
        admin.create_topic(topic, partitions=2, stores=2, max_message_bytes=2048,
                           retention_bytes=RETENTION_BYTES)
    produce(masters, topic, 0, 0, 100)  # ~100 KB: under the limit, nothing deleted
    produce(masters, topic, 1, 0, 20)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    opts = {"subscribe": topic, "startingOffsets": "earliest"}
    assert available_now(spark, masters, out, ckpt, **opts).exception() is None
    first = [(topic, 0, o) for o in range(100)] + [(topic, 1, o) for o in range(20)]
    assert rows(spark, out) == first

    produce(masters, topic, 0, 100, 300)
    produce(masters, topic, 1, 20, 20)
    earliest = earliest_when_settled(masters, topic, 0, above=100)

    failed = available_now(spark, masters, out, ckpt, **opts)
    message = str(failed.exception())
    assert f"data loss: {topic}[0]: offsets 100..{earliest - 1} were deleted by retention " \
           f"before this query read them (the partition now starts at {earliest})" in message
    assert "Restart the query with failOnDataLoss=false to skip the lost offsets" in message
    assert f"{topic}[1]" not in message
    assert rows(spark, out) == first  # the failed batch wrote nothing

    skipped = available_now(spark, masters, out, ckpt, failOnDataLoss="false", **opts)
    assert skipped.exception() is None
    assert rows(spark, out) == sorted(first + [(topic, 0, o) for o in range(earliest, 400)]
                                      + [(topic, 1, o) for o in range(20, 40)])
    with AdminClient(masters) as admin:
        assert admin.describe_topic(topic).partitions[0].earliest == earliest


def produce_small(masters: str, counts: dict[tuple[str, int], int]) -> None:
    with Producer(masters) as producer:
        for (topic, p), n in counts.items():
            values = [b"%s-%d-%d" % (topic.encode(), p, i) for i in range(n)]
            producer.send_batch(topic, values, partition=p).result(30)


def grow(masters: str, topic: str, partitions: int, new_topic: str) -> None:
    """``topic`` to ``partitions`` partitions and ``new_topic`` (2 partitions) created; returns
    once the brokers host them all (setup: producing before that is not what is tested)."""
    deadline = time.monotonic() + WAIT_S
    with AdminClient(masters) as admin:
        admin.alter_topic(topic, partitions=partitions)
        admin.create_topic(new_topic, partitions=2)
        while time.monotonic() < deadline:
            parts = [p for t in (topic, new_topic) for p in admin.describe_topic(t).partitions]
            if all(p.latest >= 0 for p in parts):
                return
            time.sleep(0.1)
    raise TimeoutError(f"{topic} / {new_topic}: new partitions not hosted in {WAIT_S} s")


def expected(ends: dict[str, dict[int, int]]) -> list[tuple[str, int, int]]:
    return sorted((t, p, o) for t, parts in ends.items() for p, n in parts.items()
                  for o in range(n))


def as_offsets(ends: dict[str, dict[int, int]]) -> dict[str, dict[str, int]]:
    return {t: {str(p): n for p, n in parts.items()} for t, parts in ends.items()}


def start_continuous(spark, masters: str, root, **options: str):
    reader = spark.readStream.format("tubeq").option("masters", masters) \
        .option("startingOffsets", "earliest")
    for k, v in options.items():
        reader = reader.option(k, v)
    writer = (reader.load().select("topic", "partition", "offset").writeStream
              .format("parquet").option("path", str(root / "out"))
              .option("checkpointLocation", str(root / "ckpt"))
              .trigger(processingTime="300 milliseconds"))
    return start_query(writer.start, WAIT_S)


def await_end(query, ends: dict[str, dict[int, int]], deadline: float) -> None:
    """Until a finished micro-batch of ``query`` ended exactly at ``ends`` (every partition)."""
    want = as_offsets(ends)
    while time.monotonic() < deadline:
        assert query.isActive, f"the query stopped: {query.exception()}"
        progress = query.lastProgress
        if progress and json.loads(progress["sources"][0]["endOffset"]) == want:
            return
        time.sleep(0.2)
    last = query.lastProgress and query.lastProgress["sources"][0]["endOffset"]
    raise TimeoutError(f"the query did not reach {want} (last end: {last})")


def test_running_streams_read_added_partitions_and_new_matching_topics_from_their_start(
        spark, masters, tmp_path):
    tag = uuid.uuid4().hex[:8]
    old, new = f"grow-{tag}-a", f"grow-{tag}-b"
    with AdminClient(masters) as admin:
        admin.create_topic(old, partitions=2)
        admin.create_topic(f"other-{tag}", partitions=1)  # matches neither stream
    produce_small(masters, {(old, 0): 3, (old, 1): 2, (f"other-{tag}", 0): 2})
    before = {old: {0: 3, 1: 2}}
    pattern = start_continuous(spark, masters, tmp_path / "pattern",
                               subscribePattern=f"grow-{tag}-.*")
    fixed = start_continuous(spark, masters, tmp_path / "fixed", subscribe=old)
    deadline = time.monotonic() + WAIT_S
    try:
        await_end(pattern, before, deadline)
        await_end(fixed, before, deadline)
        grow(masters, old, 4, new)
        produce_small(masters, {(old, 0): 1, (old, 2): 2, (old, 3): 1, (new, 0): 2, (new, 1): 3})
        after = {old: {0: 4, 1: 2, 2: 2, 3: 1}, new: {0: 2, 1: 3}}
        await_end(pattern, after, deadline)
        await_end(fixed, {old: after[old]}, deadline)
    finally:
        pattern.stop()
        fixed.stop()
    assert rows(spark, str(tmp_path / "pattern" / "out")) == expected(after)
    assert rows(spark, str(tmp_path / "fixed" / "out")) == expected({old: after[old]})


def test_available_now_runs_on_one_checkpoint_pick_up_what_appeared_between_them(
        spark, masters, tmp_path):
    tag = uuid.uuid4().hex[:8]
    old, new = f"runs-{tag}-a", f"runs-{tag}-b"
    with AdminClient(masters) as admin:
        admin.create_topic(old, partitions=1)
    produce_small(masters, {(old, 0): 3})
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    opts = {"subscribePattern": f"runs-{tag}-.*", "startingOffsets": "earliest"}
    assert available_now(spark, masters, out, ckpt, **opts).exception() is None
    assert rows(spark, out) == expected({old: {0: 3}})
    grow(masters, old, 3, new)
    produce_small(masters, {(old, 0): 2, (old, 2): 4, (new, 1): 1})
    assert available_now(spark, masters, out, ckpt, **opts).exception() is None
    assert rows(spark, out) == expected({old: {0: 5, 1: 0, 2: 4}, new: {0: 0, 1: 1}})


def await_latest(masters: str, topic: str, latest: int) -> None:
    deadline = time.monotonic() + WAIT_S
    with AdminClient(masters) as admin:
        while time.monotonic() < deadline:
            try:
                if admin.describe_topic(topic).partitions[0].latest == latest:
                    return
            except UnknownTopic:
                pass
            time.sleep(0.1)
    raise TimeoutError(f"{topic}[0] did not end at {latest} within {WAIT_S} s")


def test_stream_on_a_recreated_topic_reports_offsets_that_went_back_instead_of_waiting(
        spark, masters, tmp_path):
    """Regression: a checkpoint past the end of a re-created topic (offsets start again at 0)
    made the query wait, silently, until the new incarnation grew past the old position, and
    then read on from there: the new topic's first records were never read nor reported."""
    topic = f"again-{uuid.uuid4().hex[:8]}"
    with AdminClient(masters) as admin:
        admin.create_topic(topic, partitions=1)
    produce_small(masters, {(topic, 0): 5})
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    opts = {"subscribe": topic, "startingOffsets": "earliest"}
    assert available_now(spark, masters, out, ckpt, **opts).exception() is None
    with AdminClient(masters) as admin:
        admin.delete_topic(topic)
        admin.create_topic(topic, partitions=1)
    await_latest(masters, topic, 0)  # the broker dropped the old incarnation's data
    produce_small(masters, {(topic, 0): 2})
    await_latest(masters, topic, 2)

    message = str(available_now(spark, masters, out, ckpt, **opts).exception())
    assert f"data loss: {topic}[0]: this query had read up to offset 5 but the partition " \
           "now ends at 2" in message
    assert "failOnDataLoss=false" in message
    # Kafka's rule: skipping goes on from where the partition ends now, never back
    skipped = available_now(spark, masters, out, ckpt, failOnDataLoss="false", **opts)
    assert skipped.exception() is None
    produce_small(masters, {(topic, 0): 3})
    assert available_now(spark, masters, out, ckpt, **opts).exception() is None
    # the old incarnation's 0..4, then the new one's from 2 on (its 0..1 were skipped)
    assert rows(spark, out) == sorted(expected({topic: {0: 5}})
                                      + [(topic, 0, o) for o in (2, 3, 4)])
