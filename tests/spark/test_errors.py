"""Wrong options fail on the driver, before any task, with a message naming the option."""
from __future__ import annotations

import json
import time

import pytest
from pyspark.errors.exceptions.captured import CapturedException

from lib.process import free_ports
from spark_sink.options import OptionError, read_options


def load(spark, **options: str):
    reader = spark.read.format("tubeq")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def failure(action) -> str:
    with pytest.raises(CapturedException) as info:
        action()
    return str(info.value)


def test_read_without_masters_names_the_option(spark):
    message = failure(lambda: load(spark, subscribe="t"))
    assert "tubeq option 'masters': required" in message


@pytest.mark.parametrize(("options", "expected"), [
    ({"startingOffsets": "{not json"}, "tubeq option 'startingOffsets': not valid JSON"),
    ({"endingOffsets": '{"t": {"x": 1}}'}, "tubeq option 'endingOffsets': t[x]"),
    ({"assign": '{"t": [0]}'}, "tubeq option 'subscribe': give exactly one of subscribe, "
                               "subscribePattern or assign (got subscribe, assign)"),
    ({"minPartitions": "0"}, "tubeq option 'minPartitions': must be >= 1, got 0"),
    ({"includeHeaders": "yes"}, "tubeq option 'includeHeaders': expected true or false"),
    ({"kafka.bootstrap.servers": "h:1"}, "tubeq option 'kafka.bootstrap.servers': use 'masters'"),
    ({"subscibe": "t"}, "tubeq option 'subscibe': unknown option"),
])
def test_bad_read_option_values_name_the_option(spark, masters, options, expected):
    message = failure(lambda: load(spark, masters=masters, subscribe="t", **options).collect())
    assert expected in message


def test_unknown_topic_names_the_option(spark, masters):
    message = failure(lambda: load(spark, masters=masters, subscribe="no-such-topic").collect())
    assert "tubeq option 'subscribe': unknown topic 'no-such-topic'" in message


def test_offsets_past_the_end_name_the_option(spark, masters, new_topic):
    topic = new_topic(partitions=2)
    message = failure(lambda: load(spark, masters=masters, subscribe=topic,
                                   endingOffsets=json.dumps({topic: {"1": 7}})).collect())
    assert f"tubeq option 'endingOffsets': {topic}[1] ends at 7, past its latest offset 0" \
        in message
    message = failure(lambda: load(spark, masters=masters, subscribe=topic,
                                   startingOffsets=json.dumps({topic: {"5": 0}})).collect())
    assert f"tubeq option 'startingOffsets': topic {topic!r} has 2 partitions: no partition 5" \
        in message


def test_unreachable_cluster_names_the_masters_option(spark):
    (port,) = free_ports(1)
    started = time.monotonic()
    message = failure(lambda: load(spark, masters=f"127.0.0.1:{port}", subscribe="t",
                                   requestTimeoutMs="1500").collect())
    assert f"tubeq option 'masters': no tubeq master answered at 127.0.0.1:{port}" in message
    # requestTimeoutMs bounds the wait (the default is the clients' own 10 s per attempt)
    assert time.monotonic() - started < 10


def test_request_timeout_reaches_every_client_under_its_own_name():
    conn = read_options({"masters": "h:1", "subscribe": "t", "requestTimeoutMs": "2500"}).conn
    assert conn.clients("admin")["timeout"] == 2.5
    assert conn.clients("consumer")["rpc_timeout_s"] == 2.5
    assert conn.clients("producer")["request_timeout_ms"] == 2500
    assert conn.clients("sink")["request_timeout_s"] == 2.5
    assert "timeout" not in read_options({"masters": "h:1", "subscribe": "t"}).conn.clients(
        "admin")
    with pytest.raises(OptionError, match="'requestTimeoutMs': must be >= 1, got 0"):
        read_options({"masters": "h:1", "subscribe": "t", "requestTimeoutMs": "0"})


def write(df, **options: str) -> None:
    writer = df.write.format("tubeq").mode("append")
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.save()


def test_write_refuses_unknown_columns_naming_them(spark, masters, new_topic):
    topic = new_topic(partitions=1)
    df = spark.createDataFrame([("v", 1, "x")], "value string, weight int, colour string")
    message = failure(lambda: write(df, masters=masters, topic=topic))
    assert "unknown column(s) weight, colour" in message


@pytest.mark.parametrize(("schema", "options", "expected"), [
    ("value string", {}, "tubeq option 'masters': required"),
    ("key string", {"masters": "MASTERS", "topic": "TOPIC"}, "needs a value column"),
    ("value string", {"masters": "MASTERS"}, "tubeq option 'topic': no topic"),
    ("value string", {"masters": "MASTERS", "topic": "absent-topic"},
     "tubeq option 'topic': unknown topic 'absent-topic'"),
    ("value int", {"masters": "MASTERS", "topic": "TOPIC"}, "column value is int"),
])
def test_bad_writes_fail_before_any_task_naming_the_problem(spark, masters, new_topic, schema,
                                                            options, expected):
    topic = new_topic(partitions=1)
    options = {k: v.replace("MASTERS", masters).replace("TOPIC", topic)
               for k, v in options.items()}
    df = spark.createDataFrame([], schema)
    assert expected in failure(lambda: write(df, **options))
