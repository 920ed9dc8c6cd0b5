"""Kafka clients nobody here wrote (librdkafka through confluent-kafka, kafka-python, aiokafka,
Debian's kcat) produce to, consume from and administer real brokers' Kafka ports, SASL/PLAIN
with tubeq users; records cross between the Kafka port and tubeq's own client both ways."""
from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time

import pytest
from confluent_kafka import Consumer as CkConsumer
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Producer as CkProducer
from confluent_kafka import TopicPartition as CkTp

from lib.admin import AdminClient
from lib.consumer.pull import PullConsumer
from lib.producer.producer import Producer
from lib.types import TopicPartition
from tests.integration.kafka_kit import (
    ALICE,
    bootstrap,
    ck_consume,
    python_login,
    python_values,
    sasl,
)


def test_librdkafka_idempotent_producer_and_consumer_round_trip(kcluster):
    conf = sasl(kcluster)
    producer = CkProducer({**conf, "enable.idempotence": True, "linger.ms": 5})
    failed = []
    for i in range(3000):
        producer.produce("k-ck", key=b"key-%d" % (i % 7), value=b"value-%d" % i,
                         headers=[("trace", b"t%d" % i)],
                         on_delivery=lambda err, msg: err and failed.append(err))
        producer.poll(0)
    assert producer.flush(30) == 0
    assert failed == []
    got = ck_consume(conf, "k-ck", 3, 3000)
    assert sorted(m.value() for m in got) == sorted(b"value-%d" % i for i in range(3000))
    one = next(m for m in got if m.value() == b"value-42")
    assert one.key() == b"key-0" and one.headers() == [("trace", b"t42")]
    by_partition: dict[int, list[int]] = {}
    for m in got:
        by_partition.setdefault(m.partition(), []).append(m.offset())
    for offsets in by_partition.values():
        assert offsets == list(range(len(offsets)))  # dense, in order, no duplicates


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_every_compression_librdkafka_writes_is_read(kcluster, codec):
    conf = sasl(kcluster)
    producer = CkProducer({**conf, "compression.type": codec, "linger.ms": 20})
    values = [b"%s-%d-" % (codec.encode(), i) + b"z" * 500 for i in range(200)]
    for v in values:
        producer.produce(f"k-{codec}", v)
    assert producer.flush(30) == 0
    assert [m.value() for m in ck_consume(conf, f"k-{codec}", 1, 200)] == values


