"""A real broker's client stream port (broker/client_stream.py): batches sent over it are
stored and read back like any produce, fetches over it read what gRPC's read, its callers
and their rights are decided as gRPC's are, clients fall back to gRPC when it fails, and
bytes that are not the stream close the connection while the broker serves on."""
from __future__ import annotations

import socket
import struct
import time

import pytest

from lib.admin import AdminClient
from lib.auth.client import AUTH_HEADER, Credentials, TokenSource
from lib.consumer.pull import PullConsumer
from lib.errors import PermissionDenied, Unauthenticated, UnknownTopic
from lib.fetch_wire import FETCH_METHOD, read_fetch
from lib.produce_wire import produce_many_request, request_pieces
from lib.producer.producer import Producer
from lib.proto import broker_pb2
from lib.records.encode import batch_head, encode_columns
from lib.rpc import channel
from lib.stream_client import FETCH_MAGIC, PRODUCE_MAGIC, FetchStreamClient, ProduceStreamClient
from lib.types import TopicPartition
from lib.wire_errors import error_of
from tests.integration.test_consumer_common import wait_for

BOB = Credentials("bob", "bob-produce-stream-password")


@pytest.fixture(scope="module")
def streaming(tmp_path_factory):
    from tests.cluster import Cluster

    root = tmp_path_factory.mktemp("client-stream")
    conf = root / "broker.toml"
    conf.write_text("[broker]\nclient_stream_port = 0\n")
    cluster = Cluster(root / "c", broker_args=["--config", str(conf)])
    try:
        cluster.start(1)
        with AdminClient(cluster.master_addresses,
                         credentials=cluster.admin_credentials()) as admin:
            admin.create_topic("streamed", partitions=2)
            admin.create_topic("bobs-not", partitions=1)
            admin.add_user(BOB.user, BOB.password)
            admin.add_acl(f"user:{BOB.user}", "produce", "topic", "streamed")
            admin.add_acl(f"user:{BOB.user}", "consume", "topic", "streamed")
        with Producer(cluster.master_addresses,
                      credentials=cluster.admin_credentials()) as producer:
            for topic, partition in (("streamed", 0), ("streamed", 1), ("bobs-not", 0)):
                producer.send_sync(topic, b"served", partition=partition, timeout=30)
        yield cluster
    finally:
        cluster.stop_all()


def port_of(cluster) -> int:
    return cluster.brokers[1].info["client_stream"]


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
    events = streaming.brokers[1].log_events("client_stream.refused")
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
    frame(FETCH_MAGIC + b"Bearer x") + frame(b"\xff" * 32),
], ids=["huge-size", "not-a-hello", "after-refusal", "fetch-after-refusal"])
def test_bytes_that_are_not_the_stream_are_refused_and_the_broker_serves_on(streaming,
                                                                            payload):
    with socket.create_connection(("127.0.0.1", port_of(streaming)), timeout=10) as sock:
        sock.sendall(payload)
        answer = until_closed(sock)
    assert answer == b"" or b"UNAUTHENTICATED" in answer
    with Producer(streaming.master_addresses,
                  credentials=streaming.admin_credentials()) as producer:
        assert producer.send_sync("streamed", b"still serving", timeout=30).offset >= 0
    assert not streaming.brokers[1].log_events("client_stream.connection_failed")  # no bug


@pytest.mark.parametrize("magic", [PRODUCE_MAGIC, FETCH_MAGIC], ids=["produce", "fetch"])
def test_a_request_that_does_not_parse_closes_only_its_connection(streaming, magic):
    header = header_of(streaming, streaming.admin_credentials())
    with socket.create_connection(("127.0.0.1", port_of(streaming)), timeout=10) as sock:
        sock.sendall(frame(magic + header.encode()))
        address = streaming.brokers[1].address.encode()  # admitted, by the broker meant
        assert sock.recv(5 + len(address)) == struct.pack(">IB", len(address) + 1, 0) + address
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


def fetch_request(topic: str, partition: int, offset: int, max_wait_ms: int = 0):
    return broker_pb2.FetchRequest(topic=topic, max_wait_ms=max_wait_ms, partitions=[
        broker_pb2.PartitionFetch(partition=partition, offset=offset, max_bytes=1 << 20)])


