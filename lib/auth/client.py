"""Client side of authentication: credentials, a token that renews itself, and the channel
interceptor that puts it on every call.

A client logs in once (``Security.Login`` on the active master, with user + password or an API
key) and presents ``authorization: Bearer <token>`` on every call, to masters and brokers
alike. :class:`TokenSource` renews the token when 80% of its lifetime has passed, so a
long-running producer never sees it expire. Credentials come from the caller, or from the
environment (``TUBEQ_USER`` + ``TUBEQ_PASSWORD``, ``TUBEQ_API_KEY`` or ``TUBEQ_TOKEN``), so
the CLI and scripts need no code for it. Secrets never appear in a repr, a log or an error.
"""
from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import grpc

from lib.errors import InvalidArgument

AUTH_HEADER = "authorization"
RENEW_AT = 0.8  # of a token's lifetime


@dataclass(frozen=True)
class Credentials:
    """Who a client is: user + password, an API key, or a ready token."""

    user: str = ""
    password: str = field(default="", repr=False)
    api_key: str = field(default="", repr=False)
    token: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        ways = [bool(self.user or self.password), bool(self.api_key), bool(self.token)]
        if sum(ways) != 1:
            raise InvalidArgument("credentials: give user and password, an API key, or a "
                                  "token (exactly one of them)")
        if ways[0] and not (self.user and self.password):
            raise InvalidArgument("credentials: a user needs a password (and a password a user)")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Credentials | None:
        """From TUBEQ_USER/TUBEQ_PASSWORD, TUBEQ_API_KEY or TUBEQ_TOKEN (None: none set)."""
        env = os.environ if env is None else env
        user, password = env.get("TUBEQ_USER", ""), env.get("TUBEQ_PASSWORD", "")
        api_key, token = env.get("TUBEQ_API_KEY", ""), env.get("TUBEQ_TOKEN", "")
        if not (user or password or api_key or token):
            return None
        return cls(user, password, api_key, token)


class TokenSource:
    """The current ``authorization`` header value, logging in (again) when needed."""

    def __init__(self, credentials: Credentials, masters: str | Sequence[str],
                 timeout: float = 10.0) -> None:
        self.credentials = credentials
        self.masters, self.timeout = masters, timeout
        self._lock = threading.Lock()
        self._header = f"Bearer {credentials.token}" if credentials.token else ""
        self._renew_at = float("inf") if credentials.token else 0.0

    def header(self) -> str:
        with self._lock:
            if time.time() >= self._renew_at:
                self._login()
            return self._header

    def invalidate(self) -> None:
        """Log in again at the next call (the server refused the token)."""
        with self._lock:
            if not self.credentials.token:
                self._renew_at = 0.0

    def _login(self) -> None:
        from lib.proto import security_pb2, security_pb2_grpc
        from lib.rpc import MasterClient  # its own plain pool: the login is unauthenticated

        c = self.credentials
        master = MasterClient(self.masters, timeout=self.timeout)
        try:
            got = master.call(security_pb2_grpc.SecurityStub, "Login", security_pb2.LoginRequest(
                user=c.user, password=c.password, api_key=c.api_key))
        finally:
            master.close()
        now = time.time()
        life = max(0.0, got.expires_ms / 1000 - now)
        self._header = f"Bearer {got.token}"
        self._renew_at = now + life * RENEW_AT


def auth_for(masters: str | Sequence[str], credentials: Credentials | None = None,
             timeout: float = 10.0) -> TokenSource | None:
    """The token source of a client: its own credentials, else the environment's, else
    None (no authentication: a cluster with ``auth = "none"``)."""
    creds = credentials if credentials is not None else Credentials.from_env()
    return None if creds is None else TokenSource(creds, masters, timeout)


class _Details(collections.namedtuple(
        "_Details", ("method", "timeout", "metadata", "credentials", "wait_for_ready",
                     "compression")), grpc.ClientCallDetails):
    pass


class ClientAuth(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                 grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds the token to every call of a channel (ChannelPool wraps its channels in it)."""

    def __init__(self, source: TokenSource) -> None:
        self.source = source

    def _details(self, d: grpc.ClientCallDetails) -> _Details:
        metadata = [*(d.metadata or ()), (AUTH_HEADER, self.source.header())]
        return _Details(d.method, d.timeout, metadata, d.credentials,
                        getattr(d, "wait_for_ready", None), getattr(d, "compression", None))

    def intercept_unary_unary(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_stream_unary(self, continuation, client_call_details, request_iterator):
        return continuation(self._details(client_call_details), request_iterator)

    def intercept_stream_stream(self, continuation, client_call_details, request_iterator):
        return continuation(self._details(client_call_details), request_iterator)
