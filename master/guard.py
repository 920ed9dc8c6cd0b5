"""What every RPC handler of the master shares: the leader check, error mapping, the caller.

``guarded`` wraps a servicer method: it first asks :class:`Leadership` (the ONE place that
raises NotLeader on a standby; ``any_master`` skips it for status calls), maps a TubeqError
to its gRPC status with ``abort_with``, and turns any unexpected exception into INTERNAL
after logging it, so a bug in one request never takes the server down.
"""
from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import grpc

from lib.auth.access import current_access
from lib.errors import NotLeader, TubeqError
from lib.logs import event
from lib.wire_errors import abort_with
from master.raft import RaftLog
from master.state import MetaState

log = logging.getLogger(__name__)
PRINCIPAL_KEY = "tubeq-principal"
MAX_PRINCIPAL_LEN = 256


class Leadership:
    """Whether this master is the active one, and which master is when it is not.

    Active means: Raft says this node leads AND its ``lead`` command (which bumps the epoch)
    has been applied, so every generation and broker term it hands out is new. A standby
    names the leader's gRPC address from the replicated state, but only when that record is
    about the node Raft currently follows; during an election the hint is "" (callers rotate).
    """

    def __init__(self, raft: RaftLog, state: MetaState) -> None:
        self.raft, self.state = raft, state
        self._epoch: int | None = None

    @property
    def epoch(self) -> int | None:
        return self._epoch

    def is_leader(self) -> bool:
        return self._epoch is not None and self.raft.is_leader()

    def activate(self, epoch: int) -> None:
        self._epoch = epoch

    def deactivate(self) -> None:
        self._epoch = None

    def leader_address(self) -> str:
        node = self.raft.leader_node()
        record = self.state.leader()
        if not node or record.get("node") != node:
            return ""
        if node == self.raft.settings.node and not self.is_leader():
            return ""  # elected, not yet serving: do not send callers back here
        return str(record.get("address", ""))

    def check(self) -> None:
        """Raise NotLeader (naming the leader when known) unless this master is active."""
        if not self.is_leader():
            leader = self.leader_address()
            where = f"the active master is {leader}" if leader else \
                "no master is active right now (election in progress)"
            raise NotLeader(f"this master ({self.raft.settings.node}) is a standby: {where}",
                            leader=leader)


def guarded(method: Callable[..., Any], leader_only: bool = True) -> Callable[..., Any]:
    @functools.wraps(method)
    def handler(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            if leader_only:
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
    """Who asks and from where, for audit: the authenticated principal; with auth = "none",
    what metadata ``tubeq-principal`` claims (else "anonymous")."""
    identity = current_access.get().identity
    principal = identity.principal
    if identity.kind == "anonymous":
        for key, value in context.invocation_metadata() or ():
            if key == PRINCIPAL_KEY and isinstance(value, str) and value.strip():
                principal = value.strip()[:MAX_PRINCIPAL_LEN]
    return {"principal": principal, "peer": context.peer() or ""}


def audited(action: str, **fields: Any) -> None:
    event(log, "master.admin", action=action, **fields)


def any_master(method: Callable[..., Any]) -> Callable[..., Any]:
    """Like :func:`guarded`, for calls every master answers (status)."""
    return guarded(method, leader_only=False)
