"""The ``tubeq.broker.Broker`` gRPC servicer: thin async wrappers over the handler planes.

Threading model: every handler is a coroutine on the broker's event loop (broker/server.py),
so a call that only *waits* (a long-poll Fetch, a push stream without data or credit) parks a
future and holds no thread. A produce whose append cannot wait (an ``async`` topic with room
in its cache block) runs on the loop, sparing two thread hand-offs per batch; work that may
block (the other appends: a ``sync`` topic waits for the fsync, a full cache for the flusher;
store reads far from the tail; LMDB offset commits; list offsets and queries) goes to the
bounded executor (``grpc_workers`` threads) through
:meth:`BrokerService.run`, so the loop itself never blocks on I/O or on a store lock held for
long.

Every handler runs under :func:`_guarded`: a TubeqError becomes its gRPC status and detail code
(lib.wire_errors); any other exception is logged with its traceback and returned as INTERNAL.
Either way the server keeps serving. Names are checked here, once, before any lookup.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

import grpc

from broker.data import DataPlane, WouldBlock
from broker.delayed_produce import check_delayed
from broker.metrics import BrokerMetrics
from broker.offsets import OffsetsPlane
from broker.push import PushPlane
from broker.replication import ReplicaLeader
from broker.sinks import SinkPlane
from broker.txn_markers import sync_txn, write_markers
from lib.auth.access import Access, current_access
from lib.auth.quotas import QuotaBook
from lib.delay import DELAY_TOPIC
from lib.errors import TubeqError
from lib.names import check_name
from lib.produce_wire import ProduceView
from lib.proto import broker_pb2 as pb
from lib.proto import broker_pb2_grpc
from lib.records import BatchView
from lib.wire_errors import MAX_MESSAGE_CHARS, abort_with_async, clip, entry_error

log = logging.getLogger(__name__)
R = TypeVar("R")


async def _fail(metrics: BrokerMetrics, method: str, context: grpc.aio.ServicerContext,
                exc: Exception) -> None:
    """End the call with the status of ``exc`` (raises, as ``context.abort`` does)."""
    if isinstance(exc, TubeqError):
        metrics.errors.labels(method, exc.code).inc()
        await abort_with_async(context, exc)
    metrics.errors.labels(method, "INTERNAL").inc()
    log.error("request.internal_error", exc_info=exc,
              extra={"fields": {"method": method, "error": repr(exc)}})
    await context.abort(grpc.StatusCode.INTERNAL,
                        clip(f"internal broker error in {method}: {exc!r}", MAX_MESSAGE_CHARS))


def _guarded(method: Callable[..., Any]) -> Callable[..., Any]:
    name = method.__name__

    @functools.wraps(method)
    async def unary(self: BrokerService, request: Any, context: grpc.aio.ServicerContext) -> Any:
        started = time.perf_counter()
        try:
            return await method(self, request, context)
        except Exception as exc:  # noqa: BLE001 - mapped, logged, never kills the server
            await _fail(self.metrics, name, context, exc)
        finally:
            self.metrics.took(name, time.perf_counter() - started)

    return unary


def _in_executor(rpc: str, plane: str, method: str,
                 charged: Callable[[Any, Any], tuple[str, int]] | None = None,
                 then: Callable[..., Awaitable[None]] | None = None) -> Callable[..., Any]:
    """The handler of unary ``rpc``: check the topic name, run ``self.<plane>.<method>`` in
    the executor, under :func:`_guarded`. ``charged(request, response)``: (direction, bytes)
    the call costs the caller's quota; its clients know no throttle field, so the broker
    paces them itself, as it paces push streams: the answer waits out the throttle.
    ``then(self, request, context)`` is awaited before the answer."""
    async def handler(self: BrokerService, request: Any, context: grpc.aio.ServicerContext
                      ) -> Any:
        check_name(request.topic)
        quotas = self.quotas
        metered = charged is not None and quotas.active
        if metered:
            principal = current_access.get().quota_principal
            quotas.admit(charged(request, None)[0], principal)
        response = await self.run(getattr(getattr(self, plane), method), request)
        if then is not None:
            await then(self, request, context)
        if metered:
            direction, size = charged(request, response)
            wait_ms = quotas.charge(direction, principal, "", size)
            remaining = context.time_remaining()  # answer before the caller gives up
            if remaining is not None:
                wait_ms = min(wait_ms, max(0, int((remaining - 0.2) * 1000)))
            if wait_ms:
                await asyncio.sleep(wait_ms / 1000)
        return response

    handler.__name__ = handler.__qualname__ = rpc
    return _guarded(handler)


_NOT_RUN = TubeqError("not run")  # placeholder; every entry gets its own outcome


def _entry_result(outcome: pb.ProduceResponse | TubeqError) -> pb.ProduceEntryResult:
    if isinstance(outcome, TubeqError):
        code, message, details = entry_error(outcome)
        return pb.ProduceEntryResult(error_code=code, error_message=message,
                                     error_details=details)
    return pb.ProduceEntryResult(base_offset=outcome.base_offset,
                                 last_offset=outcome.last_offset)


def _may_produce() -> Callable[[str], None]:
    """The caller's produce check, taken on the loop (the executor thread that runs the work
    does not see the call's context)."""
    access = current_access.get()
    return lambda topic: access.check("produce", "topic", topic)


