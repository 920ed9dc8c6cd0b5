"""spark_sink.pipelines.feed: generated rows, CSV and Parquet files into topics, read back."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
import uuid
import zlib

import pytest
from click.testing import CliRunner

from lib.admin import AdminClient
from lib.cli.main import main as tubeq
from lib.consumer.pull import PullConsumer
from lib.errors import UnknownTopic
from lib.types import TopicPartition
from spark_sink.options import OptionError
from spark_sink.pipelines.feed import FeedError, FeedSpec, feed
from tests.spark.conftest import ROOT, short_driver_submit_args


def topic_name() -> str:
    return f"feed-{uuid.uuid4().hex[:10]}"


def read_all(masters: str, topic: str, total: int) -> list:
    with AdminClient(masters) as admin:
        partitions = admin.describe_topic(topic).partition_count
    with PullConsumer(masters, auto_offset_reset="earliest", enable_auto_commit=False) as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        records: list = []
        deadline = time.monotonic() + 60
        while len(records) < total and time.monotonic() < deadline:
            records += c.poll(timeout=1.0)
        records += c.poll(timeout=0.5)  # nothing more than the rows fed
    return records


def generated(i: int, size: int) -> bytes:
    return f"{i}:".ljust(size, ".")[:size].encode()


def test_feed_generated_rows_creates_the_topic_and_stores_every_row_keyed_by_id(
        spark, masters):
    topic, rows, size = topic_name(), 5000, 64
    said: list[str] = []
    result = feed(spark, FeedSpec(masters, topic, rows=rows, size=size, key_column="id",
                                  partitions=3), say=said.append, interval=0.2)
    assert (result.topic, result.rows, result.created) == (topic, rows, True)
    assert result.rows_per_s > 0 and "fed 5,000 rows into" in result.summary()
    assert said[0] == f"feeding 5,000 generated rows of 64 B into new topic {topic}"

    records = read_all(masters, topic, rows)
    assert len(records) == rows
    by_key = {r.key: r for r in records}
    assert set(by_key) == {str(i).encode() for i in range(rows)}
    for i in range(rows):
        r = by_key[str(i).encode()]
        assert r.value == generated(i, size)
        assert r.partition == zlib.crc32(r.key) % 3


def write_people(path, n: int) -> list[dict[str, str]]:
    people = [{"name": f"person-{i}", "city": ("Oslo", "Lyon, FR", "Kyoto")[i % 3],
               "age": str(20 + i % 50)} for i in range(n)]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["name", "city", "age"])
        writer.writeheader()
        writer.writerows(people)
    return people


def test_feed_csv_sends_each_row_as_json_and_the_tubeq_reader_reads_them_back(
        spark, masters, tmp_path):
    path, topic = tmp_path / "people.csv", topic_name()
    people = write_people(path, 300)
    result = feed(spark, FeedSpec(masters, topic, csv=path, key_column="name"),
                  say=lambda _: None)
    assert result.rows == 300 and result.created

    rows = spark.read.format("tubeq").option("masters", masters).option("subscribe", topic) \
        .load().select("key", "value").collect()
    assert sorted((bytes(r["key"]), json.loads(r["value"])) for r in rows) == \
        sorted((p["name"].encode(), p) for p in people)


def test_feed_parquet_value_column_into_an_existing_topic(spark, masters, tmp_path):
    topic = topic_name()
    with AdminClient(masters) as admin:
        admin.create_topic(topic, partitions=2)
    path = str(tmp_path / "events.parquet")
    spark.range(0, 400).selectExpr("id", "concat('event-', id) AS body").write.parquet(path)
    result = feed(spark, FeedSpec(masters, topic, parquet=path, value_column="body",
                                  partitions=9), say=lambda _: None)
    assert (result.rows, result.created) == (400, False)
    with AdminClient(masters) as admin:
        assert admin.describe_topic(topic).partition_count == 2  # an existing topic keeps its own
    records = read_all(masters, topic, 400)
    assert sorted(r.value for r in records) == sorted(b"event-%d" % i for i in range(400))
    assert all(r.key is None for r in records)


def test_feed_missing_column_names_the_columns_and_creates_no_topic(spark, masters, tmp_path):
    path, topic = tmp_path / "people.csv", topic_name()
    write_people(path, 3)
    with pytest.raises(FeedError, match=r"no column 'email' in CSV .*people.csv; its columns: "
                                        r"name, city, age"):
        feed(spark, FeedSpec(masters, topic, csv=path, value_column="email"))
    with AdminClient(masters) as admin, pytest.raises(UnknownTopic):
        admin.describe_topic(topic)


@pytest.mark.parametrize(("settings", "expected"), [
    ({"csv": "/nonexistent/hB.csv"}, "no such file: /nonexistent/hB.csv"),
    ({}, r"give exactly one source: --rows N, --csv FILE or --parquet FILE \(got none\)"),
    ({"rows": 5, "parquet": "x"}, "give exactly one source: .* \\(got rows, parquet\\)"),
    ({"rows": 0}, "--rows and --size must be >= 1"),
])
def test_feed_spec_refuses_a_wrong_source_before_anything_starts(settings, expected):
    with pytest.raises(FeedError, match=expected):
        FeedSpec("127.0.0.1:1", "t", **settings)


def test_feed_spec_checks_masters_and_topic_as_the_writer_does():
    with pytest.raises(OptionError, match="'masters'"):
        FeedSpec("nowhere", "t", rows=1)
    with pytest.raises(OptionError, match="'topic'"):
        FeedSpec("127.0.0.1:1", "bad topic!", rows=1)


def test_tubeq_spark_feed_writes_csv_rows_and_prints_the_summary(spark, masters, tmp_path):
    path, topic = tmp_path / "people.csv", topic_name()
    write_people(path, 20)
    out = CliRunner().invoke(tubeq, ["--masters", masters, "spark", "feed", "--topic", topic,
                                     "--csv", str(path), "--value-column", "city"])
    assert out.exit_code == 0, out.output
    assert f"fed 20 rows into {topic}" in out.stdout
    records = read_all(masters, topic, 20)
    assert sorted(r.value.decode() for r in records) == \
        sorted(("Oslo", "Lyon, FR", "Kyoto")[i % 3] for i in range(20))


def test_tubeq_spark_feed_missing_file_is_one_error_line():
    out = CliRunner().invoke(tubeq, ["--masters", "127.0.0.1:1", "spark", "feed", "--topic",
                                     "t", "--csv", "/nonexistent/hB.csv"])
    assert out.exit_code == 1
    assert out.stderr.strip() == "error: FeedError: no such file: /nonexistent/hB.csv"


@pytest.mark.slow
def test_python_m_feed_starts_and_stops_its_own_spark(masters):
    """Its own process and JVM (this process's SparkContext is the session fixture's)."""
    topic = topic_name()
    done = subprocess.run(
        [sys.executable, "-m", "spark_sink.pipelines.feed", "--masters", masters, "--topic",
         topic, "--rows", "1000", "--size", "16"], cwd=ROOT, capture_output=True, text=True,
        timeout=300, stdin=subprocess.DEVNULL,
        env={**os.environ, "PYSPARK_SUBMIT_ARGS": short_driver_submit_args()})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith(f"fed 1,000 rows into {topic} in ")
    assert f"into new topic {topic}" in done.stderr
    records = read_all(masters, topic, 1000)
    assert sorted(r.value for r in records) == sorted(generated(i, 16) for i in range(1000))
