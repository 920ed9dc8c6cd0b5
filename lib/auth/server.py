"""Server side of authentication: one gRPC interceptor per process decides who is calling.

Every call but the public ones (a login, health checks, master status) must carry
``authorization: Bearer <token>`` (a client that logged in) or ``authorization: Cluster
<secret>`` (a broker or master: the cluster secret that ``cluster up`` makes, which no client
holds). The interceptor checks it before the handler runs, with no call to anything (tokens
are verified against the keyring held in memory), and refuses the call with UNAUTHENTICATED
naming what is wrong; a handler finds the caller in :data:`current_identity`. Methods only
brokers may call refuse every client identity with PERMISSION_DENIED.

With ``auth = "none"`` (an explicit setting, logged loudly at start) every call passes, as
``anonymous``.
"""
from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass

import grpc

from lib.auth.client import AUTH_HEADER
from lib.auth.tokens import verify
from lib.errors import PermissionDenied, TubeqError, Unauthenticated
from lib.wire_errors import abort_with

log = logging.getLogger(__name__)
AUTH_MODES = ("token", "none")
PUBLIC_METHODS = frozenset({
    "/tubeq.security.Security/Login",
    "/tubeq.admin.Admin/MasterStatus",
    "/grpc.health.v1.Health/Check",
    "/grpc.health.v1.Health/Watch",
})
CLUSTER = "cluster"
CLUSTER_SECRET_ENV = "TUBEQ_CLUSTER_SECRET"


@dataclass(frozen=True)
class Identity:
    principal: str
    roles: tuple[str, ...]
    kind: str  # user, apikey, cluster, or anonymous (auth = "none", public methods)


ANONYMOUS = Identity("anonymous", (), "anonymous")
current_identity: ContextVar[Identity] = ContextVar("tubeq_identity", default=ANONYMOUS)


class Authenticator:
    """Turns an ``authorization`` header into an Identity, or raises Unauthenticated."""

    def __init__(self, keyring: Callable[[], Mapping[str, bytes]], cluster_secret: str) -> None:
        self.keyring = keyring
        self._secret = cluster_secret.encode()

    def identify(self, header: str) -> Identity:
        if not header:
            raise Unauthenticated("no credentials: log in with a user and password or an API "
                                  "key (TUBEQ_USER + TUBEQ_PASSWORD, or TUBEQ_API_KEY)")
        scheme, _, value = header.partition(" ")
        if scheme == "Bearer":
            claims = verify(value, self.keyring())
            return Identity(claims.subject, claims.roles, claims.kind)
        if scheme == "Cluster":
            if self._secret and hmac.compare_digest(value.encode(), self._secret):
                return Identity(CLUSTER, (), CLUSTER)
            raise Unauthenticated("wrong cluster credential")
        raise Unauthenticated("unsupported authorization scheme (expected Bearer <token>)")


def cluster_header(secret: str) -> tuple[tuple[str, str], ...]:
    """Metadata a broker or master presents to its peers."""
    return ((AUTH_HEADER, f"Cluster {secret}"),) if secret else ()


class ServerAuth(grpc.ServerInterceptor):
    """The interceptor of a synchronous gRPC server (the master)."""

    def __init__(self, authenticator: Authenticator | None, cluster_only: Iterable[str] = (),
                 public: frozenset[str] = PUBLIC_METHODS) -> None:
        self.authenticator = authenticator  # None: auth = "none"
        self.cluster_only = frozenset(cluster_only)
        self.public = public

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        if self.authenticator is None or method in self.public:
            return _serving_as(handler, ANONYMOUS)
        header = next((v for k, v in handler_call_details.invocation_metadata or ()
                       if k == AUTH_HEADER), "")
        try:
            identity = self.authenticator.identify(header if isinstance(header, str) else "")
            if method in self.cluster_only and identity.kind != CLUSTER:
                raise PermissionDenied(f"{method.rsplit('/', 1)[-1]} is for brokers only")
        except TubeqError as err:
            log.info("auth.refused", extra={"fields": {"method": method, "error": err.message}})
            return _refusing(handler, err)
        return _serving_as(handler, identity)


_KINDS = (("unary_unary", grpc.unary_unary_rpc_method_handler),
          ("unary_stream", grpc.unary_stream_rpc_method_handler),
          ("stream_unary", grpc.stream_unary_rpc_method_handler),
          ("stream_stream", grpc.stream_stream_rpc_method_handler))


def _rebuilt(handler, wrap):
    for kind, factory in _KINDS:
        behaviour = getattr(handler, kind)
        if behaviour is not None:
            return factory(wrap(behaviour), request_deserializer=handler.request_deserializer,
                           response_serializer=handler.response_serializer)
    return handler


def _serving_as(handler, identity: Identity):
    def wrap(behaviour):
        def run(request, context):
            current_identity.set(identity)  # a sync server runs each call on one pool thread
            return behaviour(request, context)
        return run
    return _rebuilt(handler, wrap)


def _refusing(handler, err: TubeqError):
    def wrap(_behaviour):
        def run(request, context):
            abort_with(context, err)
        return run
    return _rebuilt(handler, wrap)
