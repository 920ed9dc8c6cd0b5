"""ReplicaFetch over a plain TCP socket: the copy path without gRPC's cost per byte.

A follower copies every byte its leader stores. Over gRPC in Python a KiB costs the two
processes about 0.9-1.2 us of CPU (HTTP/2 frames, the C core's slices and threads, the copies
into and out of Python bytes); over a plain socket about 0.3 (docs/benchmarks.md#replication).
On two cores that was most of what a second and a third copy cost. So a leader also listens
on ``replica_stream_port`` and names that port in its gRPC answers
(``ReplicaFetchResponse.stream_port``); its followers then send the same ReplicaFetchRequest
over one socket each and get the same answer, its frames sent from the leader's cache blocks
as they are and received into one buffer that the follower's append reads from.

Wire (sizes big-endian u32): the follower opens with a hello frame, :data:`MAGIC` then the
authorization header it would send over gRPC (``Cluster <secret>``), answered by one status
frame. Then each request frame (a serialized ReplicaFetchRequest) is answered by one frame
whose first byte is its status: :data:`OK` then a serialized ReplicaFetchResponse, or
:data:`ERROR` then ``CODE message`` (UTF-8, a TubeqError's code). A bad frame, a size past
its limit, a request that does not parse or a refused hello close the connection, logged.
Limits: a frame from a follower at most :data:`MAX_REQUEST_BYTES`, whole within
``REQUEST_TIMEOUT_S`` of its first byte; a connection idle at most ``IDLE_TIMEOUT_S``; at most
``MAX_CONNECTIONS`` at once. TLS when the broker's port has it.

A follower whose stream fails (refused, reset, timed out, a hello refused) closes it, fetches
over gRPC as before, and tries the stream again after :data:`~lib.stream_client.RETRY_STREAM_S`
(broker/replica_fetcher.py).
"""
from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable

from google.protobuf.message import DecodeError

from broker.listening import Listening, grpc_style, write_pieces
from lib.errors import TubeqError
from lib.logs import event
from lib.proto import broker_pb2 as pb
from lib.stream_client import SIZE, SIZE_STATUS, StreamClient
from lib.wire import Spliced

log = logging.getLogger(__name__)
MAGIC = b"TQRS1 "
OK, ERROR = 0, 1
MAX_REQUEST_BYTES = 1 << 20  # a hello or a ReplicaFetchRequest (hundreds of bytes each)
MAX_CONNECTIONS = 256  # followers are brokers: a few per leader
REQUEST_TIMEOUT_S = 30.0
IDLE_TIMEOUT_S = 600.0


class Refused(Exception):
    """A connection's bytes are not what the stream speaks: it is closed."""


class ReplicaStreamServer(Listening):
    """The leader's end, on the broker's event loop. ``answer`` is the ReplicaFetch handler
    (it long-polls as over gRPC); ``authorized(header)`` says whether a hello's header may
    copy this broker's partitions (the cluster credential, as ReplicaFetch asks)."""

    def __init__(self, answer: Callable[[pb.ReplicaFetchRequest], Awaitable[Spliced]],
                 authorized: Callable[[str], bool],
                 on_refused: Callable[[str, str], None] = lambda peer, reason: None) -> None:
        super().__init__()
        self.answer, self.authorized = answer, authorized
        self.on_refused = on_refused  # (peer, reason) of a hello refused: the audit's

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> int:
        return await self.listen(self._serve, host, port, tls, REQUEST_TIMEOUT_S,
                                 "replica stream")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        address = writer.get_extra_info("peername") or ("", 0)
        peer = str(address[0])
        if not self.admit(MAX_CONNECTIONS, writer):
            event(log, "replica_stream.refused", logging.WARNING, peer=peer,
                  reason=f"more than {MAX_CONNECTIONS} connections")
            writer.close()
            return
        await self.converse(self._talk(reader, writer, grpc_style(address)), writer, peer,
                            Refused, "replica_stream.refused", "replica_stream.connection_failed")

    async def _talk(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    peer: str) -> None:
        await self._hello(reader, writer, peer)
        while True:
            await self._request(reader, writer)

    async def _hello(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     peer: str) -> None:
        hello = await _frame(reader, REQUEST_TIMEOUT_S)
        if not hello.startswith(MAGIC):
            raise Refused("not a replica stream hello")
        try:
            header = hello[len(MAGIC):].decode()
        except UnicodeDecodeError:
            raise Refused("a hello whose credential is not UTF-8") from None
        if not self.authorized(header):
            self.on_refused(peer, "the replica stream takes the cluster credential only")
            await _reply(writer, ERROR, b"UNAUTHENTICATED the replica stream takes the "
                                        b"cluster credential only")
            raise Refused("a hello without the cluster credential")
        await _reply(writer, OK, b"")

    async def _request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                       ) -> None:
        raw = await _frame(reader, IDLE_TIMEOUT_S)
        try:
            request = pb.ReplicaFetchRequest.FromString(raw)
        except DecodeError as exc:
            raise Refused(f"{len(raw)} bytes that are not a ReplicaFetchRequest ({exc})"
                          ) from None
        try:
            pieces = (await self.answer(request)).pieces()
        except TubeqError as err:
            await _reply(writer, ERROR, f"{err.code} {err.message}".encode())
            return
        write_pieces(writer, [SIZE_STATUS.pack(sum(map(len, pieces)) + 1, OK), *pieces])
        await asyncio.wait_for(writer.drain(), REQUEST_TIMEOUT_S)


async def _frame(reader: asyncio.StreamReader, first_byte_within: float) -> bytes:
    head = await asyncio.wait_for(reader.readexactly(SIZE.size), first_byte_within)
    size = SIZE.unpack(head)[0]
    if not 0 < size <= MAX_REQUEST_BYTES:
        raise Refused(f"a frame of {size} bytes (1..{MAX_REQUEST_BYTES})")
    return await asyncio.wait_for(reader.readexactly(size), REQUEST_TIMEOUT_S)


async def _reply(writer: asyncio.StreamWriter, status: int, body: bytes) -> None:
    writer.write(SIZE_STATUS.pack(len(body) + 1, status) + body)
    await asyncio.wait_for(writer.drain(), REQUEST_TIMEOUT_S)


class ReplicaStreamClient(StreamClient):
    """The follower's end: :class:`lib.stream_client.StreamClient` speaking this stream."""

    magic, what = MAGIC, "replica stream"

    def fetch(self, request: pb.ReplicaFetchRequest, timeout: float) -> bytearray:
        """The leader's serialized ReplicaFetchResponse (lib/wire.split reads it)."""
        return self.call([request.SerializeToString()], timeout)
