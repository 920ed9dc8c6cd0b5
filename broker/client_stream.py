"""The clients' data path over a plain TCP socket: producers' ProduceMany and consumers'
Fetch without gRPC's cost per byte.

Every byte a client sends or takes over gRPC goes through gRPC's C core: HTTP/2 frames, the
core's slices and threads, and a copy into Python bytes on either side. Measured with 1 KiB
records (docs/benchmarks-history.md): the broker spent 2.5-3.4 us of CPU per record produced
over this socket against 3.6-4.4 over gRPC. So a broker may also listen on
``client_stream_port``: a client sends the same request messages over one socket and gets the
same answers. Each request is read straight into one buffer of its size (an
``asyncio.BufferedProtocol``: no stream buffer in between) and served from views of it, as
the gRPC path does; a Fetch answer's frames are written as the gRPC answer's are, the
store's bytes joined once.

Wire (sizes big-endian u32): the client opens with a hello frame, a magic that names what the
connection carries (:data:`~lib.stream_client.PRODUCE_MAGIC` for ProduceMany,
:data:`~lib.stream_client.FETCH_MAGIC` for Fetch) then the authorization header it would
send over gRPC (``Bearer <token>``; anything with ``auth = "none"``), answered by one status
frame: :data:`OK` then the broker's address (a client that dials a port it learned before
checks that it reached the broker it meant), or :data:`ERROR` then ``CODE message`` and the
connection closed. Then
each request frame (the call's timeout in ms, u32, then the serialized request) is answered
by one frame, :data:`OK` then the serialized answer. A ProduceMany answers every entry on its
own, as the gRPC call does (a whole-call refusal, such as an IP list that no longer admits
the caller, is each entry's error); a Fetch refused as a whole is answered :data:`ERROR`,
``CODE message``, a NUL and the error's details as JSON, and the connection stays open.
Requests on a connection are served one at a time, in order: the next is read once the
previous one is answered (a consumer's long poll holds its connection). The caller and its
rights are decided as for the gRPC call, by the same :class:`lib.auth.gate.Gate` and the
method's rule, on every request (a token that expired, an ACL or an IP list changed, count
from the next request on); the hello is refused when the first decision is. A client
certificate alone (mutual TLS without a token) identifies over gRPC only: such a hello is
refused, and the client keeps to gRPC.

Limits: a hello at most :data:`MAX_HELLO_BYTES`, a request at most the broker's gRPC message
limit, each whole within :data:`REQUEST_TIMEOUT_S` of its size; a connection idle at most
:data:`IDLE_TIMEOUT_S`; at most ``max_connections`` at once. A frame past its limit, a request
that does not parse or a refused hello closes the connection (logged). TLS when the broker's
port has it.
"""
from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from google.protobuf.message import DecodeError

from broker.listening import grpc_style, write_pieces
from lib.auth.access import OPEN, Access, current_access
from lib.auth.client import AUTH_HEADER
from lib.auth.gate import Gate, Refused
from lib.errors import ConfigError, TubeqError, Unauthenticated
from lib.fetch_wire import FETCH_METHOD
from lib.logs import event
from lib.produce_wire import PRODUCE_MANY_METHOD, ProduceView, parse_produce_many
from lib.proto import broker_pb2 as pb
from lib.stream_client import (
    ERROR,
    FETCH_MAGIC,
    MAGIC_BYTES,
    OK,
    PRODUCE_MAGIC,
    SIZE,
    SIZE_STATUS,
    TIMEOUT_MS,
)
from lib.wire import Spliced
from lib.wire_errors import entry_error

log = logging.getLogger(__name__)
MAX_CONNECTIONS = 1024  # clients' connections at once (a producer call thread's, a fetch thread's)
MAX_HELLO_BYTES = 64 << 10
REQUEST_TIMEOUT_S = 30.0
IDLE_TIMEOUT_S = 600.0

ProduceAnswer = Callable[[list[ProduceView], "Call"], Awaitable[pb.ProduceManyResponse]]
FetchAnswer = Callable[[pb.FetchRequest, "Call"], Awaitable[Spliced]]


class Refusal(Exception):
    """What a connection sent is refused: it is closed (after ``answer``, when there is one)."""

    def __init__(self, reason: str, answer: bytes = b"") -> None:
        super().__init__(reason)
        self.answer = answer


class Call:
    """The part of a gRPC call's context that the gate and the handler read."""

    def __init__(self, peer: str, header: str, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self._peer, self._header = peer, header
        self.deadline = time.monotonic() + timeout_s

    def peer(self) -> str:
        return self._peer

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ((AUTH_HEADER, self._header),)

    def time_remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())


