"""Kafka clients nobody here wrote (librdkafka through confluent-kafka, kafka-python, aiokafka,
Debian's kcat) produce to and consume from real brokers' Kafka ports, SASL/PLAIN with tubeq
users; records cross between the Kafka port and tubeq's own client both ways; bad input on the
port is refused without harming the broker."""
from __future__ import annotations

import asyncio
import os
import shutil
import socket
import struct
import subprocess
import threading
import time

import pytest
from confluent_kafka import Consumer as CkConsumer
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Producer as CkProducer
from confluent_kafka import TopicPartition as CkTp

from lib.admin import AdminClient
from lib.auth.client import Credentials
from lib.consumer.pull import PullConsumer
from lib.producer.producer import Producer
from lib.types import TopicPartition
from tests.cluster import Cluster

ALICE = Credentials("alice", "alice-password-123")
# A client with a wrong password tries once or twice, not every 100 ms for the whole message
# timeout: failed logins back off per address, and every test client is 127.0.0.1.
ONE_TRY = {"message.timeout.ms": 4000, "reconnect.backoff.ms": 5000,
           "reconnect.backoff.max.ms": 5000}
LIMITS = """[broker]
kafka_request_timeout_s = 2.0
kafka_max_connections = 40
"""


@pytest.fixture(scope="module")
def kcluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("kafka")
    config = root / "broker.toml"
    config.write_text(LIMITS)
    cluster = Cluster(root, broker_args=["--kafka-port", "0", "--config", str(config)])
    try:
        cluster.start(2)
        admin = cluster.admin_credentials()
        with AdminClient(cluster.master_addresses, credentials=admin) as root_admin:
            root_admin.add_user(ALICE.user, ALICE.password)
            root_admin.add_acl(f"user:{ALICE.user}", "produce", "topic", "alice-",
                               pattern="prefix")
            for name, parts in (("k-ck", 3), ("k-kp", 2), ("k-aio", 1), ("k-cat", 1),
                                ("k-interop", 1), ("alice-t", 1), ("k-bad", 1),
                                ("k-range", 6), ("k-cooperative-sticky", 6), ("k-shared", 2),
                                ("k-kpgroup", 2), ("k-gzip", 1), ("k-snappy", 1),
                                ("k-lz4", 1), ("k-zstd", 1), ("k-txn", 1)):
                root_admin.create_topic(name, partitions=parts)
        yield cluster
    finally:
        cluster.stop_all()


def bootstrap(cluster: Cluster) -> str:
    return ",".join(b.info["kafka"] for b in cluster.brokers.values())


def sasl(cluster: Cluster, creds: Credentials | None = None) -> dict:
    creds = creds or cluster.admin_credentials()
    return {"bootstrap.servers": bootstrap(cluster), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": creds.user,
            "sasl.password": creds.password}


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
    creds = kcluster.admin_credentials()
    reader = KafkaConsumer(bootstrap_servers=bootstrap(kcluster).split(","),
                           security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                           sasl_plain_username=creds.user, sasl_plain_password=creds.password,
                           isolation_level="read_committed", enable_auto_commit=False,
                           consumer_timeout_ms=10_000)
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

    creds = kcluster.admin_credentials()
    common = dict(bootstrap_servers=bootstrap(kcluster).split(","),
                  security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                  sasl_plain_username=creds.user, sasl_plain_password=creds.password)
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
    values = []
    for m in consumer:
        values.append(m.value)
        if len(values) == 40:
            break
    consumer.close()
    assert values == [b"kp-%d" % i for i in range(10, 50)]


def test_aiokafka_round_trip(kcluster):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATp

    creds = kcluster.admin_credentials()
    common = dict(bootstrap_servers=bootstrap(kcluster), security_protocol="SASL_PLAINTEXT",
                  sasl_mechanism="PLAIN", sasl_plain_username=creds.user,
                  sasl_plain_password=creds.password)

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
    wait_until(logs_in, 60, "a right password logs in again")


def test_sasl_and_acls_refuse_as_documented(kcluster):
    wrong_login(kcluster, Credentials("admin", "not-the-password"))
    outcome: dict = {}
    deadline = time.monotonic() + 20  # the brokers hear of the ACL with a heartbeat
    while time.monotonic() < deadline:
        outcome.clear()
        alice = CkProducer({**sasl(kcluster, ALICE), "message.timeout.ms": 10000})
        for topic in ("alice-t", "k-ck"):
            alice.produce(topic, b"x", on_delivery=lambda err, msg: outcome.update(
                {msg.topic(): err}))
        alice.flush(15)
        if outcome.get("alice-t", "missing") is None:
            break
        time.sleep(0.5)
    assert outcome["alice-t"] is None
    assert outcome["k-ck"].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