def test_fetches_over_the_stream_read_what_grpc_reads_and_refusals_keep_the_connection(
        streaming):
    client = FetchStreamClient("127.0.0.1", port_of(streaming), header_of(streaming, BOB),
                               None, streaming.brokers[1].address)
    refused = []

    def bobs_grant_arrived() -> bool:  # ACLs reach the broker with its next heartbeat
        try:
            client.fetch(fetch_request("streamed", 1, 0), 10)
        except PermissionDenied as exc:
            refused[:] = [exc]
            return False
        return True

    try:
        wait_for(bobs_grant_arrived, 30, "bob's grant on the broker")
        with pytest.raises(PermissionDenied, match="bob"):
            client.fetch(fetch_request("bobs-not", 0, 0), 10)
        with pytest.raises(PermissionDenied):  # not even told whether it exists
            client.fetch(fetch_request("no-such-topic", 0, 0), 10)
        resp, parts = read_fetch(client.fetch(fetch_request("streamed", 1, 0), 10), "stream")
    finally:
        client.close()
    admin = FetchStreamClient("127.0.0.1", port_of(streaming),
                              header_of(streaming, streaming.admin_credentials()), None)
    try:
        with pytest.raises(UnknownTopic, match="no-such-topic"):
            admin.fetch(fetch_request("no-such-topic", 0, 0), 10)
    finally:
        admin.close()
    assert resp.stream_port == port_of(streaming)  # the answer names the stream
    ((pd, frames),) = parts
    assert pd.error_code == "" and len(frames) > 0 and len(pd.offsets) >= 8
    bobs = header_of(streaming, BOB)
    with channel(streaming.brokers[1].address, None) as chan:
        over_grpc = chan.unary_unary(
            FETCH_METHOD, request_serializer=broker_pb2.FetchRequest.SerializeToString)(
            fetch_request("streamed", 1, 0), timeout=10, metadata=((AUTH_HEADER, bobs),))
    (grpc_pd, grpc_frames), = read_fetch(over_grpc, "grpc")[1]
    assert bytes(frames) == bytes(grpc_frames) and pd == grpc_pd  # the same answer


def test_a_stream_that_another_broker_listens_on_now_is_refused(streaming):
    with pytest.raises(ConnectionRefusedError, match="not '127.0.0.1:1'"):
        FetchStreamClient("127.0.0.1", port_of(streaming),
                          header_of(streaming, streaming.admin_credentials()), None,
                          "127.0.0.1:1")


def fetch_workers(consumer) -> list:
    fetcher = consumer._fetcher  # the consumer's own bookkeeping of its fetch threads
    with fetcher._cond:
        return list(fetcher._workers.values())


def consume_all(consumer, want: set[bytes], timeout: float = 30) -> None:
    got: set[bytes] = set()
    deadline = time.monotonic() + timeout
    while not want <= got and time.monotonic() < deadline:
        got |= {r.value for r in consumer.poll(timeout=1.0)}
    assert want <= got, f"missing {sorted(want - got)[:5]}"


def test_a_consumer_fetches_over_the_stream_and_falls_back_to_grpc_when_it_fails(streaming):
    tp = TopicPartition("streamed", 0)
    with Producer(streaming.master_addresses,
                  credentials=streaming.admin_credentials()) as producer, \
            PullConsumer(streaming.master_addresses, auto_offset_reset="earliest",
                         credentials=streaming.admin_credentials()) as consumer:
        consumer.assign([tp])

        def sent(prefix: bytes) -> set[bytes]:
            values = [b"%s %d" % (prefix, i) for i in range(200)]
            for value in values:
                producer.send("streamed", value, partition=0)
            producer.flush()
            return set(values)

        consume_all(consumer, sent(b"first"))  # the first answer names the port
        consume_all(consumer, sent(b"streamed"))
        (worker,) = fetch_workers(consumer)
        assert worker.stream._client is not None  # those came over the stream
        with socket.socket() as unused:  # a port nobody listens on: the stream "fails"
            unused.bind(("127.0.0.1", 0))
            dead_port = unused.getsockname()[1]
        worker.stream.port = dead_port
        worker.interrupt()  # its long poll cut: the next call dials the dead port
        consume_all(consumer, sent(b"over grpc"))  # nothing failed, nothing lost
        assert worker.stream._client is None and worker.stream._off_until > time.monotonic()


def test_a_seek_cuts_a_long_poll_over_the_stream_short(streaming):
    tp = TopicPartition("streamed", 0)
    with PullConsumer(streaming.master_addresses, auto_offset_reset="earliest",
                      fetch_max_wait_ms=60_000,
                      credentials=streaming.admin_credentials()) as consumer:
        consumer.assign([tp])
        wait_for(lambda: consumer.poll(timeout=1.0), 30, "the records there")  # the answer
        # named the stream: the fetches at the end long-poll over it
        (worker,) = fetch_workers(consumer)
        wait_for(lambda: worker.stream._calling, 30, "a long poll over the stream")
        consumer.seek(tp, 0)
        started = time.monotonic()
        records = []
        while not records and time.monotonic() - started < 15:
            records = consumer.poll(timeout=1.0)
    # Within 15 s: not when the long poll ends (the broker holds one at most 30 s)
    assert records and records[0].offset == 0