@dataclass(frozen=True)
class Kind:
    """What one kind of connection carries: the gRPC method whose rule decides its calls, its
    name for the audit's refusals and the logs, and how one request is served."""

    method: str
    name: str
    parse: Callable[[memoryview], Any]  # the request (ValueError, DecodeError: not one)
    serve: Callable[[Any, Call], Awaitable[list]]  # the answer's pieces; TubeqError: refused
    refused: Callable[[Any, TubeqError], list]  # the answer's pieces for a refused request


def _produce_kind(answer: ProduceAnswer) -> Kind:
    async def serve(views: list[ProduceView], call: Call) -> list:
        return _ok([(await answer(views, call)).SerializeToString()])

    def refused(views: list[ProduceView], err: TubeqError) -> list:  # each entry's error
        code, message, details = entry_error(err)
        return _ok([pb.ProduceManyResponse(results=[pb.ProduceEntryResult(
            error_code=code, error_message=message, error_details=details)] * len(views)
        ).SerializeToString()])
    return Kind(PRODUCE_MANY_METHOD, "ProduceStream", parse_produce_many, serve, refused)


def _fetch_kind(answer: FetchAnswer) -> Kind:
    async def serve(request: pb.FetchRequest, call: Call) -> list:
        return _ok((await answer(request, call)).pieces())
    return Kind(FETCH_METHOD, "FetchStream", pb.FetchRequest.FromString, serve,
                lambda _request, err: [_error(err, details=True)])


def _ok(pieces: list) -> list:
    return [SIZE_STATUS.pack(sum(map(len, pieces)) + 1, OK), *pieces]


def _error(err: TubeqError, details: bool = False) -> bytes:
    code, message, detail_json = entry_error(err)
    body = f"{code} {message}".encode() + (b"\0" + detail_json.encode() if details else b"")
    return SIZE_STATUS.pack(len(body) + 1, ERROR) + body


class ClientStreamServer:
    """The broker's end, on its event loop. ``produce`` is the ProduceMany handler and
    ``fetch`` the Fetch handler (unguarded: errors come back as exceptions); ``gate`` None
    means ``auth = "none"``."""

    def __init__(self, address: str, produce: ProduceAnswer, fetch: FetchAnswer,
                 gate: Gate | None, max_request_bytes: int,
                 max_connections: int = MAX_CONNECTIONS) -> None:
        self.address = address  # the broker's, named in the hello's answer
        self.kinds = {PRODUCE_MAGIC: _produce_kind(produce), FETCH_MAGIC: _fetch_kind(fetch)}
        self.gate = gate
        self.max_request_bytes, self.max_connections = max_request_bytes, max_connections
        self.server: asyncio.base_events.Server | None = None
        self.connections: set[_Connection] = set()

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> int:
        loop = asyncio.get_running_loop()
        try:
            self.server = await loop.create_server(
                lambda: _Connection(self), host, port, ssl=tls,
                ssl_handshake_timeout=REQUEST_TIMEOUT_S if tls else None)
        except OSError as exc:
            raise ConfigError(f"cannot bind the client stream port {host}:{port}: {exc}"
                              ) from None
        return self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is None:
            return
        self.server.close()
        for connection in list(self.connections):
            connection.abort()
        await self.server.wait_closed()

    def hello(self, frame: bytearray, peer: str) -> tuple[Kind, str]:
        """What the connection carries and its authorization header, once the gate admits
        it (else Refusal)."""
        kind = self.kinds.get(bytes(frame[:MAGIC_BYTES]))
        if kind is None:
            raise Refusal("not a client stream hello")
        try:
            header = frame[MAGIC_BYTES:].decode()
        except UnicodeDecodeError:
            raise Refusal("a hello whose credential is not UTF-8") from None
        try:
            self.access(kind, header, Call(peer, header))
        except TubeqError as err:
            raise Refusal(err.message, _error(err)) from None
        return kind, header

    def access(self, kind: Kind, header: str, call: Call, request: Any = None) -> Access:
        """The caller of ``header`` and its rights now, decided as for the gRPC call of
        ``kind`` (the rule's needs on ``request``, when there is one): a token that expired
        since the hello, an ACL or IP list changed, count from the next request on. Raises
        the refusal (reported to the audit)."""
        if self.gate is None:
            return OPEN
        decision = self.gate.decide(SimpleNamespace(method=kind.method,
                                                    invocation_metadata=call.invocation_metadata()))
        if decision is None:  # no rule to apply: as the gRPC call would, it runs open
            return OPEN
        if isinstance(decision, Refused):
            self.gate.refused(decision.principal, kind.name, decision.error, call)
            raise decision.error
        identity, rule = decision
        if identity is None:
            raise Unauthenticated("the client stream takes an authorization header (a client "
                                  "certificate alone identifies over gRPC)")
        access = self.gate.access(identity, kind.name, call)
        access.check_address()  # the IP lists in force now
        if rule.needs and request is not None:
            access.enforce(rule, request)
        return access

    async def request(self, kind: Kind, frame: bytearray, peer: str, header: str) -> list:
        """One request's answer frame (as pieces)."""
        if len(frame) < TIMEOUT_MS.size:
            raise Refusal(f"a request of {len(frame)} bytes has no timeout")
        timeout_ms = TIMEOUT_MS.unpack_from(frame)[0]
        try:
            request = kind.parse(memoryview(frame)[TIMEOUT_MS.size:])
        except (ValueError, IndexError, DecodeError) as exc:
            raise Refusal(f"{len(frame)} bytes that are not a {kind.method.rsplit('/', 1)[-1]}"
                          f"Request ({exc})") from None
        call = Call(peer, header, timeout_ms / 1000)
        try:
            current_access.set(self.access(kind, header, call, request))
            return await kind.serve(request, call)
        except TubeqError as err:  # the whole call's
            return kind.refused(request, err)


