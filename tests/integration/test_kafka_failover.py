"""A librdkafka idempotent producer (acks=all) through faults on the Kafka port: the leader of
its partition is SIGKILLed mid-stream, the producer follows the new leader (a Metadata refresh
after NOT_LEADER_OR_FOLLOWER or a refused connection), and afterwards every record it had
acknowledged is there exactly once; then the killed broker comes back as a follower and the
producer goes on."""
from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer as CkConsumer
from confluent_kafka import Producer as CkProducer
from confluent_kafka import TopicPartition as CkTp

from lib.admin import AdminClient

pytestmark = pytest.mark.slow
TOPIC, RECORDS = "k-failover", 4000


def kafka_conf(cluster) -> dict:
    creds = cluster.admin_credentials()
    return {"bootstrap.servers": ",".join(b.info["kafka"] for b in cluster.brokers.values()),
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": creds.user, "sasl.password": creds.password}


def read_all(conf: dict, want: int, timeout: float = 60) -> list[bytes]:
    consumer = CkConsumer({**conf, "group.id": "failover-check", "enable.auto.commit": False})
    consumer.assign([CkTp(TOPIC, 0, 0)])
    got, deadline, idle_since = [], time.monotonic() + timeout, None
    try:
        while time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None:
                if len(got) >= want:
                    idle_since = idle_since or time.monotonic()
                    if time.monotonic() - idle_since > 2:  # nothing more after what we want
                        break
                continue
            assert m.error() is None, m.error()
            got.append(m.value())
    finally:
        consumer.close()
    return got


def test_an_idempotent_producer_follows_a_killed_leader_and_loses_nothing(cluster_factory):
    cluster = cluster_factory(2, broker_args=["--kafka-port", "0"])
    with AdminClient(cluster.master_addresses,
                     credentials=cluster.admin_credentials()) as admin:
        leader = admin.create_topic(TOPIC, partitions=1, replication_factor=2,
                                    min_insync_replicas=1).partitions[0].broker_id
    conf = kafka_conf(cluster)
    producer = CkProducer({**conf, "enable.idempotence": True, "acks": "all",
                           "linger.ms": 2, "message.timeout.ms": 120_000})
    acked, failed, lock = [], [], threading.Lock()

    def delivered(err, msg) -> None:
        with lock:
            (failed if err else acked).append(err or msg.value())

    for i in range(RECORDS):
        producer.produce(TOPIC, b"r-%05d" % i, partition=0, on_delivery=delivered)
        producer.poll(0)
        if i == RECORDS // 3:  # some acknowledged, more in flight: kill the leader
            deadline = time.monotonic() + 30
            while len(acked) < RECORDS // 6 and time.monotonic() < deadline:
                producer.poll(0.05)
            cluster.brokers[leader].kill()
        if i % 200 == 0:
            time.sleep(0.01)
    assert producer.flush(120) == 0
    assert failed == []
    assert len(acked) == RECORDS
    got = read_all(conf, RECORDS)
    assert len(got) == len(set(got)) == RECORDS  # every acknowledged record, once
    assert got == sorted(got)  # in the order produced

    cluster.start_broker(leader)  # back, as a follower: the producer goes on
    cluster.wait_brokers_registered()
    more = [b"s-%05d" % i for i in range(500)]
    for value in more:
        producer.produce(TOPIC, value, partition=0, on_delivery=delivered)
    assert producer.flush(60) == 0
    assert failed == []
    again = read_all(kafka_conf(cluster), RECORDS + len(more))
    assert again == got + more
