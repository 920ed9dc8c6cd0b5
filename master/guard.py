"""What every RPC handler of the master shares: the leader check, error mapping, the caller.

``guarded`` wraps a servicer method: it first asks :class:`Leadership` (the ONE place where the
"Master HA" issue will raise NotLeader on a standby), maps a TubeqError to its gRPC status with
``abort_with``, and turns any unexpected exception into INTERNAL after logging it, so a bug in
one request never takes the server down.
"""
from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import grpc

from lib.errors import TubeqError
from lib.logs import event
from lib.wire_errors import abort_with

log = logging.getLogger(__name__)
PRINCIPAL_KEY = "tubeq-principal"
MAX_PRINCIPAL_LEN = 256


class Leadership:
    """Single-node for now: this master always leads. Issue 4 raises NotLeader here."""

    def is_leader(self) -> bool:
        return True

    def check(self) -> None:
        """Raise NotLeader (naming the leader) when this master is a standby."""


def guarded(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def handler(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            self.leadership.check()
            return method(self, request, context)
        except TubeqError as err:
            abort_with(context, err)
        except Exception as exc:  # noqa: BLE001 - one bad request must not kill the server
            log.exception("master.internal_error",
                          extra={"fields": {"method": method.__name__}})
            context.abort(grpc.StatusCode.INTERNAL,
                          f"internal error in {method.__name__}: {type(exc).__name__}")
    return handler


def caller(context: grpc.ServicerContext) -> dict[str, str]:
    """Who asks (metadata ``tubeq-principal``, else "anonymous") and from where, for audit."""
    principal = "anonymous"
    for key, value in context.invocation_metadata() or ():
        if key == PRINCIPAL_KEY and isinstance(value, str) and value.strip():
            principal = value.strip()[:MAX_PRINCIPAL_LEN]
    return {"principal": principal, "peer": context.peer() or ""}


def audited(action: str, **fields: Any) -> None:
    event(log, "master.admin", action=action, **fields)
