"""The client end of the brokers' plain-socket streams (broker/replica_stream.py for followers,
broker/client_stream.py for producers and consumers): one blocking socket to one broker, one
request at a time.

Wire (sizes big-endian u32): a hello frame, the stream's magic then the authorization header
the client would send over gRPC, answered by one status frame (the client stream's names the
broker); then each request frame is answered by one frame whose first byte is its status: OK
then the answer, or ERROR then ``CODE message`` (UTF-8, a TubeqError's code), optionally a
NUL and the error's details as JSON.
"""
from __future__ import annotations

import socket
import ssl
import struct
from collections.abc import Sequence
from typing import Self

from lib.auth.client import AUTH_HEADER
from lib.errors import Unauthenticated
from lib.proto import broker_pb2
from lib.tls import Tls, read_pem
from lib.wire_errors import error_of

SIZE = struct.Struct(">I")
SIZE_STATUS = struct.Struct(">IB")
OK, ERROR = 0, 1
MAX_ANSWER_BYTES = 256 << 20  # what a client accepts: every answer is far below
CONNECT_TIMEOUT_S = 5.0  # to connect, and for the hello's answer
SEND_TIMEOUT_S = 30.0
GATHER_MAX = 64  # pieces sent as they are by one sendmsg (Linux takes up to 1,024); more: joined
TIMEOUT_MAX_MS = (1 << 32) - 1
RETRY_STREAM_S = 30.0  # a stream that could not be reached or refused a hello: gRPC this long

Buffer = bytes | bytearray | memoryview


class StreamClient:
    """Raises OSError when the connection fails or its bytes make no sense (TimeoutError when
    the broker is late), Unauthenticated when the hello is refused, the broker's TubeqError
    for an error answer (the connection still good)."""

    magic = b""
    what = "stream"

    def __init__(self, host: str, port: int, header: str, tls: Tls | None,
                 broker: str = "") -> None:
        self.header = header  # the hello's: a renewed credential needs a new connection
        sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if tls is not None:
                sock = client_context(tls).wrap_socket(sock, server_hostname=host)
            self.sock = sock
            named = self.call([self.magic + header.encode()], CONNECT_TIMEOUT_S)  # a hung
            # broker accepts, and answers nothing
            if broker and named and named.decode(errors="replace") != broker:
                # a port learned before that another broker on the host listens on now
                raise ConnectionRefusedError(f"the {self.what} at {host}:{port} is broker "
                                             f"{named.decode(errors='replace')!r}'s, not "
                                             f"{broker!r}'s")
        except BaseException:
            sock.close()
            raise

    @classmethod
    def to_broker(cls, address: str, port: int, header: str, tls: Tls | None) -> Self:
        """A connection to the stream at ``port`` of the broker whose gRPC address is
        ``address`` (checked against the hello's answer when the stream names its broker)."""
        return cls(address.rpartition(":")[0].strip("[]"), port, header, tls, address)

    def call(self, pieces: Sequence[Buffer], timeout: float) -> bytearray:
        """Send one request frame of ``pieces`` (not joined: gathered by the kernel) and
        return its answer's body."""
        self._send(pieces)
        return self._answer(timeout)

    def close(self) -> None:
        self.sock.close()

    def _send(self, pieces: Sequence[Buffer]) -> None:
        self.sock.settimeout(SEND_TIMEOUT_S)
        if len(pieces) > GATHER_MAX:  # a batch's records: one join in C costs less than a
            # memoryview per piece in Python (producer 8.7 against 13.0 us a record at 10,000
            # topics, docs/benchmarks-history.md)
            pieces = [b"".join(pieces)]
        views = [memoryview(p).cast("B") for p in pieces]
        views.insert(0, memoryview(SIZE.pack(sum(v.nbytes for v in views))))
        if isinstance(self.sock, ssl.SSLSocket):  # no sendmsg over TLS: one join
            self.sock.sendall(b"".join(views))
            return
        i = 0
        while i < len(views):
            sent = self.sock.sendmsg(views[i:])
            while sent:  # whole buffers sent, then the rest of a partly sent one
                if sent >= len(views[i]):
                    sent -= len(views[i])
                    i += 1
                else:
                    views[i], sent = views[i][sent:], 0

    def _answer(self, timeout: float) -> bytearray:
        self.sock.settimeout(timeout)
        size, status = SIZE_STATUS.unpack(self._exactly(SIZE_STATUS.size))
        if not 0 < size <= MAX_ANSWER_BYTES:
            raise ConnectionAbortedError(f"a {self.what} answer of {size} bytes "
                                         f"(1..{MAX_ANSWER_BYTES})")
        body = self._exactly(size - 1)
        if status == OK:
            return body
        text, _, details = body.decode(errors="replace").partition("\0")
        code, _, message = text.partition(" ")
        if status == ERROR and code == Unauthenticated.code:
            raise Unauthenticated(message)
        if status != ERROR:
            raise ConnectionAbortedError(f"a {self.what} answer with status {status}")
        raise error_of(code, message, details)

    def _exactly(self, n: int) -> bytearray:
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            took = self.sock.recv_into(view[got:])
            if not took:
                raise ConnectionResetError(f"the broker closed the {self.what}")
            got += took
        return buf


def auth_header(metadata: Sequence[tuple[str, str]]) -> str:
    """The authorization header of a call's metadata (what a hello carries)."""
    return next((v for k, v in metadata if k == AUTH_HEADER), "")


def client_context(tls: Tls) -> ssl.SSLContext:
    """The client's TLS, as its gRPC channels have it (lib/tls.py): the CA, and its own
    certificate under mutual TLS."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    if tls.ca:
        ctx.load_verify_locations(cadata=read_pem(tls.ca, "TLS CA file").decode())
    if tls.cert:
        ctx.load_cert_chain(tls.cert, tls.key)
    return ctx


PRODUCE_MAGIC = b"TQPS1 "  # broker/client_stream.py: a connection of ProduceMany calls
FETCH_MAGIC = b"TQFS1 "  # and one of Fetch calls
MAGIC_BYTES = 6
TIMEOUT_MS = struct.Struct(">I")  # a client request's head: how long its caller waits


def _timeout_ms(timeout: float) -> bytes:
    return TIMEOUT_MS.pack(max(1, min(int(timeout * 1000), TIMEOUT_MAX_MS)))


class ProduceStreamClient(StreamClient):
    """A producer's end of broker/client_stream.py: ProduceMany calls over one socket."""

    magic, what = PRODUCE_MAGIC, "produce stream"

    def produce_many(self, request: Sequence[Buffer], timeout: float
                     ) -> broker_pb2.ProduceManyResponse:
        """One ProduceMany call: ``request`` the pieces of a serialized ProduceManyRequest."""
        return broker_pb2.ProduceManyResponse.FromString(
            self.call([_timeout_ms(timeout), *request], timeout))


class FetchStreamClient(StreamClient):
    """A consumer's end of broker/client_stream.py: Fetch calls over one socket."""

    magic, what = FETCH_MAGIC, "fetch stream"

    def fetch(self, request: broker_pb2.FetchRequest, timeout: float) -> bytearray:
        """One Fetch call: the serialized answer, as the gRPC call's bytes are
        (lib/fetch_wire.py reads it); the broker waits at most the request's max_wait_ms,
        ``timeout`` bounds the whole call."""
        return self.call([_timeout_ms(timeout), request.SerializeToString()], timeout)
