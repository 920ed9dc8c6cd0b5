"""What every view needs: the portal object of the app, and the caller's client."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

from flask import current_app, g, request

from lib.admin import AdminClient
from lib.auth.client import Credentials
from lib.tls import Tls
from portal_web.config import PortalConfig
from portal_web.errors import PortalError
from portal_web.sampler import Sampler
from portal_web.sessions import ApiClients, SessionStore, credentials_of

SESSION_COOKIE = "tubeq_session"
MASTER_HEALTH_TTL_S = 5.0
ClientMaker = Callable[[Credentials | None], AdminClient]


class Portal:
    """What the views share: the config, the sessions, the API callers' clients and a client
    with no credentials of its own (logins and master status are public calls)."""

    def __init__(self, config: PortalConfig, make_client: ClientMaker) -> None:
        self.config = config
        self.sessions = SessionStore(make_client, config.session_ttl_s, config.max_sessions)
        self.api_clients = ApiClients(make_client)
        self.public = make_client(None)
        self.sampler = (Sampler(make_client(Credentials.from_file(
            config.monitor_credentials_file)), config.sample_interval_s,
            config.history_s).start() if config.monitor_credentials_file else None)
        self._health: tuple[float, list[dict]] = (0.0, [])
        self._health_lock = threading.Lock()

    def unreachable_masters(self) -> list[dict]:
        """Masters that did not answer, asked at most every few seconds (every page shows
        them; a refresh that waits on a dead master holds up one request, not all)."""
        checked, found = self._health
        if time.monotonic() - checked > MASTER_HEALTH_TTL_S and \
                self._health_lock.acquire(blocking=False):
            try:
                found = [{"address": m.address, "error": m.error}
                         for m in self.public.master_status() if m.role == "unreachable"]
                self._health = (time.monotonic(), found)
            finally:
                self._health_lock.release()
        return found

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
        self.sessions.close_all()
        self.api_clients.close_all()
        self.public.close()


def client_factory(config: PortalConfig, tls: Tls | None = None) -> ClientMaker:
    def make(credentials: Credentials | None) -> AdminClient:
        # None: a client for public calls only. A token that opens nothing keeps the
        # environment's credentials (TUBEQ_USER ...) from ever acting for a portal user.
        creds = credentials or Credentials(token="portal-public-calls-only")
        return AdminClient(config.masters, timeout=config.master_timeout_s, credentials=creds,
                           tls=tls)
    return make


def portal() -> Portal:
    return current_app.extensions["tubeq"]


def client() -> AdminClient:
    """The caller's own client (their session's or their API credential's)."""
    return g.client


def page_sizes() -> tuple[int, int]:
    """The default page size and its cap, for views.paginate."""
    config = portal().config
    return config.page_size, config.max_page_size


def json_body() -> dict:
    """The request's JSON object; anything else (no body, a list, bad JSON) is a 400."""
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise PortalError(400, "INVALID_ARGUMENT", "the request body must be a JSON object")
    return body


def credentials() -> Credentials:
    """The caller's own credentials (their session's token, or their API credential), for
    clients other than the AdminClient (readers, producers) that must act as them too."""
    session = g.get("session")
    found = session.credentials if session is not None else \
        credentials_of(request.headers.get("Authorization", ""))
    if found is None:  # _identify lets no such request reach a view
        raise RuntimeError("no caller credentials in this request")
    return found