ACKS_ALL_WAIT_S = 30.0  # the longest an acks=all produce waits for the ISR (else its deadline)


def _wait_budget(context: grpc.aio.ServicerContext) -> float:
    """How long a call may wait for its ISR: its deadline (less 50 ms), at most 30 s."""
    left = context.time_remaining()
    return ACKS_ALL_WAIT_S if left is None else max(0.0, min(left - 0.05, ACKS_ALL_WAIT_S))


async def _offsets_replicated(self: BrokerService, request: Any, context) -> None:
    """A commit (or reset) of a replicated partition is answered once its ISR holds it."""
    await self.replication.offsets_replicated(
        request.topic, [oc.partition for oc in request.offsets], _wait_budget(context))


class BrokerService(broker_pb2_grpc.BrokerServicer):
    def __init__(self, data: DataPlane, offsets: OffsetsPlane, push: PushPlane,
                 metrics: BrokerMetrics, executor: Executor, sinks: SinkPlane,
                 replication: ReplicaLeader, quotas: QuotaBook | None = None) -> None:
        self.quotas = quotas or QuotaBook()
        self.replication = replication
        self.data = data
        self.sinks = sinks
        self.offsets = offsets
        self.push = push
        self.metrics = metrics
        self.executor = executor
        self.client_stream_port = 0  # named in produce and fetch answers once it listens

    async def run(self, fn: Callable[..., R], *args: Any) -> R:
        """``fn(*args)`` in the executor: for anything that may block the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    # Unary calls whose work may block: the topic name is checked, the plane's method runs in
    # the executor. Produce runs on the loop when it cannot block; Fetch waits on the loop
    # (its reads near the tail run inline).
    ListOffsets = _in_executor("ListOffsets", "data", "list_offsets")
    QueryMessages = _in_executor("QueryMessages", "data", "query", lambda request, response: (
        "consume", len(response.frames) if response is not None else 0))
    FindByKey = _in_executor("FindByKey", "data", "find_by_key", lambda request, response: (
        "consume", len(response.frames) if response is not None else 0))
    CommitOffsets = _in_executor("CommitOffsets", "offsets", "commit",
                                 then=_offsets_replicated)
    FetchOffsets = _in_executor("FetchOffsets", "offsets", "fetch")
    ResetOffsets = _in_executor("ResetOffsets", "offsets", "reset", then=_offsets_replicated)
    SinkStage = _in_executor("SinkStage", "sinks", "stage", lambda request, response: (
        "produce", len(request.batch)))

    @_guarded
    async def Produce(self, request: ProduceView, context):  # noqa: N802
        """On the loop when the append cannot wait (async topic, room in the cache): no thread
        hop; else in the executor, with the batch already checked."""
        check_name(request.topic)
        quotas = self.quotas
        metered = quotas.active  # once: quotas may arrive while the call runs
        if metered:
            principal = current_access.get().quota_principal
            quotas.admit("produce", principal)
        view = self._admit(request, current_access.get())
        try:
            response = self.data.produce(request, wait=False, view=view)
        except WouldBlock as later:
            response = await self.run(self.data.produce, request, True, later.view)
        if request.acks_all:
            await self.replication.replicated(request.topic, request.partition,
                                              response.last_offset + 1, _wait_budget(context))
        if metered:
            response.throttle_ms = quotas.charge("produce", principal, "", len(request.batch))
        response.stream_port = self.client_stream_port  # broker/client_stream.py
        return response

    def _admit(self, request: ProduceView, access: Access) -> BatchView | None:
        """What a produce checks before its append: an acks=all ISR, and the delay topic's
        records' targets (the access rule leaves those to this); the batch when parsed."""
        if request.acks_all:
            self.replication.check_acks_all(request.topic, request.partition)
        if request.topic != DELAY_TOPIC:
            return None
        view = self.data.topics.store_for(request.topic, request.partition).parse(
            request.batch)
        check_delayed(view, access, self.data.topics.topic(request.topic).spec.retention_ms)
        return view

    @_guarded
    async def ProduceMany(self, request: list[ProduceView], context):  # noqa: N802
        """Each entry as a Produce of its own, answered on its own: appended on the loop in
        order until one would wait, that one and every later one in one executor hop (so a
        partition's entries keep their order), then the acks=all waits side by side."""
        quotas, access = self.quotas, current_access.get()
        metered = quotas.active
        if metered:
            quotas.admit("produce", access.quota_principal)
        outcomes: list[pb.ProduceResponse | TubeqError] = [_NOT_RUN] * len(request)
        waiting: list[tuple[int, BatchView | None]] = []
        with self.data.topics.wakes_deferred():  # the entries' flushers woken together
            for i, entry in enumerate(request):
                try:
                    check_name(entry.topic)
                    if entry.topic != DELAY_TOPIC:  # whose records' targets _admit checks
                        access.check("produce", "topic", entry.topic)
                    view = self._admit(entry, access)
                    if waiting:
                        waiting.append((i, view))
                    else:
                        outcomes[i] = self.data.produce(entry, wait=False, view=view)
                except WouldBlock as later:
                    waiting.append((i, later.view))
                except Exception as exc:  # noqa: BLE001 - the entry's answer, never the call's
                    outcomes[i] = self._entry_failed(exc)
        if waiting:
            await self.run(self._append_waiting, request, waiting, outcomes)
        acks_all = [i for i, entry in enumerate(request)
                    if entry.acks_all and isinstance(outcomes[i], pb.ProduceResponse)]
        if acks_all:
            budget = _wait_budget(context)
            waits = await asyncio.gather(*(self.replication.replicated(
                request[i].topic, request[i].partition, outcomes[i].last_offset + 1, budget)
                for i in acks_all), return_exceptions=True)
            for i, failed in zip(acks_all, waits, strict=True):
                if failed is not None:
                    outcomes[i] = self._entry_failed(failed)
        response = pb.ProduceManyResponse(results=map(_entry_result, outcomes),
                                          stream_port=self.client_stream_port)
        if metered:
            response.throttle_ms = quotas.charge("produce", access.quota_principal, "",
                                                 sum(len(entry.batch) for entry in request))
        return response

    def _append_waiting(self, request: list[ProduceView],
                        waiting: list[tuple[int, BatchView | None]],
                        outcomes: list[pb.ProduceResponse | TubeqError]) -> None:
        for i, view in waiting:
            try:
                outcomes[i] = self.data.produce(request[i], True, view)
            except Exception as exc:  # noqa: BLE001 - the entry's answer, never the call's
                outcomes[i] = self._entry_failed(exc)

    def _entry_failed(self, exc: BaseException) -> TubeqError:
        """A ProduceMany entry's error, counted (and logged when it is a bug) as a call's."""
        if isinstance(exc, TubeqError):
            self.metrics.errors.labels("ProduceMany", exc.code).inc()
            return exc
        self.metrics.errors.labels("ProduceMany", "INTERNAL").inc()
        log.error("request.internal_error", exc_info=exc,
                  extra={"fields": {"method": "ProduceMany", "error": repr(exc)}})
        return TubeqError(clip(f"internal broker error in ProduceMany: {exc!r}",
                               MAX_MESSAGE_CHARS))

    @_guarded
    async def SinkCommit(self, request: pb.SinkCommitRequest, context):  # noqa: N802
        """Answered once every in-sync replica holds the appended records and the sink's
        marks (broker/sinks.py), as an acks=all produce and an offset commit are."""
        response, marks = await self.run(self.sinks.commit, request, _may_produce())
        budget = _wait_budget(context)
        for (topic, partition), mark in sorted(marks.items()):
            await self.replication.replicated(topic, partition, mark.end_offset, budget)
        for topic in sorted({t for t, _ in marks}):
            await self.replication.offsets_replicated(
                topic, [p for t, p in marks if t == topic], budget)
        return response

    @_guarded
    async def SinkAbort(self, request: pb.SinkAbortRequest, context):  # noqa: N802
        return await self.run(self.sinks.abort, request, _may_produce())

    @_guarded
    async def ReplicaFetch(self, request: pb.ReplicaFetchRequest, context):  # noqa: N802
        """A follower copying this leader (cluster credential only, lib/auth/rules.py)."""
        return await self.replication.fetch(request, self.run)

    @_guarded
    async def WriteTxnMarkers(self, request: pb.WriteTxnMarkersRequest,  # noqa: N802
                              context):
        """The coordinator's markers (cluster credential only): answered once each is
        fsynced and, on a replicated partition, held by every in-sync replica."""
        response, written = await self.run(write_markers, self.data.topics, self.offsets,
                                           request)
        budget = _wait_budget(context)
        for topic, partition, offset in written:
            await self.replication.replicated(topic, partition, offset + 1, budget)
        if request.commit and request.offsets:
            done = {(r.topic, r.partition) for r in response.results
                    if r.group and not r.error_code}
            for topic in sorted({t for t, _ in done}):
                await self.replication.offsets_replicated(
                    topic, [p for t, p in done if t == topic], budget)
        return response

    @_guarded
    async def SyncTxn(self, request: pb.SyncTxnRequest, context):  # noqa: N802
        check_name(request.topic)
        return await self.run(sync_txn, self.data.topics, request)

    @_guarded
    async def Fetch(self, request: pb.FetchRequest, context):  # noqa: N802
        check_name(request.topic)
        quotas = self.quotas
        metered = quotas.active
        if metered:
            principal = current_access.get().quota_principal
            quotas.admit("consume", principal, request.group)
        response = await self.data.fetch(request, self.run)
        response.head.stream_port = self.client_stream_port  # broker/client_stream.py
        if metered:
            response.head.throttle_ms = quotas.charge(
                "consume", principal, request.group,
                sum(len(frames) for _, frames in response.entries))
        return response

    async def Subscribe(self, request_iterator: AsyncIterator[pb.SubscribeRequest],  # noqa: N802
                        context: grpc.aio.ServicerContext
                        ) -> AsyncIterator[pb.SubscribeResponse]:
        try:
            async for response in self.push.subscribe(request_iterator, self.run):
                yield response
        except Exception as exc:  # noqa: BLE001 - mapped, logged, never kills the server
            await _fail(self.metrics, "Subscribe", context, exc)
