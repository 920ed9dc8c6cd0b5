"""Errors as the portal answers them: tubeq errors keep their code and message, with the HTTP
status their gRPC status maps to; the JSON API answers ``{"error": {...}}``, pages a banner."""
from __future__ import annotations

import grpc

from lib.errors import TubeqError
from lib.wire_errors import status_of

_HTTP = {
    grpc.StatusCode.INVALID_ARGUMENT: 400, grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401, grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404, grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.FAILED_PRECONDITION: 409, grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNAVAILABLE: 503, grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}


class PortalError(Exception):
    """An error of the portal's own (bad form input, missing CSRF token, ...)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def http_status(err: TubeqError) -> int:
    return _HTTP.get(status_of(err), 500)


def as_json(status: int, code: str, message: str) -> dict:
    return {"error": {"status": status, "code": code, "message": message}}


def describe(exc: Exception) -> tuple[int, str, str]:
    """(HTTP status, code, message) of an exception a view raised."""
    if isinstance(exc, PortalError):
        return exc.status, exc.code, exc.message
    if isinstance(exc, TubeqError):
        return http_status(exc), exc.code, exc.message
    return 500, "INTERNAL", "internal portal error (see the portal's log)"
