"""lib/stream_client.py: request frames of pieces, gathered by sendmsg or joined when there are
many, sent in parts by a full socket, arrive whole and in order; an error answer
raises the broker's error with its details and keeps the connection; a hello answered by
another broker than the one meant is refused."""
from __future__ import annotations

import os
import socket
import struct
import threading

import numpy as np
import pytest

from lib.errors import QuotaExceeded
from lib.stream_client import GATHER_MAX, FetchStreamClient, StreamClient


@pytest.mark.parametrize("count", [GATHER_MAX, 3 * GATHER_MAX + 5], ids=["gathered", "joined"])
def test_pieces_arrive_whole_and_in_order(count):
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # partial sends, often
    client = StreamClient.__new__(StreamClient)  # no hello: the framing alone
    client.sock = ours
    pieces = [os.urandom(n % 97 + 1) for n in range(count)]
    pieces[7] = memoryview(bytearray(b"a view" * 5000))  # one bigger than the socket buffer
    pieces[9] = memoryview(np.arange(300, dtype="<u4"))  # not bytes: its bytes all the same
    received = bytearray()

    def read() -> None:
        while chunk := theirs.recv(65536):
            received.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    client._send(pieces)
    ours.shutdown(socket.SHUT_WR)
    reader.join(30)
    body = b"".join(bytes(p) for p in pieces)
    assert bytes(received) == struct.pack(">I", len(body)) + body
    ours.close()
    theirs.close()


def answering(answers: list[bytes]) -> tuple[socket.socket, threading.Thread]:
    """A listening socket that reads each request frame and writes the next answer."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            for answer in answers:
                size = struct.unpack(">I", conn.recv(4, socket.MSG_WAITALL))[0]
                conn.recv(size, socket.MSG_WAITALL)
                conn.sendall(struct.pack(">I", len(answer)) + answer)  # status, body
        server.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return server, thread


def test_an_error_answer_raises_the_brokers_error_with_its_details_and_keeps_the_connection():
    server, thread = answering([b"\x00127.0.0.1:1",
                                b'\x01QUOTA_EXCEEDED over quota\x00{"retry_after_ms": 250}',
                                b"\x00fine"])
    client = FetchStreamClient("127.0.0.1", server.getsockname()[1], "", None, "127.0.0.1:1")
    try:
        with pytest.raises(QuotaExceeded, match="over quota") as refused:
            client.call([b"request"], 5)
        assert refused.value.details == {"retry_after_ms": 250}
        assert client.call([b"request"], 5) == b"fine"  # the connection stays
    finally:
        client.close()
        thread.join(10)


def test_a_hello_answered_by_another_broker_is_refused():
    server, thread = answering([b"\x00127.0.0.1:2"])
    with pytest.raises(ConnectionRefusedError, match="'127.0.0.1:2'.*not '127.0.0.1:1'"):
        FetchStreamClient("127.0.0.1", server.getsockname()[1], "", None, "127.0.0.1:1")
    thread.join(10)