def test_kafka_consumers_read_past_transaction_markers_both_isolation_levels(kcluster):
    """Markers (and, read_committed, aborted records) are never served; a Kafka client is
    moved past them by its batches' last offsets, and past a range of nothing but them by a
    batch of no record, or it would fetch the marker's offset again forever: each client
    reading from a marker must get the record written after it."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTp

    admin = kcluster.admin_credentials()
    with Producer(kcluster.master_addresses, credentials=admin,
                  transactional_id="k-txn-writer") as tq:
        for n, commit in ((1, True), (2, False), (3, True)):  # offsets 0-4 5, 6-10 11, 12-16 17
            tq.begin()
            for i in range(5):  # the aborted ones large: more than a fetch's partition bytes
                tq.send("k-txn", b"t%d-%d" % (n, i) + (b"." * 60_000 if n == 2 else b""),
                        partition=0)
            tq.commit() if commit else tq.abort()
    with Producer(kcluster.master_addresses, credentials=admin) as plain:
        plain.send_sync("k-txn", b"after", partition=0)  # offset 18
    committed = [b"t1-%d" % i for i in range(5)] + [b"t3-%d" % i for i in range(5)]
    everything = [b"t%d-%d" % (n, i) + (b"." * 60_000 if n == 2 else b"")
                  for n in (1, 2, 3) for i in range(5)]
    conf = sasl(kcluster)
    for isolation, start, want in (("read_committed", 0, [*committed, b"after"]),
                                   ("read_uncommitted", 0, [*everything, b"after"]),
                                   ("read_committed", 17, [b"after"]),
                                   ("read_committed", 5, [*committed[5:], b"after"])):
        consumer = CkConsumer({**conf, "group.id": f"txn-{isolation}", "isolation.level":
                               isolation, "enable.auto.commit": False,
                               "max.partition.fetch.bytes": 100_000})
        consumer.assign([CkTp("k-txn", 0, start)])
        got, deadline = [], time.monotonic() + 20
        while len(got) < len(want) and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        consumer.close()
        assert got == want, (isolation, start)
    reader = KafkaConsumer(**python_login(kcluster), isolation_level="read_committed",
                           enable_auto_commit=False, consumer_timeout_ms=10_000)
    reader.assign([KTp("k-txn", 0)])
    reader.seek(KTp("k-txn", 0), 6)  # the aborted transaction's first offset
    values = []
    for m in reader:
        values.append(m.value)
        if m.value == b"after":
            break
    reader.close()
    assert values == [*committed[5:], b"after"]


def test_kafka_python_gzip_and_offsets_by_time(kcluster):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTp

    common = python_login(kcluster)
    producer = KafkaProducer(**common, compression_type="gzip")
    before = int(time.time() * 1000)
    sent = [producer.send("k-kp", value=b"kp-%d" % i, partition=1).get(30) for i in range(50)]
    producer.close()
    assert [m.offset for m in sent] == list(range(50))
    consumer = KafkaConsumer(**common, enable_auto_commit=False, consumer_timeout_ms=10000)
    tp = KTp("k-kp", 1)
    consumer.assign([tp])
    assert consumer.end_offsets([tp]) == {tp: 50}
    assert consumer.beginning_offsets([tp]) == {tp: 0}
    found = consumer.offsets_for_times({tp: before - 1})[tp]
    assert found.offset == 0 and found.timestamp >= before - 1
    assert consumer.offsets_for_times({tp: int(time.time() * 1000) + 60_000})[tp] is None
    consumer.seek(tp, 10)
    values = python_values(consumer, 40)
    consumer.close()
    assert values == [b"kp-%d" % i for i in range(10, 50)]


def test_aiokafka_round_trip(kcluster):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATp

    common = python_login(kcluster)

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**common)
        await producer.start()
        try:
            for i in range(20):
                await producer.send_and_wait("k-aio", b"aio-%d" % i, key=b"k")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(**common, enable_auto_commit=False)
        await consumer.start()
        try:
            consumer.assign([ATp("k-aio", 0)])
            consumer.seek(ATp("k-aio", 0), 0)
            out: list[bytes] = []
            async with asyncio.timeout(30):
                while len(out) < 20:
                    batch = await consumer.getmany(timeout_ms=1000)
                    out += [m.value for msgs in batch.values() for m in msgs]
            return out
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [b"aio-%d" % i for i in range(20)]


def test_records_cross_between_kafka_and_tubeq_clients_with_tags_and_headers(kcluster):
    conf = sasl(kcluster)
    admin = kcluster.admin_credentials()
    producer = CkProducer(conf)
    producer.produce("k-interop", key=b"from-kafka", value=b"v1",
                     headers=[("tubeq.tag", b"red"), ("origin", b"librdkafka")],
                     timestamp=1_700_000_000_000)
    assert producer.flush(30) == 0
    with Producer(kcluster.master_addresses, credentials=admin) as tq:
        tq.send_sync("k-interop", b"v2", key=b"from-tubeq", tag="blue",
                     headers={"origin": b"tubeq"})
    with PullConsumer(kcluster.master_addresses, credentials=admin) as consumer:
        consumer.assign([TopicPartition("k-interop", 0)])
        consumer.seek(TopicPartition("k-interop", 0), 0)
        records, deadline = [], time.monotonic() + 30
        while len(records) < 2 and time.monotonic() < deadline:
            records += consumer.poll(timeout=1.0)
    first = records[0]
    assert (first.key, first.value, first.tag, dict(first.headers), first.timestamp) == (
        b"from-kafka", b"v1", "red", {"origin": b"librdkafka"}, 1_700_000_000_000)
    got = ck_consume(conf, "k-interop", 1, 2)
    second = got[1]
    assert (second.key(), second.value(), second.offset()) == (b"from-tubeq", b"v2", 1)
    assert sorted(second.headers()) == [("origin", b"tubeq"), ("tubeq.tag", b"blue")]


def test_kcat_produces_lists_and_consumes(kcluster):
    if shutil.which("kcat") is None:  # make test installs it; under CI its absence fails
        (pytest.fail if os.environ.get("CI") else pytest.skip)(
            "Debian's kcat is not installed (apt-get install kcat)")
    creds = kcluster.admin_credentials()
    base = ["kcat", "-b", bootstrap(kcluster), "-X", "security.protocol=SASL_PLAINTEXT",
            "-X", "sasl.mechanisms=PLAIN", "-X", f"sasl.username={creds.user}",
            "-X", f"sasl.password={creds.password}"]
    subprocess.run([*base, "-P", "-t", "k-cat", "-K:"], input=b"a:one\nb:two\n", check=True,
                   timeout=60)
    listing = subprocess.run([*base, "-L", "-t", "k-cat"], capture_output=True, timeout=60,
                             check=True).stdout.decode()
    assert 'topic "k-cat" with 1 partitions' in listing
    unknown = subprocess.run([*base, "-L", "-t", "k-no-such-topic"], capture_output=True,
                             timeout=60).stdout.decode()  # answered, not a dropped connection
    assert "k-no-such-topic" in unknown and "Unknown topic" in unknown
    out = subprocess.run([*base, "-C", "-t", "k-cat", "-o", "beginning", "-e", "-f", "%k=%s\n"],
                         capture_output=True, timeout=60, check=True).stdout.decode()
    assert out.splitlines() == ["a=one", "b=two"]


def test_admin_clients_create_alter_describe_and_delete_topics_as_their_user(kcluster):
    from confluent_kafka.admin import AdminClient as CkAdmin
    from confluent_kafka.admin import ConfigResource, NewPartitions, NewTopic

    def outcome(futures: dict) -> dict:
        out = {}
        for key, future in futures.items():
            try:
                out[key] = future.result()
            except KafkaException as exc:
                out[key] = exc.args[0].code()
        return out

    admin = CkAdmin(sasl(kcluster))
    created = outcome(admin.create_topics([
        NewTopic("k-made", 3, 1, config={"retention.ms": "3600000",
                                         "tubeq.durability": "sync"}),
        NewTopic("k-odd", 1, 1, config={"segment.jitter.ms": "5"}),
        NewTopic("k-ck", 1, 1)]))
    assert created == {"k-made": None, "k-odd": KafkaError.INVALID_CONFIG,
                       "k-ck": KafkaError.TOPIC_ALREADY_EXISTS}
    assert outcome(admin.create_partitions([NewPartitions("k-made", 5)])) == {"k-made": None}
    assert outcome(admin.create_partitions([NewPartitions("k-made", 2)])) == {
        "k-made": KafkaError.INVALID_PARTITIONS}
    [configs] = admin.describe_configs([ConfigResource("topic", "k-made")]).values()
    described = {k: v.value for k, v in configs.result().items()}
    assert (described["retention.ms"], described["tubeq.durability"]) == ("3600000", "sync")
    with AdminClient(kcluster.master_addresses,
                     credentials=kcluster.admin_credentials()) as tq:
        assert tq.describe_topic("k-made").partition_count == 5
        trail = [e for e in tq.audit_log() if e.target == "k-made"]
        assert trail and all(e.principal == "admin" for e in trail)  # the user, not the broker
    alice = CkAdmin(sasl(kcluster, ALICE))
    assert outcome(alice.create_topics([NewTopic("k-not-hers", 1, 1)])) == {
        "k-not-hers": KafkaError.TOPIC_AUTHORIZATION_FAILED}
    assert outcome(admin.delete_topics(["k-made"])) == {"k-made": None}
