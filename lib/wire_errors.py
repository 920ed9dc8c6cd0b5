"""One table between exceptions and gRPC: status code + ``tubeq-error-code`` detail, both ways.

Servers call :func:`abort_with` for a TubeqError; clients call :func:`from_rpc_error` on a
``grpc.RpcError`` and get the same exception class back, with its details. Details travel as
JSON in trailing metadata: nothing from the network is ever unpickled or evaluated.
"""
from __future__ import annotations

import json
from typing import Any

import grpc

from lib import errors as e

CODE_KEY = "tubeq-error-code"
DETAILS_KEY = "tubeq-error-details"
# What an error may echo of its input on the wire: gRPC caps metadata (status message and
# trailers) at 8 KiB by default, and an overlong echo turned a clear error into
# RESOURCE_EXHAUSTED "Stream removed".
MAX_MESSAGE_CHARS = 1024
MAX_DETAIL_CHARS = 256

# error class -> gRPC status. Subclasses are listed before their bases.
_STATUS: dict[type[e.TubeqError], grpc.StatusCode] = {
    e.InvalidName: grpc.StatusCode.INVALID_ARGUMENT,
    e.RecordTooLarge: grpc.StatusCode.INVALID_ARGUMENT,
    e.BatchTooLarge: grpc.StatusCode.INVALID_ARGUMENT,
    e.InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    e.CorruptRecord: grpc.StatusCode.DATA_LOSS,
    e.OffsetOutOfRange: grpc.StatusCode.OUT_OF_RANGE,
    e.UnknownPartition: grpc.StatusCode.NOT_FOUND,
    e.StoreClosed: grpc.StatusCode.UNAVAILABLE,
    e.ConfigError: grpc.StatusCode.FAILED_PRECONDITION,
    e.DiskFull: grpc.StatusCode.RESOURCE_EXHAUSTED,
    e.StorageError: grpc.StatusCode.INTERNAL,
    e.Unavailable: grpc.StatusCode.UNAVAILABLE,
    e.RequestTimedOut: grpc.StatusCode.DEADLINE_EXCEEDED,
    e.NotEnoughReplicasAfterAppend: grpc.StatusCode.UNAVAILABLE,
    e.NotEnoughReplicas: grpc.StatusCode.UNAVAILABLE,
    e.UnknownTopic: grpc.StatusCode.NOT_FOUND,
    e.UnknownBroker: grpc.StatusCode.NOT_FOUND,
    e.TopicExists: grpc.StatusCode.ALREADY_EXISTS,
    e.PrincipalExists: grpc.StatusCode.ALREADY_EXISTS,
    e.UnknownPrincipal: grpc.StatusCode.NOT_FOUND,
    e.Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    e.PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    e.PartitionNotHosted: grpc.StatusCode.NOT_FOUND,
    e.NotLeader: grpc.StatusCode.UNAVAILABLE,
    e.NotEnoughBrokers: grpc.StatusCode.UNAVAILABLE,
    e.UnknownMember: grpc.StatusCode.FAILED_PRECONDITION,
    e.Fenced: grpc.StatusCode.FAILED_PRECONDITION,
    e.GroupNotEmpty: grpc.StatusCode.FAILED_PRECONDITION,
    e.InstanceInUse: grpc.StatusCode.FAILED_PRECONDITION,
    e.GroupModeConflict: grpc.StatusCode.FAILED_PRECONDITION,
    e.ProducerFenced: grpc.StatusCode.FAILED_PRECONDITION,
    e.OutOfOrderSequence: grpc.StatusCode.FAILED_PRECONDITION,
    e.ConcurrentTransactions: grpc.StatusCode.ABORTED,
    e.UnstableOffsetCommit: grpc.StatusCode.ABORTED,
    e.TxnRecordsLost: grpc.StatusCode.FAILED_PRECONDITION,
    e.InvalidTxnState: grpc.StatusCode.FAILED_PRECONDITION,
    e.UnknownTransactionalId: grpc.StatusCode.NOT_FOUND,
    e.SinkStagingLost: grpc.StatusCode.FAILED_PRECONDITION,
    e.SinkStagingFull: grpc.StatusCode.RESOURCE_EXHAUSTED,
    e.QuotaExceeded: grpc.StatusCode.RESOURCE_EXHAUSTED,
}