class _Connection(asyncio.BufferedProtocol):
    """One client connection: frames read into buffers of their size, served one at a time."""

    def __init__(self, server: ClientStreamServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self.header: str | None = None  # the hello's, once admitted
        self.kind: Kind | None = None  # what the hello said the connection carries
        self._size = bytearray(SIZE.size)
        self._buf, self._got, self._in_frame = self._size, 0, False
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.peer = grpc_style(transport.get_extra_info("peername"))
        if len(self.server.connections) >= self.server.max_connections:
            event(log, "client_stream.refused", logging.WARNING, peer=self.peer,
                  reason=f"more than {self.server.max_connections} connections")
            transport.abort()
            return
        self.server.connections.add(self)
        self._arm(REQUEST_TIMEOUT_S)  # for the hello

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        if self._timer is not None:
            self._timer.cancel()
        if self._task is not None:
            self._task.cancel()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self._buf)[self._got:]

    def buffer_updated(self, nbytes: int) -> None:
        self._got += nbytes
        if self._got < len(self._buf):
            if not self._in_frame and self._got == nbytes:  # a frame's first bytes
                self._arm(REQUEST_TIMEOUT_S)
            return
        if not self._in_frame:
            size = SIZE.unpack(self._size)[0]
            limit = (MAX_HELLO_BYTES if self.header is None
                     else self.server.max_request_bytes + TIMEOUT_MS.size)
            if not 0 < size <= limit:
                self._refuse(f"a frame of {size} bytes (1..{limit})")
                return
            self._buf, self._got, self._in_frame = bytearray(size), 0, True
            self._arm(REQUEST_TIMEOUT_S)
            return
        frame = self._buf
        self._buf, self._got, self._in_frame = self._size, 0, False
        self.transport.pause_reading()
        if self._timer is not None:
            self._timer.cancel()
        self._task = asyncio.get_running_loop().create_task(self._serve(frame))

    async def _serve(self, frame: bytearray) -> None:
        try:
            if self.header is None:
                self.kind, self.header = self.server.hello(frame, self.peer)
                self.transport.writelines(_ok([self.server.address.encode()]))
            else:
                write_pieces(self.transport, await self.server.request(self.kind, frame,
                                                                       self.peer, self.header))
        except Refusal as refused:
            event(log, "client_stream.refused", logging.WARNING, peer=self.peer,
                  reason=str(refused))
            if refused.answer:
                self.transport.write(refused.answer)
            self.transport.close()
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - one connection's bug, never the broker's
            log.error("client_stream.connection_failed", exc_info=exc)
            self.transport.abort()
            return
        self._task = None
        self._arm(IDLE_TIMEOUT_S)
        self.transport.resume_reading()

    def _refuse(self, reason: str) -> None:
        event(log, "client_stream.refused", logging.WARNING, peer=self.peer, reason=reason)
        self.transport.abort()

    def _arm(self, seconds: float) -> None:
        """Close the connection unless it makes progress within ``seconds``."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(seconds, self._late, seconds)

    def _late(self, seconds: float) -> None:
        if self._task is None:  # a request being served is the handler's to time
            event(log, "client_stream.timed_out", logging.INFO, peer=self.peer,
                  after_s=seconds)
            self.transport.abort()

