"""lib/stream_client.py's request frames: pieces gathered by sendmsg, more of them than one
call takes and sends cut short by a full socket, arrive whole and in order."""
from __future__ import annotations

import os
import socket
import struct
import threading

from lib.stream_client import IOV_MAX, StreamClient


def test_many_pieces_arrive_whole_and_in_order():
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # partial sends, often
    client = StreamClient.__new__(StreamClient)  # no hello: the framing alone
    client.sock = ours
    pieces = [os.urandom(n % 97 + 1) for n in range(3 * IOV_MAX + 5)]
    pieces[7] = memoryview(bytearray(b"a view" * 5000))  # one bigger than the socket buffer
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
