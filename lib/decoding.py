"""Undecodable requests get INVALID_ARGUMENT naming the method, not grpc's own answer.

Left to itself, grpc answers bytes that do not parse as the request message with INTERNAL
"Exception deserializing request!" (synchronous server) or UNKNOWN (asyncio server): statuses
that say "server bug" and name nothing. These interceptors give every handler a deserializer
that cannot raise (a request that does not parse becomes an :class:`_Undecodable`) and refuse
it before any other code sees it. They go first in a server's interceptor list, so the auth
interceptor and the handlers only ever see parsed requests.
"""
from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

import grpc

from lib.errors import InvalidArgument
from lib.wire_errors import abort_with, abort_with_async

MAX_REASON = 200  # characters of the parser's complaint kept in the error


class _Undecodable:
    __slots__ = ("error",)

    def __init__(self, error: InvalidArgument) -> None:
        self.error = error


def _lenient(deserializer: Callable[[bytes], Any] | None, method: str
             ) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def parse(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except Exception as exc:  # noqa: BLE001 - whatever the parser says, the bytes are bad
            reason = str(exc)[:MAX_REASON]
            return _Undecodable(InvalidArgument(
                f"malformed request to {method[:200]}: {len(raw)} bytes that are not its "
                f"request message ({reason})"))
    return parse


def _checked(requests: Iterator[Any]) -> Iterator[Any]:
    for request in requests:
        if isinstance(request, _Undecodable):
            raise request.error
        yield request


async def _checked_async(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for request in requests:
        if isinstance(request, _Undecodable):
            raise request.error
        yield request


_KINDS = (("unary_unary", grpc.unary_unary_rpc_method_handler, False),
          ("unary_stream", grpc.unary_stream_rpc_method_handler, False),
          ("stream_unary", grpc.stream_unary_rpc_method_handler, True),
          ("stream_stream", grpc.stream_stream_rpc_method_handler, True))


def _rebuilt(handler: Any, method: str, wrap: Callable[[Any, bool], Any],
             deserializer: Callable[[bytes], Any] | None = None,
             serializer: Callable[[Any], bytes] | None = None) -> Any:
    for kind, factory, request_streams in _KINDS:
        behaviour = getattr(handler, kind)
        if behaviour is not None:
            return factory(wrap(behaviour, request_streams),
                           request_deserializer=_lenient(
                               deserializer or handler.request_deserializer, method),
                           response_serializer=serializer or handler.response_serializer)
    return handler


class StrictDecoding(grpc.ServerInterceptor):
    """For a synchronous server (the master)."""

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        return _rebuilt(handler, handler_call_details.method, self._wrap)

    @staticmethod
    def _wrap(behaviour: Callable[..., Any], request_streams: bool) -> Callable[..., Any]:
        def run(request: Any, context: grpc.ServicerContext) -> Any:
            if request_streams:
                return behaviour(_checked(request), context)
            if isinstance(request, _Undecodable):
                abort_with(context, request.error)
            return behaviour(request, context)
        return run


class AioStrictDecoding(grpc.aio.ServerInterceptor):
    """For an asyncio server (the broker). A stream of requests is checked as it is read: the
    handler gets the InvalidArgument from its iterator and answers it as any error of its own.
    ``deserializers``: a method's own request reader in place of its protobuf message (one
    that raises on bytes the message would not parse: lib/produce_wire.py); ``serializers``:
    a method's own response writer (an answer built by hand: lib/wire.py's ``Spliced``)."""

    def __init__(self, deserializers: Mapping[str, Callable[[bytes], Any]] | None = None,
                 serializers: Mapping[str, Callable[[Any], bytes]] | None = None) -> None:
        self._deserializers = dict(deserializers or {})
        self._serializers = dict(serializers or {})

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        return _rebuilt(handler, method, self._wrap, self._deserializers.get(method),
                        self._serializers.get(method))

    @staticmethod
    def _wrap(behaviour: Callable[..., Any], request_streams: bool) -> Callable[..., Any]:
        if inspect.isasyncgenfunction(behaviour):
            async def stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
                if request_streams:
                    request = _checked_async(request)
                elif isinstance(request, _Undecodable):
                    await abort_with_async(context, request.error)
                async for response in behaviour(request, context):
                    yield response
            return stream

        async def run(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if request_streams:
                request = _checked_async(request)
            elif isinstance(request, _Undecodable):
                await abort_with_async(context, request.error)
            return await behaviour(request, context)
        return run