class GroupMember(threading.Thread):
    """A librdkafka consumer of a group in its own thread, committing every record it got."""

    def __init__(self, conf: dict, group: str, topic: str, strategy: str) -> None:
        super().__init__(daemon=True)
        self.consumer = CkConsumer({**conf, "group.id": group, "enable.auto.commit": False,
                                    "auto.offset.reset": "earliest",
                                    "partition.assignment.strategy": strategy})
        self.topic, self.values, self.assigned = topic, [], []
        self.stopping, self.closed = threading.Event(), threading.Event()

    def run(self) -> None:
        c = self.consumer
        c.subscribe([self.topic])
        try:
            while not self.stopping.is_set():
                m = c.poll(0.2)
                self.assigned = sorted(tp.partition for tp in c.assignment())
                if m is None or m.error():
                    continue
                self.values.append(m.value())
                try:
                    c.commit(m, asynchronous=False)
                except KafkaException:
                    pass  # a rebalance began: its next owner reads from the last commit
        finally:
            c.close()  # leaves the group: the others take its partitions at once
            self.closed.set()


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.1)


def produce_values(conf: dict, topic: str, values: list[bytes], partitions: int = 0) -> None:
    """``values`` to ``topic``: spread by the client, or round robin over ``partitions``."""
    producer = CkProducer({**conf, "linger.ms": 5})
    for i, v in enumerate(values):
        if partitions:
            producer.produce(topic, v, partition=i % partitions)
        else:
            producer.produce(topic, v)
    assert producer.flush(30) == 0


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_a_group_of_three_splits_the_partitions_and_hands_them_on(kcluster, strategy):
    conf, topic = sasl(kcluster), f"k-{strategy}"
    first = [b"a-%d" % i for i in range(600)]
    produce_values(conf, topic, first)
    members = [GroupMember(conf, f"grp-{strategy}", topic, strategy) for _ in range(3)]
    for m in members:
        m.start()
    try:
        def settled(group: list[GroupMember]) -> bool:
            owned = sorted(p for m in group for p in m.assigned)
            return owned == list(range(6)) and all(m.assigned for m in group)
        wait_until(lambda: settled(members), 60, "three members own two partitions each")
        wait_until(lambda: {v for m in members for v in m.values} >= set(first), 60,
                   "every record of the first batch consumed")
        members[0].stopping.set()  # one leaves: the other two take its partitions
        members[0].closed.wait(30)
        wait_until(lambda: settled(members[1:]), 60, "two members own all six partitions")
        second = [b"b-%d" % i for i in range(300)]
        produce_values(conf, topic, second)
        wait_until(lambda: {v for m in members[1:] for v in m.values} >= set(second), 60,
                   "every record of the second batch consumed by the two left")
    finally:
        for m in members:
            m.stopping.set()
        for m in members:
            m.join(30)
    consumed = [v for m in members for v in m.values]
    assert set(consumed) == set(first) | set(second)  # nothing lost
    # committed after every record: only a record read when a rebalance began comes twice
    assert len(consumed) - len(set(consumed)) <= 6


def test_group_offsets_are_the_same_through_both_apis(kcluster):
    conf, admin = sasl(kcluster), kcluster.admin_credentials()
    produce_values(conf, "k-shared", [b"s-%d" % i for i in range(40)], partitions=2)
    consumer = CkConsumer({**conf, "group.id": "shared", "enable.auto.commit": False})
    consumer.commit(offsets=[CkTp("k-shared", 0, 7), CkTp("k-shared", 1, 5)],
                    asynchronous=False)
    consumer.close()
    with PullConsumer(kcluster.master_addresses, credentials=admin, group="shared") as tq:
        assert tq.committed(TopicPartition("k-shared", 0)) == 7
        assert tq.committed(TopicPartition("k-shared", 1)) == 5
        tq.commit({TopicPartition("k-shared", 0): 9})
    reader = CkConsumer({**conf, "group.id": "shared"})
    got = reader.committed([CkTp("k-shared", 0), CkTp("k-shared", 1)], timeout=10)
    reader.close()
    assert [(tp.partition, tp.offset) for tp in got] == [(0, 9), (1, 5)]


