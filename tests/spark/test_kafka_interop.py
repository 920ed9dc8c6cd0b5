"""Records cross between Kafka clients on the brokers' Kafka ports and Spark's tubeq source
and sink: what librdkafka produced, Spark reads with its key, value, timestamp, tag and
headers; what Spark writes, librdkafka consumes."""
from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from pyspark.sql import functions as F

from tests.cluster import Cluster


def kafka_conf(cluster: Cluster) -> dict:
    creds = cluster.admin_credentials()
    return {"bootstrap.servers": ",".join(b.info["kafka"] for b in cluster.brokers.values()),
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": creds.user, "sasl.password": creds.password}


def test_spark_reads_what_kafka_clients_wrote(spark, tubeq, masters, new_topic):
    topic = new_topic(partitions=2)
    producer = Producer(kafka_conf(tubeq))
    for i in range(300):
        producer.produce(topic, b"kafka-%d" % i, key=b"k%d" % (i % 7), partition=i % 2,
                         timestamp=1_700_000_000_000 + i,
                         headers=[("tubeq.tag", b"odd" if i % 2 else b"even"),
                                  ("origin", b"librdkafka")])
    assert producer.flush(30) == 0
    rows = spark.read.format("tubeq").option("masters", masters).option("subscribe", topic) \
        .option("includeHeaders", "true").load().toArrow().to_pylist()
    assert len(rows) == 300
    by_value = {r["value"]: r for r in rows}
    for i in (0, 1, 150, 299):
        r = by_value[b"kafka-%d" % i]
        assert (r["key"], r["partition"], r["tag"]) == (b"k%d" % (i % 7), i % 2,
                                                          "odd" if i % 2 else "even")
        assert int(r["timestamp"].timestamp() * 1000) == 1_700_000_000_000 + i
        assert dict(r["headers"]) == {"origin": b"librdkafka"}


def test_kafka_clients_read_what_spark_wrote(spark, tubeq, masters, new_topic):
    topic = new_topic(partitions=2)
    df = spark.range(0, 200, numPartitions=2).select(
        F.format_string("sk%d", F.col("id") % 5).alias("key"),
        F.format_string("spark-%d", F.col("id")).cast("binary").alias("value"),
        F.lit("blue").alias("tag"))
    df.write.format("tubeq").option("masters", masters).option("topic", topic) \
        .mode("append").save()
    consumer = Consumer({**kafka_conf(tubeq), "group.id": "from-spark"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
    got, deadline = [], time.monotonic() + 30
    while len(got) < 200 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m)
    consumer.close()
    assert sorted(m.value() for m in got) == sorted(b"spark-%d" % i for i in range(200))
    one = next(m for m in got if m.value() == b"spark-12")
    assert one.key() == b"sk2" and one.headers() == [("tubeq.tag", b"blue")]
