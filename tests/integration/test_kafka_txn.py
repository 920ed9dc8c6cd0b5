"""Kafka's transactions from librdkafka on the Kafka port, on tubeq's coordinator: committed
transactions are read by read_committed consumers and aborted ones never; a transactional
consume-transform-produce loop moves each record once with its group's offsets; a new instance
of a transactional.id fences the old one."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer as CkConsumer
from confluent_kafka import KafkaException
from confluent_kafka import Producer as CkProducer
from confluent_kafka import TopicPartition as CkTp

from lib.admin import AdminClient
from tests.cluster import Cluster


@pytest.fixture(scope="module")
def tcluster(tmp_path_factory):
    cluster = Cluster(tmp_path_factory.mktemp("kafka-txn"), broker_args=["--kafka-port", "0"])
    try:
        cluster.start(2)
        with AdminClient(cluster.master_addresses,
                         credentials=cluster.admin_credentials()) as admin:
            for name in ("t-out", "t-in", "t-ctp", "t-zombie"):
                admin.create_topic(name, partitions=2)
        yield cluster
    finally:
        cluster.stop_all()


def conf(cluster: Cluster) -> dict:
    creds = cluster.admin_credentials()
    return {"bootstrap.servers": ",".join(b.info["kafka"] for b in cluster.brokers.values()),
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": creds.user, "sasl.password": creds.password}


def read(cluster: Cluster, topic: str, isolation: str, want: int) -> list[bytes]:
    consumer = CkConsumer({**conf(cluster), "group.id": f"r-{topic}-{isolation}",
                           "isolation.level": isolation, "enable.auto.commit": False})
    consumer.assign([CkTp(topic, p, 0) for p in range(2)])
    got, deadline = [], time.monotonic() + 30
    try:
        while len(got) < want and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        # and nothing more than that comes (a second's wait for any)
        got += [m.value() for m in consumer.consume(1000, 1.0) if m.error() is None]
    finally:
        consumer.close()
    return sorted(got)


def test_committed_transactions_are_read_and_aborted_ones_never(tcluster):
    producer = CkProducer({**conf(tcluster), "transactional.id": "k-writer"})
    producer.init_transactions(30)
    for n in range(6):
        producer.begin_transaction()
        for i in range(20):
            producer.produce("t-out", b"n%d-%02d" % (n, i), partition=i % 2)
        if n % 2:
            assert producer.flush(30) == 0  # stored, then aborted (not purged unsent)
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    committed = sorted(b"n%d-%02d" % (n, i) for n in (0, 2, 4) for i in range(20))
    assert read(tcluster, "t-out", "read_committed", 60) == committed
    everything = sorted(b"n%d-%02d" % (n, i) for n in range(6) for i in range(20))
    assert read(tcluster, "t-out", "read_uncommitted", 120) == everything


def test_consume_transform_produce_moves_each_record_once_with_its_offsets(tcluster):
    base = conf(tcluster)
    feeder = CkProducer(base)
    for i in range(100):
        feeder.produce("t-in", b"in-%03d" % i, partition=i % 2)
    assert feeder.flush(30) == 0
    consumer = CkConsumer({**base, "group.id": "ctp", "enable.auto.commit": False,
                           "auto.offset.reset": "earliest",
                           "isolation.level": "read_committed"})
    consumer.subscribe(["t-in"])
    producer = CkProducer({**base, "transactional.id": "k-ctp"})
    producer.init_transactions(30)
    moved, deadline = 0, time.monotonic() + 60
    while moved < 100 and time.monotonic() < deadline:
        batch = [m for m in consumer.consume(25, 1.0) if m.error() is None]
        if not batch:
            continue
        producer.begin_transaction()
        for m in batch:
            producer.produce("t-ctp", m.value().replace(b"in", b"out"), partition=m.partition())
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        moved += len(batch)
    consumer.close()
    assert moved == 100
    assert read(tcluster, "t-ctp", "read_committed", 100) == sorted(
        b"out-%03d" % i for i in range(100))
    checker = CkConsumer({**base, "group.id": "ctp"})
    offsets = checker.committed([CkTp("t-in", 0), CkTp("t-in", 1)], timeout=10)
    checker.close()
    assert [(tp.partition, tp.offset) for tp in offsets] == [(0, 50), (1, 50)]


def test_a_new_instance_of_a_transactional_id_fences_the_old_one(tcluster):
    base = conf(tcluster)
    old = CkProducer({**base, "transactional.id": "k-zombie"})
    old.init_transactions(30)
    old.begin_transaction()
    old.produce("t-zombie", b"from the old instance", partition=0)
    old.flush(10)
    new = CkProducer({**base, "transactional.id": "k-zombie"})
    new.init_transactions(30)  # aborts the old instance's open transaction
    new.begin_transaction()
    new.produce("t-zombie", b"from the new instance", partition=0)
    new.commit_transaction(30)
    with pytest.raises(KafkaException) as refused:
        old.commit_transaction(10)
    assert refused.value.args[0].fatal() or "fenced" in str(refused.value).lower()
    assert read(tcluster, "t-zombie", "read_committed", 1) == [b"from the new instance"]
