"""The ``tubeq.broker.Broker`` gRPC servicer: thin wrappers over the handler planes.

Every handler runs under :func:`_guarded`: a TubeqError becomes its gRPC status and detail code
(lib.wire_errors); any other exception is logged with its traceback and returned as INTERNAL.
Either way the server keeps serving. Names are checked here, once, before any lookup.
"""
from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from broker.data import DataPlane
from broker.metrics import BrokerMetrics
from broker.offsets import OffsetsPlane
from broker.push import PushPlane
from lib.errors import TubeqError
from lib.names import check_name
from lib.proto import broker_pb2 as pb
from lib.proto import broker_pb2_grpc
from lib.wire_errors import abort_with

log = logging.getLogger(__name__)


def _fail(metrics: BrokerMetrics, method: str, context: grpc.ServicerContext,
          exc: Exception) -> None:
    if isinstance(exc, TubeqError):
        metrics.errors.labels(method, exc.code).inc()
        abort_with(context, exc)
    metrics.errors.labels(method, "INTERNAL").inc()
    log.error("request.internal_error", exc_info=exc,
              extra={"fields": {"method": method, "error": repr(exc)}})
    context.abort(grpc.StatusCode.INTERNAL, f"internal broker error in {method}: {exc!r}")


def _guarded(method: Callable[..., Any]) -> Callable[..., Any]:
    name = method.__name__

    @functools.wraps(method)
    def unary(self: BrokerService, request: Any, context: grpc.ServicerContext) -> Any:
        started = time.perf_counter()
        try:
            return method(self, request, context)
        except Exception as exc:  # noqa: BLE001 - mapped, logged, never kills the server
            _fail(self.metrics, name, context, exc)
        finally:
            self.metrics.latency.labels(name).observe(time.perf_counter() - started)

    return unary


class BrokerService(broker_pb2_grpc.BrokerServicer):
    def __init__(self, data: DataPlane, offsets: OffsetsPlane, push: PushPlane,
                 metrics: BrokerMetrics) -> None:
        self.data = data
        self.offsets = offsets
        self.push = push
        self.metrics = metrics

    @_guarded
    def Produce(self, request: pb.ProduceRequest, context: grpc.ServicerContext):  # noqa: N802
        check_name(request.topic)
        return self.data.produce(request)

    @_guarded
    def Fetch(self, request: pb.FetchRequest, context: grpc.ServicerContext):  # noqa: N802
        check_name(request.topic)
        return self.data.fetch(request, context.is_active)

    @_guarded
    def ListOffsets(self, request: pb.ListOffsetsRequest, context):  # noqa: N802
        check_name(request.topic)
        return self.data.list_offsets(request)

    @_guarded
    def QueryMessages(self, request: pb.QueryMessagesRequest, context):  # noqa: N802
        check_name(request.topic)
        return self.data.query(request)

    @_guarded
    def CommitOffsets(self, request: pb.CommitOffsetsRequest, context):  # noqa: N802
        check_name(request.topic)
        return self.offsets.commit(request)

    @_guarded
    def FetchOffsets(self, request: pb.FetchOffsetsRequest, context):  # noqa: N802
        check_name(request.topic)
        return self.offsets.fetch(request)

    @_guarded
    def ResetOffsets(self, request: pb.ResetOffsetsRequest, context):  # noqa: N802
        check_name(request.topic)
        return self.offsets.reset(request)

    def Subscribe(self, request_iterator: Iterator[pb.SubscribeRequest],  # noqa: N802
                  context: grpc.ServicerContext) -> Iterator[pb.SubscribeResponse]:
        try:
            yield from self.push.subscribe(request_iterator, context.add_callback)
        except Exception as exc:  # noqa: BLE001 - mapped, logged, never kills the server
            _fail(self.metrics, "Subscribe", context, exc)
