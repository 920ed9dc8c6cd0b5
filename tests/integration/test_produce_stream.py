"""A real broker's produce stream port (broker/produce_stream.py): batches sent over it are
stored and read back like any produce, its callers and their rights are decided as gRPC's
are, and bytes that are not the stream close the connection while the broker serves on."""
from __future__ import annotations

import socket
import struct

import pytest

from lib.admin import AdminClient
from lib.auth.client import Credentials, TokenSource
from lib.consumer.pull import PullConsumer
from lib.errors import PermissionDenied, Unauthenticated, UnknownTopic
from lib.produce_wire import produce_many_request, request_pieces
from lib.producer.producer import Producer
from lib.records.encode import batch_head, encode_columns
from lib.stream_client import PRODUCE_MAGIC, ProduceStreamClient
from lib.types import TopicPartition
from lib.wire_errors import error_of
from tests.integration.test_consumer_common import wait_for

BOB = Credentials("bob", "bob-produce-stream-password")


@pytest.fixture(scope="module")
def streaming(tmp_path_factory):
    from tests.cluster import Cluster

    root = tmp_path_factory.mktemp("produce-stream")
    conf = root / "broker.toml"
    conf.write_text("[broker]\nproduce_stream_port = 0\n")
    cluster = Cluster(root / "c", broker_args=["--config", str(conf)])
    try:
        cluster.start(1)
        with AdminClient(cluster.master_addresses,
                         credentials=cluster.admin_credentials()) as admin:
            admin.create_topic("streamed", partitions=2)
            admin.create_topic("bobs-not", partitions=1)
            admin.add_user(BOB.user, BOB.password)
            admin.add_acl(f"user:{BOB.user}", "produce", "topic", "streamed")
        with Producer(cluster.master_addresses,
                      credentials=cluster.admin_credentials()) as producer:
            for topic, partition in (("streamed", 0), ("streamed", 1), ("bobs-not", 0)):
                producer.send_sync(topic, b"served", partition=partition, timeout=30)
        yield cluster
    finally:
        cluster.stop_all()


def port_of(cluster) -> int:
    return cluster.brokers[1].info["produce_stream"]


def header_of(cluster, credentials: Credentials) -> str:
    return TokenSource(credentials, cluster.master_addresses).header()


def batch_request(topic: str, partition: int, values: list[bytes]):
    run = encode_columns(values, 1_700_000_000_000)
    head = batch_head(run.frames, run.sizes, None, [1_700_000_000_000] * len(values))
    return request_pieces(TopicPartition(topic, partition), head, run.frames)


def outcomes(response):
    return [error_of(r.error_code, r.error_message, r.error_details) if r.error_code
            else (r.base_offset, r.last_offset) for r in response.results]


def test_batches_sent_over_the_stream_are_stored_and_read_back(streaming):
    client = ProduceStreamClient("127.0.0.1", port_of(streaming),
                                 header_of(streaming, streaming.admin_credentials()), None)
    try:
        values = [b"v%d" % i for i in range(300)]
        response = client.produce_many([produce_many_request(
            [batch_request("streamed", 0, values[:100]),
             batch_request("streamed", 1, values[100:]),
             batch_request("no-such-topic", 0, [b"lost"])])], 10)
    finally:
        client.close()
    first, second, unknown = outcomes(response)
    assert first[1] - first[0] == 99 and second[1] - second[0] == 199
    assert isinstance(unknown, UnknownTopic)  # an entry refused by name, the others stored
    with PullConsumer(streaming.master_addresses, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("streamed", 0), TopicPartition("streamed", 1)])
        got = []
        for _ in range(100):
            got += [r.value for r in consumer.poll(timeout=1.0) if r.value != b"served"]
            if len(got) >= 300:
                break
    assert sorted(got) == sorted(values)


