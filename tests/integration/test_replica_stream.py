"""A real broker's replica stream port (broker/replica_stream.py) as an attacker and a careless
client would try it: only the cluster credential copies anything, bytes that are not the
stream close the connection, and the broker serves on."""
from __future__ import annotations

import socket
import struct

import pytest

from broker.replica_fetcher import split_answer
from broker.replica_stream import MAGIC, ReplicaStreamClient
from lib.admin import AdminClient
from lib.errors import Unauthenticated
from lib.producer.producer import Producer
from lib.proto import broker_pb2 as pb

pytestmark = pytest.mark.shared_cluster(brokers=1)


def stream_port(cluster) -> int:
    return cluster.brokers[1].info["replica_stream"]


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def test_only_the_cluster_credential_opens_a_stream(cluster):
    port = stream_port(cluster)
    for header in ("", "Cluster wrong", "Bearer not-a-token"):
        with pytest.raises(Unauthenticated, match="cluster credential"):
            ReplicaStreamClient("127.0.0.1", port, header, None)
    refused = cluster.brokers[1].log_events("replica_stream.refused")
    assert any("without the cluster credential" in e.get("reason", "") for e in refused)
    client = ReplicaStreamClient("127.0.0.1", port, f"Cluster {cluster.cluster_secret}", None)
    try:
        raw = client.fetch(pb.ReplicaFetchRequest(replica_id=9, partitions=[
            pb.ReplicaFetchPartition(topic="no-such-topic", partition=0)]), 10)
        head, ((data, frames),) = split_answer(raw, "broker 1")
        assert head.stream_port == port
        assert data.error_code and not len(frames), data  # refused by name, nothing copied
    finally:
        client.close()


@pytest.mark.parametrize("payload", [
    b"\x7f\xff\xff\xff" + b"x" * 64,  # a 2 GiB size prefix
    frame(b"\x16\x03\x01 not TLS, not a hello"),
    frame(MAGIC + b"Cluster x") + frame(b"\xff" * 32),  # refused hello, then more bytes
], ids=["huge-size", "not-a-hello", "after-refusal"])
def test_bytes_that_are_not_the_stream_are_refused_and_the_broker_serves_on(cluster, payload):
    with socket.create_connection(("127.0.0.1", stream_port(cluster)), timeout=10) as sock:
        sock.sendall(payload)
        answer = b""
        while chunk := sock.recv(4096):  # closed by the broker: recv returns b""
            answer += chunk
    assert answer == b"" or b"UNAUTHENTICATED" in answer
    with AdminClient(cluster.master_addresses) as admin:
        if "stream-after-junk" not in {t.name for t in admin.list_topics()}:
            admin.create_topic("stream-after-junk", partitions=1)
    with Producer(cluster.master_addresses) as producer:
        assert producer.send_sync("stream-after-junk", b"still serving", timeout=30).offset >= 0
