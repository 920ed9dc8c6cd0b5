"""The producer's calls over a broker's client stream (broker/client_stream.py).

A broker with a client stream names its port in its gRPC produce answers; from then on the
producer's call threads send that broker's ProduceMany requests over plain sockets, one per
call thread and broker, the request's pieces gathered by the kernel (one ``sendmsg``), not
joined. The answers are the gRPC call's, so retries, errors and acknowledgements are the same
code. What goes back to gRPC: a broker whose stream cannot be reached or refuses the hello
(for :data:`~lib.stream_client.RETRY_STREAM_S`: the call is made over gRPC at once, so
nothing waits); a connection that fails mid-call ends that call with a retriable Unavailable
(whether the broker appended is unknown, as when a gRPC call's connection drops: an
idempotent producer's retry is deduplicated) and is closed. A hung leader's watch closes its
connections as it closes its gRPC channel. A renewed token opens a new connection (the broker
decides on every request with the header of the hello).
"""
from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Sequence

from google.protobuf.message import DecodeError

from lib.errors import TubeqError, Unavailable
from lib.logs import event
from lib.proto import broker_pb2
from lib.stream_client import RETRY_STREAM_S, Buffer, ProduceStreamClient, auth_header
from lib.tls import Tls

log = logging.getLogger(__name__)


class NoStream(Exception):
    """This call goes over gRPC: the broker has no stream, or it cannot be used now."""


class StreamCalls:
    """Which brokers have a client stream, and each call thread's connections to them."""

    def __init__(self, tls: Tls | None) -> None:
        self.tls = tls
        self._ports: dict[str, int] = {}  # address -> its stream port
        self._off_until: dict[str, float] = {}  # address -> gRPC only until then
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: dict[str, set[ProduceStreamClient]] = {}

    def learned(self, address: str, port: int) -> None:
        """A gRPC answer of ``address`` named its stream port (0: none)."""
        if self._ports.get(address, 0) != port:
            if port:
                self._ports[address] = port
            else:
                self._ports.pop(address, None)

    def produce_many(self, address: str, pieces: Sequence[Buffer], timeout: float,
                     metadata: Sequence[tuple[str, str]]) -> broker_pb2.ProduceManyResponse:
        """One ProduceMany call over ``address``'s stream; raises NoStream when it has none
        (make the call over gRPC), Unavailable when the connection failed during the call."""
        client = self._client(address, auth_header(metadata))
        try:
            return client.produce_many(pieces, timeout)
        except (OSError, ValueError, DecodeError) as exc:  # reset, timed out, closed by the
            # watch, an answer that makes no sense
            self._drop(address, client)
            raise Unavailable(f"produce stream call to {address} failed: {exc!r}") from None

    def discard(self, address: str) -> None:
        """Close every connection to ``address`` (a hung leader): calls on them fail now."""
        with self._lock:
            clients = self._open.pop(address, set())
        for client in clients:
            try:
                client.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        with self._lock:
            every = [c for clients in self._open.values() for c in clients]
            self._open.clear()
        for client in every:
            client.close()

    def _client(self, address: str, header: str) -> ProduceStreamClient:
        port = self._ports.get(address)
        if not port or time.monotonic() < self._off_until.get(address, 0.0):
            raise NoStream
        clients: dict[str, ProduceStreamClient] = self._local.__dict__.setdefault("clients", {})
        client = clients.get(address)
        if client is not None and client.header == header and self._still_open(address, client):
            return client
        if client is not None:
            self._drop(address, client)
        try:
            client = ProduceStreamClient.to_broker(address, port, header, self.tls)
        except (OSError, TubeqError) as exc:  # unreachable, refused hello: gRPC for a while
            self._off_until[address] = time.monotonic() + RETRY_STREAM_S
            event(log, "producer.stream_unused", logging.INFO, address=address,
                  error=repr(exc), retry_s=RETRY_STREAM_S)
            raise NoStream from None
        clients[address] = client
        with self._lock:
            self._open.setdefault(address, set()).add(client)
        return client

    def _still_open(self, address: str, client: ProduceStreamClient) -> bool:
        """Whether ``client`` is still one of ``address``'s (a hung leader's watch took it)."""
        with self._lock:
            return client in self._open.get(address, ())

    def _drop(self, address: str, client: ProduceStreamClient) -> None:
        self._local.__dict__.get("clients", {}).pop(address, None)
        with self._lock:
            self._open.get(address, set()).discard(client)
        client.close()
