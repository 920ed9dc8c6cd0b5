"""Spark finds format("tubeq") by itself (the pyspark_tubeq module), and register works too."""
from __future__ import annotations

from lib.producer.producer import Producer
from spark_sink import DefaultSource


def test_format_tubeq_is_found_without_register(spark, masters, new_topic):
    topic = new_topic(partitions=1)
    with Producer(masters) as producer:
        producer.send_batch(topic, [b"a", b"b"], partition=0).result(30)
    fresh = spark.newSession()  # nothing registered in it: only Spark's discovery can know tubeq
    manager = fresh._jsparkSession.sessionState().dataSourceManager()
    assert manager.dataSourceExists("tubeq")
    rows = fresh.read.format("tubeq").option("masters", masters).option("subscribe", topic) \
        .load().collect()
    assert [r.value for r in rows] == [b"a", b"b"]


def test_register_makes_the_source_available_as_well(spark, masters, new_topic):
    topic = new_topic(partitions=1)
    session = spark.newSession()  # registrations stay in this session
    session.dataSource.register(DefaultSource)
    df = session.createDataFrame([("x",), ("y",)], "value string")
    df.write.format("tubeq").option("masters", masters).option("topic", topic) \
        .mode("append").save()
    rows = session.read.format("tubeq").option("masters", masters) \
        .option("subscribe", topic).load().collect()
    assert sorted(r.value for r in rows) == [b"x", b"y"]