def test_a_live_kafka_group_refuses_tubeq_members_and_the_other_way(kcluster):
    from lib.errors import GroupModeConflict

    conf, admin = sasl(kcluster), kcluster.admin_credentials()
    member = GroupMember(conf, "kafka-owned", "k-shared", "range")
    member.start()
    try:
        wait_until(lambda: member.assigned == [0, 1], 60, "the Kafka member owns the topic")
        with AdminClient(kcluster.master_addresses, credentials=admin) as tq_admin:
            assert tq_admin.describe_group("kafka-owned").mode == "kafka"
        from confluent_kafka.admin import AdminClient as CkAdmin  # ListGroups, DescribeGroups

        ck_admin = CkAdmin(conf)
        listed = ck_admin.list_consumer_groups(request_timeout=10).result().valid
        assert "kafka-owned" in {g.group_id for g in listed}
        described = ck_admin.describe_consumer_groups(["kafka-owned"])["kafka-owned"].result()
        [only] = described.members
        assert sorted((tp.topic, tp.partition) for tp in only.assignment.topic_partitions) == \
            [("k-shared", 0), ("k-shared", 1)]
        with PullConsumer(kcluster.master_addresses, credentials=admin,
                          group="kafka-owned") as tq:
            with pytest.raises(GroupModeConflict, match="Kafka-managed"):
                tq.subscribe(["k-shared"])
                tq.poll(timeout=5)
    finally:
        member.stopping.set()
        member.join(30)


def test_kafka_python_group_consumer_commits(kcluster):
    from kafka import KafkaConsumer

    conf = sasl(kcluster)
    produce_values(conf, "k-kpgroup", [b"kp-%d" % i for i in range(100)], partitions=2)
    creds = kcluster.admin_credentials()
    consumer = KafkaConsumer("k-kpgroup", group_id="kp-group", enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=15000,
                             bootstrap_servers=bootstrap(kcluster).split(","),
                             security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                             sasl_plain_username=creds.user,
                             sasl_plain_password=creds.password)
    values = []
    for m in consumer:
        values.append(m.value)
        if len(values) == 100:
            break
    consumer.commit()
    consumer.close()
    assert sorted(values) == sorted(b"kp-%d" % i for i in range(100))
    reader = CkConsumer({**conf, "group.id": "kp-group"})
    got = reader.committed([CkTp("k-kpgroup", 0), CkTp("k-kpgroup", 1)], timeout=10)
    reader.close()
    assert sum(tp.offset for tp in got) == 100


def test_scram_sha_256_logs_kafka_clients_in_without_the_broker_seeing_a_password(kcluster):
    from kafka import KafkaProducer

    def scram(creds: Credentials) -> dict:
        return {**sasl(kcluster, creds), "sasl.mechanism": "SCRAM-SHA-256", **ONE_TRY}

    outcome: dict = {}
    for who, creds in (("admin", kcluster.admin_credentials()), ("alice", ALICE)):
        producer = CkProducer(scram(creds))
        producer.produce("alice-t", b"scram " + who.encode(),
                         on_delivery=lambda err, msg, who=who: outcome.update({who: err}))
        producer.flush(15)
    assert outcome == {"admin": None, "alice": None}
    creds = kcluster.admin_credentials()
    kp = KafkaProducer(bootstrap_servers=bootstrap(kcluster).split(","),
                       security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
                       sasl_plain_username=creds.user, sasl_plain_password=creds.password)
    assert kp.send("alice-t", b"scram kafka-python").get(30).offset >= 0
    kp.close()
    wrong_login(kcluster, Credentials("alice", "not-her-password"), "SCRAM-SHA-256")


def _raw(cluster: Cluster) -> socket.socket:
    host, port = next(iter(cluster.brokers.values())).info["kafka"].rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, TimeoutError):
        return True


def test_bad_input_is_refused_and_the_broker_serves_on(kcluster):
    with _raw(kcluster) as s:  # a 2 GiB size prefix: closed before anything is read
        s.sendall(struct.pack(">i", 0x7FFF_FFFF))
        assert _closed(s)
    with _raw(kcluster) as s:  # a Metadata request whose bytes lie about its topics
        body = struct.pack(">hhih", 3, 9, 7, 1) + b"c" + b"\xff\xff\xff\x7f"
        s.sendall(struct.pack(">i", len(body)) + body)
        assert _closed(s)
    with _raw(kcluster) as s:  # an API version not served: answered, not dropped
        body = struct.pack(">hhih", 0, 2, 11, 1) + b"c" + struct.pack(">hii", 1, 1000, 0)
        s.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", s.recv(4))[0]
        answer = s.recv(size)
        assert struct.unpack(">i", answer[:4])[0] == 11  # the correlation id
    with _raw(kcluster) as s:  # an API not served (DeleteRecords): its own empty answer
        body = struct.pack(">hhih", 21, 0, 12, 1) + b"c" + struct.pack(">ii", 0, 1000)
        s.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", s.recv(4))[0]
        assert struct.unpack(">i", s.recv(size)[:4])[0] == 12
    with _raw(kcluster) as s:  # an API key Kafka does not define: closed
        body = struct.pack(">hhih", 999, 0, 13, 1) + b"c"
        s.sendall(struct.pack(">i", len(body)) + body)
        assert _closed(s)
    with _raw(kcluster) as s:  # slow-loris: half a request, then nothing
        s.sendall(struct.pack(">i", 100) + b"\x00\x03")
        started = time.monotonic()
        assert _closed(s)
        assert time.monotonic() - started < 10  # kafka_request_timeout_s = 2
    flood = [_raw(kcluster) for _ in range(60)]  # past kafka_max_connections = 40
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            refused = sum(_closed_now(s) for s in flood)
            if refused >= 20:
                break
        assert refused >= 20
    finally:
        for s in flood:
            s.close()
    produce_values(sasl(kcluster), "k-bad", [b"still serving"])
    got = ck_consume(sasl(kcluster), "k-bad", 1, 1)
    assert [m.value() for m in got] == [b"still serving"]
    assert all(p.alive() for p in kcluster.all_processes())


