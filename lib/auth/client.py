"""Client side of authentication: credentials, a token that renews itself, and the channel
interceptor that puts it on every call.

A client logs in once (``Security.Login`` on the active master, with user + password or an API
key) and presents ``authorization: Bearer <token>`` on every call, to masters and brokers
alike. :class:`TokenSource` renews the token when 80% of its lifetime has passed, so a
long-running producer never sees it expire. Credentials come from the caller, or from the
environment (``TUBEQ_USER`` + ``TUBEQ_PASSWORD``, ``TUBEQ_API_KEY`` or ``TUBEQ_TOKEN``), so
the CLI and scripts need no code for it; or from a credentials file (TUBEQ_CREDENTIALS_FILE,
the one ``cluster up`` writes for its admin). Secrets never appear in a repr, a log or an error.
"""
from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from lib.auth.rules import PUBLIC_METHODS
from lib.errors import InvalidArgument
from lib.private_files import read_private, write_private
from lib.tls import Tls

AUTH_HEADER = "authorization"
CREDENTIALS_FILE_ENV = "TUBEQ_CREDENTIALS_FILE"
CLUSTER_SECRET_FILE_ENV = "TUBEQ_CLUSTER_SECRET_FILE"  # break glass: act as the cluster
CLUSTER_UP_MARK = "# written by tubeq cluster up"  # such a file it may replace; no other
CREDENTIAL_KEYS = ("user", "password", "api_key", "token")
RENEW_AT = 0.8  # of a token's lifetime


def user_credentials_path(env: Mapping[str, str] | None = None) -> Path:
    """The user's own credentials file: ``$XDG_CONFIG_HOME/tubeq/credentials`` (by default
    ``~/.config/tubeq/credentials``); ``cluster up`` writes its admin there unless the user
    put a file of their own."""
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "tubeq" / "credentials"


@dataclass(frozen=True)
class Credentials:
    """Who a client is: user + password, an API key, or a ready token; or, to break glass, the
    cluster secret brokers and masters present to each other (see :meth:`from_cluster_secret`)."""

    user: str = ""
    password: str = field(default="", repr=False)
    api_key: str = field(default="", repr=False)
    token: str = field(default="", repr=False)
    cluster_secret: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        ways = [bool(self.user or self.password), bool(self.api_key), bool(self.token),
                bool(self.cluster_secret)]
        if sum(ways) != 1:
            raise InvalidArgument("credentials: give user and password, an API key, or a "
                                  "token (exactly one of them)")
        if ways[0] and not (self.user and self.password):
            raise InvalidArgument("credentials: a user needs a password (and a password a user)")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Credentials | None:
        """From TUBEQ_USER/TUBEQ_PASSWORD, TUBEQ_API_KEY or TUBEQ_TOKEN, else from the file
        TUBEQ_CREDENTIALS_FILE names, else from the user's file (:func:`user_credentials_path`,
        as psql reads ~/.pgpass); None: none of them."""
        env = os.environ if env is None else env
        user, password = env.get("TUBEQ_USER", ""), env.get("TUBEQ_PASSWORD", "")
        api_key, token = env.get("TUBEQ_API_KEY", ""), env.get("TUBEQ_TOKEN", "")
        if user or password or api_key or token:
            return cls(user, password, api_key, token)
        if env.get(CLUSTER_SECRET_FILE_ENV):
            return cls.from_cluster_secret(env[CLUSTER_SECRET_FILE_ENV])
        path = env.get(CREDENTIALS_FILE_ENV, "")
        if path:
            return cls.from_file(path)
        default = user_credentials_path(env)
        return cls.from_file(default) if default.exists() else None

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> Credentials:
        """From ``key = value`` lines (user, password, api_key or token; ``#`` comments). The
        file must be readable by its owner only, as ssh insists for its keys."""
        where = Path(path)
        text = read_private(where, "credentials file")
        values: dict[str, str] = {}
        for n, line in enumerate(text.splitlines(), 1):
            key, sep, value = line.partition("=")
            key = key.strip()
            if not key or key.startswith("#"):
                continue
            if not sep or key not in CREDENTIAL_KEYS:
                raise InvalidArgument(f"credentials file {where}, line {n}: expected "
                                      f"{' | '.join(k + ' = ...' for k in CREDENTIAL_KEYS)}")
            values[key] = value.strip()
        return cls(**values)

    @classmethod
    def from_cluster_secret(cls, path: str | os.PathLike) -> Credentials:
        """Break glass: act as the cluster itself, with the secret its brokers and masters
        share (``<data-dir>/cluster-secret`` of ``cluster up``, or what TUBEQ_CLUSTER_SECRET
        holds on a cluster host). It passes every ACL and IP rule, so an operator on a cluster
        host can recover from an IP-list lockout or a lost admin password; whoever can read
        the file could act as a broker anyway. The audit log records such calls as
        ``cluster``."""
        secret = read_private(path, "cluster secret file").strip()
        if not secret:
            raise InvalidArgument(f"cluster secret file {path} is empty")
        return cls(cluster_secret=secret)

    def to_file(self, path: str | os.PathLike, comment: str = "") -> None:
        """Write these credentials where :meth:`from_file` reads them (0600, created anew)."""
        lines = [f"{k} = {v}" for k in CREDENTIAL_KEYS if (v := getattr(self, k))]
        if comment:
            lines.insert(0, comment)
        write_private(path, "\n".join(lines) + "\n")


class TokenSource:
    """The current ``authorization`` header value, logging in (again) when needed."""

    def __init__(self, credentials: Credentials, masters: str | Sequence[str],
                 timeout: float = 10.0, tls: Tls | None = None) -> None:
        self.credentials = credentials
        self.masters, self.timeout, self.tls = masters, timeout, tls
        self._lock = threading.Lock()
        self._header = (f"Cluster {credentials.cluster_secret}" if credentials.cluster_secret
                        else f"Bearer {credentials.token}" if credentials.token else "")
        self._renew_at = float("inf") if self._header else 0.0

    def header(self) -> str:
        with self._lock:
            if time.time() >= self._renew_at:
                self._login()
            return self._header

    def invalidate(self) -> None:
        """Log in again at the next call (the server refused the token)."""
        with self._lock:
            if not (self.credentials.token or self.credentials.cluster_secret):
                self._renew_at = 0.0

    def _login(self) -> None:
        from lib.proto import security_pb2, security_pb2_grpc
        from lib.rpc import MasterClient  # its own plain pool: the login is unauthenticated

        c = self.credentials
        master = MasterClient(self.masters, timeout=self.timeout, tls=self.tls)
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
             timeout: float = 10.0, tls: Tls | None = None) -> TokenSource | None:
    """The token source of a client: its own credentials, else the environment's, else
    None (no authentication: a cluster with ``auth = "none"``, or mutual TLS alone)."""
    creds = credentials if credentials is not None else Credentials.from_env()
    return None if creds is None else TokenSource(creds, masters, timeout, tls)


class _Details(collections.namedtuple(
        "_Details", ("method", "timeout", "metadata", "credentials", "wait_for_ready",
                     "compression")), grpc.ClientCallDetails):
    pass


class ClientAuth(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                 grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds the token to every call of a channel (ChannelPool wraps its channels in it)."""

    def __init__(self, source: TokenSource) -> None:
        self.source = source

    def _details(self, d: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        if d.method in PUBLIC_METHODS:
            return d
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
