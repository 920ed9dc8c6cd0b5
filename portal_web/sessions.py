"""Who is using the portal through a browser: logged-in sessions (API callers with a token or
key: portal_web/callers.py).

A browser session lives on the server (the cookie holds only a random id): the user's tubeq
token never reaches the browser, and logging out ends it here. Each session has its own
:class:`AdminClient` presenting that user's credentials, so the masters check and audit every
call as the portal user, not as the portal.
"""
from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from lib.admin import AdminClient
from lib.auth.client import Credentials
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
