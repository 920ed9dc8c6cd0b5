"""What every view needs: the portal object of the app, and the caller's client."""
from __future__ import annotations

from collections.abc import Callable

from flask import current_app, g

from lib.admin import AdminClient
from lib.auth.client import Credentials
from lib.tls import Tls
from portal_web.config import PortalConfig
from portal_web.sessions import ApiClients, SessionStore

SESSION_COOKIE = "tubeq_session"
ClientMaker = Callable[[Credentials | None], AdminClient]


class Portal:
    """What the views share: the config, the sessions, the API callers' clients and a client
    with no credentials of its own (logins and master status are public calls)."""

    def __init__(self, config: PortalConfig, make_client: ClientMaker) -> None:
        self.config = config
        self.sessions = SessionStore(make_client, config.session_ttl_s, config.max_sessions)
        self.api_clients = ApiClients(make_client)
        self.public = make_client(None)

    def close(self) -> None:
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
