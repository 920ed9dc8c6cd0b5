"""One fetch thread's connection to its broker's client stream (broker/client_stream.py).

A broker with a client stream names its port in its Fetch answers; from then on the fetch
thread long-polls that broker over one plain socket instead of gRPC: the same request, the
same answer bytes (lib/fetch_wire.py reads both), read straight into one buffer of their
size. What goes back to gRPC: a stream that cannot be reached or refuses the hello, for
:data:`~lib.stream_client.RETRY_STREAM_S` (the call is made over gRPC at once, so nothing
waits). A connection that fails mid-call ends that call with a retriable Unavailable and is
closed; nothing is lost, since positions move only when the application takes data. A call
the thread interrupts (a seek, a hung leader's watch) is cut by shutting its socket down, as
a gRPC call is cancelled. A renewed token opens a new connection.
"""
from __future__ import annotations

import logging
import socket
import threading
import time

from lib.errors import TubeqError, Unavailable
from lib.logs import event
from lib.proto import broker_pb2
from lib.rpc import ChannelPool
from lib.stream_client import RETRY_STREAM_S, FetchStreamClient, auth_header

log = logging.getLogger(__name__)


class Cut(Exception):
    """The call was cut (:meth:`FetchStream.cut`) before its answer came."""


class FetchStream:
    """The stream of one broker, for one fetch thread (its calls are one at a time)."""

    def __init__(self, address: str, pool: ChannelPool) -> None:
        self.address, self.pool = address, pool
        self.port = 0  # the broker's stream port, as its last Fetch answer named it
        self._off_until = 0.0  # gRPC only until then
        self._client: FetchStreamClient | None = None
        self._lock = threading.Lock()  # _calling and _cut: cut() comes from other threads
        self._calling = False
        self._cut = False

    def fetch(self, request: broker_pb2.FetchRequest, timeout: float) -> bytearray | None:
        """The answer's bytes, or None: make this call over gRPC. Raises Cut, Unavailable
        when the connection failed, or the broker's refusal (the connection kept)."""
        client = self._connected()
        if client is None:
            return None
        with self._lock:
            self._calling = True
        answer, failure = None, None
        try:
            answer = client.fetch(request, timeout)
        except TubeqError as exc:  # the broker's answer: the connection is fine
            failure = exc
        except (OSError, ValueError) as exc:  # reset, timed out, cut, bytes that make no sense
            failure = Unavailable(f"fetch stream call to {self.address} failed: {exc!r}")
            self.close()
        with self._lock:
            self._calling = False
            cut, self._cut = self._cut, False
        if cut:
            self.close()  # the socket is shut down: a new connection for the next call
            if answer is None:
                raise Cut
        if failure is not None:
            raise failure
        return answer

    def cut(self) -> None:
        """End the call in flight now, if there is one (from any thread)."""
        with self._lock:
            client = self._client if self._calling else None
            self._cut = client is not None
        if client is not None:
            try:
                client.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()

    def _connected(self) -> FetchStreamClient | None:
        if not self.port or time.monotonic() < self._off_until:
            return None
        header = auth_header(self.pool.auth_metadata())
        if self._client is not None and self._client.header == header:
            return self._client
        self.close()
        try:
            self._client = FetchStreamClient.to_broker(self.address, self.port, header,
                                                       self.pool.tls)
        except (OSError, TubeqError) as exc:  # unreachable, refused hello: gRPC for a while
            self._off_until = time.monotonic() + RETRY_STREAM_S
            event(log, "consumer.stream_unused", logging.INFO, address=self.address,
                  error=repr(exc), retry_s=RETRY_STREAM_S)
            return None
        return self._client
