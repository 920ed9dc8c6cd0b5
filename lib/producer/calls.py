"""The producer's Produce calls: blocking calls on call threads of its own, each watched for
a leader that moves away while the call hangs (lib/stuck_calls.py: then the channel to the old
leader is closed, which fails every call on it at once, CANCELLED and retriable, and the
sender resends where the routes now say). The sender thread (lib/producer/sender.py) submits
a batch and gets its outcome back through ``done``; ``send_sync``'s direct path calls
:meth:`ProduceCalls.watched` from the caller's own thread.

Batches ready for one broker at once go in one ``ProduceMany`` call (Kafka's produce request
shape), in runs of at most :data:`MANY_MAX_BYTES` (a batch of :data:`MANY_ENTRY_MAX_BYTES`
or more goes alone): with many partitions per broker (10,000
topics of one partition, keyed records over many partitions) the per-call cost on both sides
is paid once per broker and linger instead of once per partition. Each entry is answered on
its own, so retries and failures stay per batch. A broker that does not know the method (an
older version) answers UNIMPLEMENTED, having appended nothing: it gets each batch again in a
Produce call of its own at once, and only those from then on.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import grpc

from lib.errors import TubeqError, Unavailable
from lib.produce_wire import (
    MAX_ENTRIES,
    PRODUCE_MANY_METHOD,
    PRODUCE_METHOD,
    joined,
    produce_many_pieces,
    produce_many_request,
)
from lib.producer.stream_calls import NoStream, StreamCalls
from lib.proto import broker_pb2
from lib.records.encode import Pieces
from lib.routes import RouteCache
from lib.rpc import ChannelPool
from lib.stuck_calls import StuckCallWatch
from lib.types import TopicPartition
from lib.wire_errors import error_of, from_rpc_error

# Produce calls in flight at once per producer (one per partition at most); more wait their turn.
MAX_CALLS_IN_FLIGHT = 32
Metadata = tuple[tuple[str, str], ...]
MANY_MAX_BYTES = 16 << 20  # per ProduceMany call (gRPC's limit is lib.rpc.MAX_MESSAGE_BYTES)
# A batch this large goes in a Produce call of its own: the call's cost is small beside its
# bytes, and a ProduceMany would copy them once more (measured: 6 partitions of 2 MiB
# batches, a sticky producer at 1 KiB, 0.92 of its rate when they were grouped).
MANY_ENTRY_MAX_BYTES = 1 << 20
T = TypeVar("T")
Outcome = tuple[broker_pb2.ProduceResponse | None, TubeqError | None]


def runs_of(items: list[T], sizes: Sequence[int]) -> list[list[T]]:
    """``items`` (of ``sizes`` bytes) in runs of at most :data:`MANY_MAX_BYTES` and
    MAX_ENTRIES items; an item of :data:`MANY_ENTRY_MAX_BYTES` or more goes alone."""
    out: list[list[T]] = []
    run: list[T] = []
    size = 0
    for item, item_size in zip(items, sizes, strict=True):
        if item_size >= MANY_ENTRY_MAX_BYTES:
            out.append([item])
            continue
        if run and (size + item_size > MANY_MAX_BYTES or len(run) == MAX_ENTRIES):
            out.append(run)
            run, size = [], 0
        run.append(item)
        size += item_size
    return out + [run] if run else out


def entry_outcomes(address: str, count: int, result: broker_pb2.ProduceManyResponse | None,
                   error: TubeqError | None) -> list[Outcome]:
    """Each entry's (response, error) of a ProduceMany call of ``count`` entries."""
    if error is None and len(result.results) != count:
        error = Unavailable(f"broker {address} answered {len(result.results)} of {count} "
                            "entries of a ProduceMany call")
    if error is not None:
        return [(None, error)] * count
    return [(None, error_of(e.error_code, e.error_message, e.error_details)) if e.error_code
            else (broker_pb2.ProduceResponse(base_offset=e.base_offset,
                                             last_offset=e.last_offset,
                                             throttle_ms=result.throttle_ms), None)
            for e in result.results]


