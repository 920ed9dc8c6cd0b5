"""What the Kafka port's tests share: their cluster (``kcluster`` in conftest.py starts one per
test file), its users, the clients' settings and waits."""
from __future__ import annotations

import time

from confluent_kafka import Consumer as CkConsumer
from confluent_kafka import KafkaException
from confluent_kafka import Producer as CkProducer
from confluent_kafka import TopicPartition as CkTp

from lib.admin import AdminClient
from lib.auth.client import Credentials
from tests.cluster import Cluster
from tests.helpers import wait_until

ALICE = Credentials("alice", "alice-password-123")
# A client with a wrong password tries once or twice, not every 100 ms for the whole message
# timeout: failed logins back off per address, and every test client is 127.0.0.1.
ONE_TRY = {"message.timeout.ms": 4000, "reconnect.backoff.ms": 5000,
           "reconnect.backoff.max.ms": 5000}
LIMITS = """[broker]
kafka_request_timeout_s = 2.0
kafka_max_connections = 40
"""
TOPICS = (("k-ck", 3), ("k-kp", 2), ("k-aio", 1), ("k-cat", 1), ("k-interop", 1), ("alice-t", 1),
          ("k-bad", 1), ("k-range", 6), ("k-cooperative-sticky", 6), ("k-shared", 2),
          ("k-kpgroup", 2), ("k-gzip", 1), ("k-snappy", 1), ("k-lz4", 1), ("k-zstd", 1),
          ("k-txn", 1))


def start_kafka_cluster(root) -> Cluster:
    """Two brokers with Kafka ports (short request timeout, 40 connections), the user alice
    (may produce to ``alice-*``) and the tests' topics. The caller stops it."""
    config = root / "broker.toml"
    config.write_text(LIMITS)
    cluster = Cluster(root, broker_args=["--kafka-port", "0", "--config", str(config)])
    try:
        cluster.start(2)
        with AdminClient(cluster.master_addresses,
                         credentials=cluster.admin_credentials()) as root_admin:
            root_admin.add_user(ALICE.user, ALICE.password)
            root_admin.add_acl(f"user:{ALICE.user}", "produce", "topic", "alice-",
                               pattern="prefix")
            for name, parts in TOPICS:
                root_admin.create_topic(name, partitions=parts)
    except BaseException:
        cluster.stop_all()
        raise
    return cluster


def bootstrap(cluster: Cluster) -> str:
    return ",".join(b.info["kafka"] for b in cluster.brokers.values())


def sasl(cluster: Cluster, creds: Credentials | None = None) -> dict:
    creds = creds or cluster.admin_credentials()
    return {"bootstrap.servers": bootstrap(cluster), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": creds.user,
            "sasl.password": creds.password}


def python_login(cluster: Cluster, mechanism: str = "PLAIN") -> dict:
    """kafka-python's and aiokafka's settings to log in to ``cluster`` as its admin."""
    creds = cluster.admin_credentials()
    return dict(bootstrap_servers=bootstrap(cluster).split(","),
                security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                sasl_plain_username=creds.user, sasl_plain_password=creds.password)


def python_values(consumer, count: int) -> list[bytes]:
    """Up to ``count`` values from a kafka-python consumer (fewer when its
    ``consumer_timeout_ms`` passes first)."""
    values = []
    for m in consumer:
        values.append(m.value)
        if len(values) == count:
            break
    return values


def ck_consume(conf: dict, topic: str, partitions: int, count: int, timeout: float = 30):
    consumer = CkConsumer({**conf, "group.id": f"assign-{topic}", "enable.auto.commit": False})
    consumer.assign([CkTp(topic, p, 0) for p in range(partitions)])
    got, deadline = [], time.monotonic() + timeout
    try:
        while len(got) < count and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.append(m)
    finally:
        consumer.close()
    return got


def wrong_login(kcluster, creds: Credentials, mechanism: str = "PLAIN") -> None:
    """One client with a wrong password, to one broker, trying once: refused. Failed logins
    back off per address and every test client is 127.0.0.1, so this waits until a right
    login works again before the next test logs in."""
    conf = {**sasl(kcluster, creds), **ONE_TRY, "sasl.mechanism": mechanism,
            "bootstrap.servers": bootstrap(kcluster).split(",")[0]}
    producer = CkProducer(conf)
    errors = []
    producer.produce("k-ck", b"x", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(15)
    assert errors and errors[0] is not None
    from confluent_kafka.admin import AdminClient as CkAdmin

    def logs_in() -> bool:
        try:
            CkAdmin(sasl(kcluster)).list_topics(timeout=3)
            return True
        except KafkaException:
            return False
    wait_until(logs_in, "a right password logs in again", 60)


def produce_values(conf: dict, topic: str, values: list[bytes], partitions: int = 0) -> None:
    """``values`` to ``topic``: spread by the client, or round robin over ``partitions``."""
    producer = CkProducer({**conf, "linger.ms": 5})
    for i, v in enumerate(values):
        if partitions:
            producer.produce(topic, v, partition=i % partitions)
        else:
            producer.produce(topic, v)
    assert producer.flush(30) == 0

