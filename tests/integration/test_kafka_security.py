"""The Kafka port as an attacker or a careless client meets it: SASL (PLAIN, SCRAM) and ACLs
refuse as documented, bad bytes are refused without harming the broker, no request is served
before a login, quotas pace Kafka producers, and only brokers log in on a client's behalf."""
from __future__ import annotations

import socket
import struct
import time

from confluent_kafka import KafkaError
from confluent_kafka import Producer as CkProducer

from lib.admin import AdminClient
from lib.auth.client import Credentials
from tests.cluster import Cluster
from tests.helpers import wait_until
from tests.integration.kafka_kit import (
    ALICE,
    ONE_TRY,
    ck_consume,
    produce_values,
    python_login,
    sasl,
    wrong_login,
)


def alice_on_her_topic_and_another(kcluster) -> dict:
    """Each topic's delivery error of alice's produce to "alice-t" (her ACL) and "k-ck" (none),
    once her ACL reached the broker (with a heartbeat: up to 20 s). Any test of this file may
    run first on a fresh cluster."""
    outcome: dict = {}
    deadline = time.monotonic() + 20
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
    return outcome


def test_sasl_and_acls_refuse_as_documented(kcluster):
    wrong_login(kcluster, Credentials("admin", "not-the-password"))
    outcome = alice_on_her_topic_and_another(kcluster)
    assert outcome["alice-t"] is None
    assert outcome["k-ck"].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


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
    kp = KafkaProducer(**python_login(kcluster, "SCRAM-SHA-256"))
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
    assert alice_on_her_topic_and_another(kcluster)["alice-t"] is None, "her ACL on the broker"
    with AdminClient(kcluster.master_addresses,
                     credentials=kcluster.admin_credentials()) as root:
        root.set_quota("user:alice", produce_bytes_per_s=1 << 20)
        try:  # the brokers have the quota when a burst over it is slowed (a heartbeat)
            wait_until(lambda: _timed_produce(conf, "alice-t", 3 << 20) > 1.0,
                       "the quota on the broker", 30)
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
        wait_until(lambda: _logs_in(login, creds), "the backoff of this host ends", 30)


def _logs_in(login, creds) -> bool:
    from lib.errors import Unauthenticated
    from lib.proto import security_pb2 as spb
    from lib.rpc import invoke

    try:
        invoke(login, spb.LoginRequest(user=creds.user, password=creds.password), 10)
        return True
    except Unauthenticated:
        return False