class ProduceCalls:
    """Produce stubs per broker, the call threads and the hung-leader watch."""

    def __init__(self, routes: RouteCache, pool: ChannelPool, client_id: str) -> None:
        self.pool = pool
        self._stubs: dict[tuple[str, bool], tuple[grpc.Channel, grpc.UnaryUnaryMultiCallable]] = {}
        self.unimplemented: set[str] = set()  # brokers that answered ProduceMany UNIMPLEMENTED
        self.watch = StuckCallWatch(routes, client_id)
        # Blocking calls on threads of our own, not .future(): grpc's synchronous channel
        # starts a thread to complete futures whenever a call begins on an idle channel and
        # ends it with the last call, so a producer sending a batch at a time started one per
        # batch, each start holding the sender thread ~0.8 ms until the new thread got the
        # GIL from the caller's send() loop (450-510 starts per 2M records of 100 B). These
        # threads stay once started (as many as calls were ever in flight at once, at most
        # the cap).
        self._threads = ThreadPoolExecutor(MAX_CALLS_IN_FLIGHT, f"tubeq-produce-{client_id}")
        self.streams = StreamCalls(pool.tls)  # brokers' client streams (stream_calls.py)

    def stub(self, address: str, many: bool = False) -> grpc.UnaryUnaryMultiCallable:
        """The Produce (or ProduceMany) stub of ``address`` (raises a TubeqError when it
        cannot be reached). The bare channel: the calls carry the auth metadata themselves
        (ChannelPool). A channel closed for a hung leader (ChannelPool.discard) is replaced:
        so is its stub."""
        channel = self.pool.get_bare(address)
        cached = self._stubs.get((address, many))
        if cached is None or cached[0] is not channel:
            method, answer = (PRODUCE_MANY_METHOD, broker_pb2.ProduceManyResponse) if many \
                else (PRODUCE_METHOD, broker_pb2.ProduceResponse)
            cached = self._stubs[address, many] = (channel, channel.unary_unary(
                method, request_serializer=None, response_deserializer=answer.FromString))
        return cached[1]

    def watched(self, stub: grpc.UnaryUnaryMultiCallable, payload: bytes, timeout: float,
                address: str, tps: tuple[TopicPartition, ...],
                metadata: Metadata) -> broker_pb2.ProduceResponse:
        """One blocking Produce call, watched for a leader that moves away meanwhile."""
        token = self.watch.started(address, tps, lambda: self._discard(address))
        try:
            return stub(payload, timeout=timeout, metadata=metadata)
        except ValueError as exc:  # the stub's channel was closed just before: a cut link
            raise Unavailable(f"produce call to {address} failed: {exc}",
                              topic=tps[0].topic, partition=tps[0].partition) from None
        finally:
            self.watch.finished(token)

    def _discard(self, address: str) -> None:
        """A hung leader: its channel and its stream connections closed, their calls failed."""
        self.pool.discard(address)
        self.streams.discard(address)

    def submit(self, stub: grpc.UnaryUnaryMultiCallable, payload: bytes, timeout: float,
               address: str, tps: tuple[TopicPartition, ...], metadata: Metadata,
               done: Callable[[Any, TubeqError | None], None]) -> None:
        """Make the call on a call thread; ``done(response, None)`` or ``done(None, error)``
        there when it ends. A ProduceMany call that meets a broker without that method
        adds the broker to :attr:`unimplemented`."""
        self._threads.submit(self._one, stub, payload, timeout, address, tps, metadata, done)

    def submit_many(self, address: str, payloads: list[bytes | Pieces],
                    tps: tuple[TopicPartition, ...], timeout: float, metadata: Metadata,
                    done: Callable[[int, Any, TubeqError | None], None]) -> None:
        """One ProduceMany call of the serialized Produce requests ``payloads`` (``tps``
        theirs); ``done(i, response, error)`` for each entry on a call thread."""
        try:
            stub = self.stub(address, many=True)
        except TubeqError as exc:
            for i in range(len(payloads)):
                done(i, None, exc)
            return
        self._threads.submit(self._many, stub, payloads, timeout, address, tps, metadata,
                             done)

    def _many(self, stub: grpc.UnaryUnaryMultiCallable, payloads: list[bytes | Pieces],
              timeout: float, address: str, tps: tuple[TopicPartition, ...],
              metadata: Metadata, done: Callable[[int, Any, TubeqError | None], None]) -> None:
        """A ProduceMany call on a call thread: over the broker's stream when it has one
        (the entries' pieces never joined), else over gRPC."""
        try:
            result, error = self._streamed(address, produce_many_pieces(payloads), timeout,
                                           tps, metadata), None
        except NoStream:
            self._call(stub, produce_many_request(payloads), timeout, address, tps, metadata,
                       lambda result, error: self._many_over(address, payloads, tps, timeout,
                                                             metadata, done, result, error))
            return
        except TubeqError as exc:
            result, error = None, exc
        for i, outcome in enumerate(entry_outcomes(address, len(payloads), result, error)):
            done(i, *outcome)

    def _streamed(self, address: str, pieces: list, timeout: float,
                  tps: tuple[TopicPartition, ...], metadata: Metadata
                  ) -> broker_pb2.ProduceManyResponse:
        """One ProduceMany over ``address``'s stream, watched as a gRPC call is (NoStream:
        make it over gRPC)."""
        token = self.watch.started(address, tps, lambda: self._discard(address))
        try:
            return self.streams.produce_many(address, pieces, timeout, metadata)
        finally:
            self.watch.finished(token)

    def _many_over(self, address: str, payloads: list[bytes | Pieces],
                   tps: tuple[TopicPartition, ...], timeout: float, metadata: Metadata,
                   done: Callable[[int, Any, TubeqError | None], None],
                   result: broker_pb2.ProduceManyResponse | None,
                   error: TubeqError | None) -> None:
        if error is not None and address in self.unimplemented:  # nothing was appended
            for i, (payload, tp) in enumerate(zip(payloads, tps, strict=True)):
                try:
                    stub = self.stub(address)
                except TubeqError as exc:
                    done(i, None, exc)
                    continue
                self.submit(stub, joined(payload), timeout, address, (tp,), metadata,
                            functools.partial(done, i))
            return
        for i, outcome in enumerate(entry_outcomes(address, len(payloads), result, error)):
            done(i, *outcome)

    def _one(self, stub: grpc.UnaryUnaryMultiCallable, payload: bytes, timeout: float,
             address: str, tps: tuple[TopicPartition, ...], metadata: Metadata,
             done: Callable[[Any, TubeqError | None], None]) -> None:
        """A Produce call on a call thread: as a ProduceMany of one entry over the broker's
        stream when it has one, else over gRPC."""
        try:
            result = self._streamed(address, produce_many_pieces([payload]), timeout, tps,
                                    metadata)
        except NoStream:
            self._call(stub, payload, timeout, address, tps, metadata, done)
            return
        except TubeqError as exc:
            done(None, exc)
            return
        done(*entry_outcomes(address, 1, result, None)[0])

    def _call(self, stub: grpc.UnaryUnaryMultiCallable, payload: bytes, timeout: float,
              address: str, tps: tuple[TopicPartition, ...], metadata: Metadata,
              done: Callable[[Any, TubeqError | None], None]) -> None:
        try:
            result, error = self.watched(stub, payload, timeout, address, tps, metadata), None
            self.streams.learned(address, result.stream_port)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:  # ProduceMany, on an old broker
                self.unimplemented.add(address)
            result, error = None, from_rpc_error(exc)
        except TubeqError as exc:  # its channel closed under it (see watched)
            result, error = None, exc
        except Exception as exc:  # noqa: BLE001 - e.g. cancelled on close: still report it
            result, error = None, Unavailable(f"produce call failed: {exc!r}")
        done(result, error)

    def close(self) -> None:
        """Calls still running end with their channels (and connections)."""
        self._threads.shutdown(wait=False)
        self.watch.close()
        self.streams.close()