def _all_error_classes() -> list[type[e.TubeqError]]:
    found, todo = [], [e.TubeqError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def error_class(code: str) -> type[e.TubeqError]:
    """The exception class for a detail code (TubeqError for an unknown one)."""
    for cls in _all_error_classes():
        if cls.code == code:
            return cls
    return e.TubeqError


def status_of(err: e.TubeqError) -> grpc.StatusCode:
    for cls in type(err).__mro__:
        if cls in _STATUS:
            return _STATUS[cls]
    return grpc.StatusCode.UNKNOWN


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more characters]"


def _jsonable(details: dict[str, Any]) -> dict[str, Any]:
    return {str(k)[:MAX_DETAIL_CHARS]: clip(v, MAX_DETAIL_CHARS) if isinstance(v, str) else v
            for k, v in details.items()
            if isinstance(v, (str, int, float, bool, type(None)))}


def trailers_of(err: e.TubeqError) -> tuple[tuple[str, str], ...]:
    return ((CODE_KEY, err.code), (DETAILS_KEY, json.dumps(_jsonable(err.details))))


def entry_error(err: e.TubeqError) -> tuple[str, str, str]:
    """(code, message, details as JSON) of ``err`` for an answer that carries one error per
    entry (``ProduceEntryResult``): the same fields a failed call's trailers carry."""
    return err.code, clip(err.message, MAX_MESSAGE_CHARS), json.dumps(_jsonable(err.details))


def error_of(code: str, message: str, details_json: str) -> e.TubeqError:
    """The exception an error's code, message and JSON details stand for (details that are
    not a JSON object are dropped: nothing from the network is trusted further)."""
    try:
        details = json.loads(details_json or "{}")
    except ValueError:
        details = {}
    if not isinstance(details, dict):
        details = {}
    try:
        return error_class(code)(message, **details)
    except TypeError:  # details naming a keyword the class takes itself
        return error_class(code)(message)


def wire_form(err: e.TubeqError) -> tuple[tuple[tuple[str, str], ...], grpc.StatusCode, str]:
    """(trailing metadata, status, message) that carry ``err``: what every server, sync or
    asyncio, sends for it."""
    return trailers_of(err), status_of(err), clip(err.message, MAX_MESSAGE_CHARS)


def abort_with(context: grpc.ServicerContext, err: e.TubeqError) -> None:
    """End the RPC with the status, code and details of ``err`` (raises, as context.abort does)."""
    trailers, status, message = wire_form(err)
    context.set_trailing_metadata(trailers)
    context.abort(status, message)


async def abort_with_async(context: grpc.aio.ServicerContext, err: e.TubeqError) -> None:
    """:func:`abort_with` for an asyncio server."""
    trailers, status, message = wire_form(err)
    context.set_trailing_metadata(trailers)
    await context.abort(status, message)


def from_rpc_error(rpc_error: grpc.RpcError) -> e.TubeqError:
    """Rebuild the server's exception from a failed call (transport errors become retriable)."""
    trailers = dict(rpc_error.trailing_metadata() or ())  # type: ignore[attr-defined]
    code = trailers.get(CODE_KEY)
    message = rpc_error.details() or str(rpc_error.code())  # type: ignore[attr-defined]
    if code is None:
        return _transport_error(rpc_error.code(), message)  # type: ignore[attr-defined]
    return error_of(code, message, trailers.get(DETAILS_KEY, "{}"))


_TLS_FAILURES = ("handshake", "WRONG_VERSION_NUMBER", "CERTIFICATE_VERIFY_FAILED",
                 "certificate verify failed", "SSL_ERROR")


def tls_hint(message: str) -> str:
    """What a connection failure that smells of TLS most likely means (gRPC only says
    'Socket closed' when a plaintext client meets a TLS port)."""
    if any(s in message for s in _TLS_FAILURES):
        return (" (TLS handshake failed: the server may not use TLS, its certificate may not "
                "chain to the CA given with --tls-ca / TUBEQ_TLS_CA, or it requires a client "
                "certificate: --tls-cert and --tls-key)")
    if "Socket closed" in message or "Connection reset" in message:
        return (" (the server closed the connection: if it uses TLS, give its CA with "
                "--tls-ca / TUBEQ_TLS_CA)")
    return ""


def _transport_error(status: grpc.StatusCode, message: str) -> e.TubeqError:
    """An error raised by gRPC itself (no tubeq code): only transport trouble is retriable."""
    text = f"{status.name}: {message}"
    if status == grpc.StatusCode.DEADLINE_EXCEEDED:
        return e.RequestTimedOut(text)
    if status in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
        return e.Unavailable(text + tls_hint(message))
    if status == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return e.InvalidArgument(f"request too large for the gRPC channel: {text}")
    return e.TubeqError(text)
