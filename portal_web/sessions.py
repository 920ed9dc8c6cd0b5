"""Who is using the portal: logged-in browser sessions, and API callers with a token or key.

A browser session lives on the server (the cookie holds only a random id): the user's tubeq
token never reaches the browser, and logging out ends it here. Each session and each API
credential has its own :class:`AdminClient` presenting that user's credentials, so the masters
check and audit every call as the portal user, not as the portal.
"""
from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from lib.admin import AdminClient
from lib.auth.client import Credentials
from lib.auth.credentials import parse_api_key
from lib.errors import Unauthenticated
from lib.types import LoginResult

ClientFactory = Callable[[Credentials], AdminClient]


@dataclass
class Session:
    sid: str
    user: str
    roles: tuple[str, ...]
    csrf: str
    expires_at: float  # wall clock, seconds: the token's expiry or the session TTL
    client: AdminClient = field(repr=False)
    credentials: Credentials = field(repr=False)  # the user's token, for readers and producers

    @property
    def admin(self) -> bool:
        return "admin" in self.roles


class SessionStore:
    """Sessions by id, thread-safe; the oldest is logged out past ``max_sessions``."""

    def __init__(self, make_client: ClientFactory, ttl_s: int, max_sessions: int,
                 clock: Callable[[], float] = time.time) -> None:
        self._make_client = make_client
        self._ttl_s, self._max = ttl_s, max_sessions
        self._clock = clock
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def open(self, login: LoginResult) -> Session:
        expires = min(self._clock() + self._ttl_s, login.expires_ms / 1000)
        credentials = Credentials(token=login.token)
        session = Session(secrets.token_urlsafe(32), login.principal, tuple(login.roles),
                          secrets.token_urlsafe(32), expires, self._make_client(credentials),
                          credentials)
        with self._lock:
            self._sessions[session.sid] = session
            while len(self._sessions) > self._max:
                _, old = self._sessions.popitem(last=False)
                old.client.close()
        return session

    def get(self, sid: str) -> Session | None:
        with self._lock:
            session = self._sessions.get(sid)
            if session is None:
                return None
            if self._clock() >= session.expires_at:
                del self._sessions[sid]
                session.client.close()
                return None
            return session

    def close(self, sid: str) -> None:
        with self._lock:
            session = self._sessions.pop(sid, None)
        if session is not None:
            session.client.close()

    def close_user(self, user: str) -> int:
        """Log ``user`` out everywhere (it was deleted); how many sessions it had."""
        with self._lock:
            gone = [s for s in self._sessions.values() if s.user == user]
            for session in gone:
                del self._sessions[session.sid]
        for session in gone:
            session.client.close()
        return len(gone)

    def close_all(self) -> None:
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), OrderedDict()
        for session in sessions:
            session.client.close()


def credentials_of(header: str) -> Credentials | None:
    """The credentials of an Authorization header (``Bearer <token>`` or ``ApiKey <key>``);
    None when it is no credential we take."""
    scheme, _, value = header.partition(" ")
    value = value.strip()
    if not value or scheme not in ("Bearer", "ApiKey"):
        return None
    return Credentials(token=value) if scheme == "Bearer" else Credentials(api_key=value)


def _key_id(api_key: str) -> str:
    try:
        return parse_api_key(api_key)[0]
    except Unauthenticated:
        return ""  # the master refuses it at the first call


class ApiClients:
    """An AdminClient per API credential (``Authorization: Bearer <token>`` or ``ApiKey
    <key>``), kept for the next call of the same caller; at most ``size``, so a flood of made-up
    headers costs a bounded amount. Keyed by a hash (and an API key's id, so a revoked key's
    client can be dropped): no secret is held as a key."""

    def __init__(self, make_client: ClientFactory, size: int = 256) -> None:
        self._make_client = make_client
        self._size = size
        self._lock = threading.Lock()
        self._clients: OrderedDict[str, AdminClient] = OrderedDict()

    def for_header(self, header: str) -> AdminClient | None:
        """The client of an Authorization header; None when it is no credential we take."""
        creds = credentials_of(header)
        if creds is None:
            return None
        key = f"{_key_id(creds.api_key) if creds.api_key else ''}/" \
            f"{hashlib.sha256(header.encode()).hexdigest()}"
        with self._lock:
            client = self._clients.get(key)
            if client is not None:
                self._clients.move_to_end(key)
                return client
        client = self._make_client(creds)
        with self._lock:
            self._clients[key] = client
            while len(self._clients) > self._size:
                _, old = self._clients.popitem(last=False)
                old.close()
        return client

    def forget_api_key(self, key_id: str) -> int:
        """Drop the client of a revoked API key: its token would keep working here until it
        expires (tokens are checked by signature, not against the key). How many there were."""
        with self._lock:
            gone = [k for k in self._clients if key_id and k.startswith(f"{key_id}/")]
            clients = [self._clients.pop(k) for k in gone]
        for client in clients:
            client.close()
        return len(clients)

    def close_all(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), OrderedDict()
        for client in clients:
            client.close()
