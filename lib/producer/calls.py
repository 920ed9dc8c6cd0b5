"""The producer's Produce calls: blocking calls on call threads of its own, each watched for
a leader that moves away while the call hangs (lib/stuck_calls.py: then the channel to the old
leader is closed, which fails every call on it at once, CANCELLED and retriable, and the
sender resends where the routes now say). The sender thread (lib/producer/sender.py) submits
a batch and gets its outcome back through ``done``; ``send_sync``'s direct path calls
:meth:`ProduceCalls.watched` from the caller's own thread.
"""
from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from lib.errors import TubeqError, Unavailable
from lib.produce_wire import PRODUCE_METHOD
from lib.proto import broker_pb2
from lib.routes import RouteCache
from lib.rpc import ChannelPool
from lib.stuck_calls import StuckCallWatch
from lib.types import TopicPartition
from lib.wire_errors import from_rpc_error

# Produce calls in flight at once per producer (one per partition at most); more wait their turn.
MAX_CALLS_IN_FLIGHT = 32
Metadata = tuple[tuple[str, str], ...]


class ProduceCalls:
    """Produce stubs per broker, the call threads and the hung-leader watch."""

    def __init__(self, routes: RouteCache, pool: ChannelPool, client_id: str) -> None:
        self.pool = pool
        self._stubs: dict[str, tuple[grpc.Channel, grpc.UnaryUnaryMultiCallable]] = {}
        self.watch = StuckCallWatch(routes, client_id)
        # Blocking calls on threads of our own, not .future(): grpc's synchronous channel
        # starts a thread to complete futures whenever a call begins on an idle channel and
        # ends it with the last call, so a producer sending a batch at a time started one per
        # batch, each start holding the sender thread ~0.8 ms until the new thread got the
        # GIL from the caller's send() loop (450-510 starts per 2M records of 100 B). These
        # threads stay once started (as many as calls were ever in flight at once, at most
        # the cap).
        self._threads = ThreadPoolExecutor(MAX_CALLS_IN_FLIGHT, f"tubeq-produce-{client_id}")

    def stub(self, address: str) -> grpc.UnaryUnaryMultiCallable:
        """The Produce stub of ``address`` (raises a TubeqError when it cannot be reached).
        The bare channel: the calls carry the auth metadata themselves (ChannelPool). A
        channel closed for a hung leader (ChannelPool.discard) is replaced: so is its stub."""
        channel = self.pool.get_bare(address)
        cached = self._stubs.get(address)
        if cached is None or cached[0] is not channel:
            cached = self._stubs[address] = (channel, channel.unary_unary(
                PRODUCE_METHOD, request_serializer=None,
                response_deserializer=broker_pb2.ProduceResponse.FromString))
        return cached[1]

    def watched(self, stub: grpc.UnaryUnaryMultiCallable, payload: bytes, timeout: float,
                address: str, tps: tuple[TopicPartition, ...],
                metadata: Metadata) -> broker_pb2.ProduceResponse:
        """One blocking Produce call, watched for a leader that moves away meanwhile."""
        token = self.watch.started(address, tps, lambda: self.pool.discard(address))
        try:
            return stub(payload, timeout=timeout, metadata=metadata)
        except ValueError as exc:  # the stub's channel was closed just before: a cut link
            raise Unavailable(f"produce call to {address} failed: {exc}",
                              topic=tps[0].topic, partition=tps[0].partition) from None
        finally:
            self.watch.finished(token)

    def submit(self, stub: grpc.UnaryUnaryMultiCallable, payload: bytes, timeout: float,
               address: str, tp: TopicPartition, metadata: Metadata,
               done: Callable[[Any, TubeqError | None], None]) -> None:
        """Make the call on a call thread; ``done(response, None)`` or ``done(None, error)``
        there when it ends."""
        self._threads.submit(self._call, stub, payload, timeout, address, tp, metadata, done)

    def _call(self, stub: grpc.UnaryUnaryMultiCallable, payload: bytes, timeout: float,
              address: str, tp: TopicPartition, metadata: Metadata,
              done: Callable[[Any, TubeqError | None], None]) -> None:
        try:
            result, error = self.watched(stub, payload, timeout, address, (tp,), metadata), None
        except grpc.RpcError as exc:
            result, error = None, from_rpc_error(exc)
        except TubeqError as exc:  # its channel closed under it (see watched)
            result, error = None, exc
        except Exception as exc:  # noqa: BLE001 - e.g. cancelled on close: still report it
            result, error = None, Unavailable(f"produce call failed: {exc!r}")
        done(result, error)

    def close(self) -> None:
        """Calls still running end with their channels."""
        self._threads.shutdown(wait=False)
        self.watch.close()
