"""broker/replica_stream.py over real sockets on 127.0.0.1: the leader's server on an event
loop of its own, the follower's ReplicaStreamClient and raw sockets as a careless or
hostile peer."""
from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections.abc import Callable, Iterator

import pytest

from broker.replica_answer import REPLICA_ENTRIES, REPLICA_FRAMES
from broker.replica_fetcher import split_answer
from broker.replica_stream import MAGIC, ReplicaStreamClient, ReplicaStreamServer
from lib.errors import ConfigError, NotLeader, Unauthenticated
from lib.proto import broker_pb2 as pb
from lib.wire import Spliced

HEADER = "Cluster s3cret"
FRAMES = bytes(range(256)) * 64  # 16 KiB standing in for a partition's frames


async def answer(request: pb.ReplicaFetchRequest) -> Spliced:
    part = request.partitions[0]
    if part.topic == "moved":
        raise NotLeader("this broker no longer leads moved/0")
    if part.topic == "slow":
        await asyncio.sleep(2)
    data = pb.ReplicaFetchData(topic=part.topic, partition=part.partition,
                               base_offset=part.fetch_offset)
    return Spliced(pb.ReplicaFetchResponse(stream_port=7), REPLICA_ENTRIES, REPLICA_FRAMES,
                   [(data, memoryview(FRAMES))])


@pytest.fixture
def served() -> Iterator[tuple[ReplicaStreamServer, int, Callable]]:
    """The server, its port, and a way to run a coroutine on its loop (stopped at the end)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def on_loop(coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(10)

    server = ReplicaStreamServer(answer, lambda header: header == HEADER)
    try:
        yield server, on_loop(server.start("127.0.0.1", 0)), on_loop
        on_loop(server.stop())
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@pytest.fixture
def port(served) -> int:
    return served[1]


def request(topic: str, offset: int = 5) -> pb.ReplicaFetchRequest:
    return pb.ReplicaFetchRequest(replica_id=2, partitions=[
        pb.ReplicaFetchPartition(topic=topic, partition=0, fetch_offset=offset)])


def test_a_follower_gets_the_same_answer_as_over_grpc(port):
    client = ReplicaStreamClient("127.0.0.1", port, HEADER, None)
    try:
        for offset in (5, 6):  # one connection, request after request
            head, entries = split_answer(client.fetch(request("t", offset), 5), "leader")
            assert head.stream_port == 7
            (data, frames), = entries
            assert (data.topic, data.base_offset) == ("t", offset)
            assert bytes(frames) == FRAMES
    finally:
        client.close()


def test_a_leaders_error_comes_back_as_its_own_class_and_the_stream_goes_on(port):
    client = ReplicaStreamClient("127.0.0.1", port, HEADER, None)
    try:
        with pytest.raises(NotLeader, match="no longer leads moved/0"):
            client.fetch(request("moved"), 5)
        assert split_answer(client.fetch(request("t"), 5), "leader")[1][0][0].topic == "t"
    finally:
        client.close()


def test_a_late_answer_times_out_on_the_follower(port):
    client = ReplicaStreamClient("127.0.0.1", port, HEADER, None)
    try:
        with pytest.raises(TimeoutError):
            client.fetch(request("slow"), 0.3)
    finally:
        client.close()


def test_a_hello_without_the_cluster_credential_is_refused(port):
    with pytest.raises(Unauthenticated, match="cluster credential only"):
        ReplicaStreamClient("127.0.0.1", port, "Cluster wrong", None)


def raw(port: int, payload: bytes) -> bytes:
    """What the server sends back to ``payload`` before it closes (b"" if nothing)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(payload)
        got = b""
        while chunk := sock.recv(1 << 16):
            got += chunk
        return got


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


@pytest.mark.parametrize("payload", [
    b"\xff\xff\xff\xff",  # a 4 GiB size: closed before anything is allocated
    b"\x00\x00\x00\x00",  # an empty frame
    frame(b"GET / HTTP/1.1\r\n\r\n"),  # not a hello
    frame(MAGIC + b"\xff\xfe"),  # a credential that is not UTF-8
    frame(MAGIC + HEADER.encode()) + frame(b"\x0a\xff\xff"),  # a request that does not parse
], ids=["huge", "empty", "not-hello", "not-utf8", "bad-request"])
def test_bytes_that_are_not_the_stream_close_the_connection_and_the_server_serves_on(
        port, payload):
    got = raw(port, payload)
    assert got in (b"", b"\x00\x00\x00\x01\x00")  # at most the hello's OK before the close
    client = ReplicaStreamClient("127.0.0.1", port, HEADER, None)
    try:
        assert split_answer(client.fetch(request("t"), 5), "leader")[1][0][0].topic == "t"
    finally:
        client.close()


def test_a_port_in_use_is_refused_with_a_config_error_naming_it(port):
    server = ReplicaStreamServer(answer, lambda header: True)
    with pytest.raises(ConfigError, match=rf"cannot bind the replica stream port "
                                          rf"127.0.0.1:{port}"):
        asyncio.run(server.start("127.0.0.1", port))


def test_stop_ends_the_connections_still_open_before_it_returns(served):
    """A connection cancelled but not awaited outlives the loop as a coroutine never finished
    (PytestUnraisableExceptionWarning in a later test): stop waits for each to end."""
    server, bound, on_loop = served
    client = ReplicaStreamClient("127.0.0.1", bound, HEADER, None)  # hello answered: admitted
    try:
        open_ones = list(server._connections)
        assert len(open_ones) == 1
        on_loop(server.stop())
        assert all(task.done() for task in open_ones)
    finally:
        client.close()