def test_callers_and_their_rights_are_decided_as_over_grpc(streaming):
    port = port_of(streaming)
    for header in ("", "Bearer not-a-token", f"Cluster {'x' * 40}"):
        with pytest.raises(Unauthenticated):
            ProduceStreamClient("127.0.0.1", port, header, None)
    client = ProduceStreamClient("127.0.0.1", port, header_of(streaming, BOB), None)
    results = []

    def bobs_grant_arrived() -> bool:  # ACLs reach the broker with its next heartbeat
        results[:] = outcomes(client.produce_many([produce_many_request(
            [batch_request("streamed", 0, [b"bob's"]),
             batch_request("bobs-not", 0, [b"not bob's"])])], 10))
        return isinstance(results[0], tuple)

    try:
        wait_for(bobs_grant_arrived, 30, "bob's grant on the broker")
    finally:
        client.close()
    not_mine = results[1]
    assert isinstance(not_mine, PermissionDenied) and "bob" in not_mine.message
    events = streaming.brokers[1].log_events("produce_stream.refused")
    assert any("token" in e.get("reason", "").lower() or "auth" in e.get("reason", "").lower()
               for e in events), events


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def until_closed(sock: socket.socket) -> bytes:
    """What the broker sent before it closed the connection (a reset is a close: the
    broker aborts a connection whose bytes it refuses, unread ones left in its socket)."""
    answer = b""
    try:
        while chunk := sock.recv(4096):
            answer += chunk
    except ConnectionResetError:
        pass
    return answer


@pytest.mark.parametrize("payload", [
    b"\x7f\xff\xff\xff" + b"x" * 64,  # a 2 GiB size prefix
    frame(b"\x16\x03\x01 not TLS, not a hello"),
    frame(PRODUCE_MAGIC + b"Bearer x") + frame(b"\xff" * 32),  # refused hello, then more
], ids=["huge-size", "not-a-hello", "after-refusal"])
def test_bytes_that_are_not_the_stream_are_refused_and_the_broker_serves_on(streaming,
                                                                            payload):
    with socket.create_connection(("127.0.0.1", port_of(streaming)), timeout=10) as sock:
        sock.sendall(payload)
        answer = until_closed(sock)
    assert answer == b"" or b"UNAUTHENTICATED" in answer
    with Producer(streaming.master_addresses,
                  credentials=streaming.admin_credentials()) as producer:
        assert producer.send_sync("streamed", b"still serving", timeout=30).offset >= 0
    assert not streaming.brokers[1].log_events("produce_stream.connection_failed")  # no bug


def test_a_request_that_is_not_produce_many_closes_only_its_connection(streaming):
    header = header_of(streaming, streaming.admin_credentials())
    with socket.create_connection(("127.0.0.1", port_of(streaming)), timeout=10) as sock:
        sock.sendall(frame(PRODUCE_MAGIC + header.encode()))
        assert sock.recv(5) == struct.pack(">IB", 1, 0)  # admitted
        sock.sendall(frame(b"\x00\x00\x27\x10" + b"\x0a\xff\xff\xff\xff\x0f"))  # cut short
        assert until_closed(sock) == b""
    client = ProduceStreamClient("127.0.0.1", port_of(streaming), header, None)
    try:
        (stored,) = outcomes(client.produce_many([produce_many_request(
            [batch_request("streamed", 0, [b"after"])])], 10))
    finally:
        client.close()
    assert isinstance(stored, tuple)


def stream_connections(producer, address: str) -> int:
    streams = producer._sender.calls.streams  # the producer's own bookkeeping of its sockets
    with streams._lock:
        return len(streams._open.get(address, ()))


def test_a_producer_sends_over_the_stream_and_falls_back_to_grpc_when_it_fails(streaming):
    address = streaming.brokers[1].address
    with Producer(streaming.master_addresses,
                  credentials=streaming.admin_credentials()) as producer:
        first = [producer.send("streamed", b"first %d" % i, partition=0) for i in range(500)]
        producer.flush()
        assert all(f.result(30).offset >= 0 for f in first)  # the first answer names the port
        later = [producer.send("streamed", b"later %d" % i, partition=0) for i in range(500)]
        producer.flush()
        assert all(f.result(30).offset >= 0 for f in later)
        assert stream_connections(producer, address) >= 1  # those went over the stream
        with socket.socket() as unused:  # a port nobody listens on: the stream "fails"
            unused.bind(("127.0.0.1", 0))
            dead_port = unused.getsockname()[1]
        producer._sender.calls.streams.discard(address)
        producer._sender.calls.streams.learned(address, dead_port)
        fallback = [producer.send("streamed", b"over grpc %d" % i, partition=0)
                    for i in range(500)]
        producer.flush()
        assert all(f.result(30).offset >= 0 for f in fallback)  # nothing failed, nothing lost
        assert stream_connections(producer, address) == 0
        assert producer.metrics()["records_failed"] == 0