def _closed_now(sock: socket.socket) -> bool:
    sock.settimeout(0.05)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_without_sasl_every_request_is_refused(kcluster):
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    request = MetadataRequest[1](topics=[MetadataRequest[1].MetadataRequestTopic(name="k-ck")])
    request.with_header(correlation_id=5, client_id="raw")
    with _raw(kcluster) as s:
        s.sendall(bytes(request.encode(header=True, framed=True)))
        size = struct.unpack(">i", s.recv(4))[0]
        payload = b""
        while len(payload) < size:
            payload += s.recv(size - len(payload))
    answer = MetadataResponse.decode(payload, version=1, header=True)
    assert [(t.name, t.error_code) for t in answer.topics] == [("k-ck", 58)]
    assert answer.brokers == []


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


def _timed_produce(conf: dict, topic: str, nbytes: int) -> float:
    producer = CkProducer({**conf, "linger.ms": 5, "message.timeout.ms": 60_000})
    failed: list = []
    started = time.monotonic()
    for _ in range(nbytes // 8192):
        producer.produce(topic, b"q" * 8192, on_delivery=lambda e, m: e and failed.append(e))
        producer.poll(0)
    assert producer.flush(60) == 0 and failed == []
    return time.monotonic() - started


def test_a_byte_rate_quota_paces_a_kafka_producer_as_it_paces_tubeqs(kcluster):
    conf = sasl(kcluster, ALICE)
    with AdminClient(kcluster.master_addresses,
                     credentials=kcluster.admin_credentials()) as root:
        root.set_quota("user:alice", produce_bytes_per_s=1 << 20)
        try:  # the brokers have the quota when a burst over it is slowed (a heartbeat)
            wait_until(lambda: _timed_produce(conf, "alice-t", 3 << 20) > 1.0, 30,
                       "the quota on the broker")
            time.sleep(3)  # the bucket refills at the quota's rate: start from a full one
            assert _timed_produce(conf, "alice-t", 4 << 20) >= 2.0  # (4 - 1 burst) MiB / 1
        finally:
            root.remove_quota("user:alice")


def test_only_brokers_may_log_in_on_behalf_of_a_kafka_client(kcluster):
    """The broker counts each Kafka client's failed logins apart (one client's bad passwords
    must not lock the broker's other users out: test_sasl_and_acls_refuse_as_documented);
    a client that claims another address itself is counted as the address it calls from."""
    import grpc

    from lib.errors import Unauthenticated
    from lib.proto import security_pb2 as spb
    from lib.proto import security_pb2_grpc
    from lib.rpc import invoke

    master = kcluster.master_addresses.split(",")[0]
    with grpc.insecure_channel(master) as channel:
        login = security_pb2_grpc.SecurityStub(channel).Login
        messages = []
        for i in range(8):
            try:
                invoke(login, spb.LoginRequest(user="alice", password="wrong",
                                               on_behalf_of=f"10.0.0.{i}"), 10)
            except Unauthenticated as exc:
                messages.append(exc.message)
        assert any("too many failed logins" in m for m in messages), messages
        creds = kcluster.admin_credentials()
        wait_until(lambda: _logs_in(login, creds), 30, "the backoff of this host ends")


def _logs_in(login, creds) -> bool:
    from lib.errors import Unauthenticated
    from lib.proto import security_pb2 as spb
    from lib.rpc import invoke

    try:
        invoke(login, spb.LoginRequest(user=creds.user, password=creds.password), 10)
        return True
    except Unauthenticated:
        return False
