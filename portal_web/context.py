"""What every view needs: the portal object of the app, and the caller's client."""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

from flask import current_app, g, request

from lib.admin import AdminClient
from lib.auth.client import Credentials
from lib.tls import Tls
from portal_web.callers import ApiClients, verifier
from portal_web.config import PortalConfig
from portal_web.errors import PortalError
from portal_web.sampler import Sampler
from portal_web.sessions import SessionStore

SESSION_COOKIE = "tubeq_session"
MASTER_HEALTH_TTL_S = 5.0
ClientMaker = Callable[[Credentials | None], AdminClient]


class Portal:
    """What the views share: the config, the sessions, the API callers' clients and a client
    with no credentials of its own (logins and master status are public calls)."""

    def __init__(self, config: PortalConfig, make_client: ClientMaker) -> None:
        self.config = config
        self.sessions = SessionStore(make_client, config.session_ttl_s, config.max_sessions)
        self.public = make_client(None)
        self.api_clients = ApiClients(verifier(self.public, make_client))
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
    """The request's JSON object. Anything else is a 400 that names the problem: no body, not
    JSON, a value that is not an object (``"admin"``, ``5``, ``[1]``), or an object nested
    deeper than :data:`MAX_JSON_DEPTH` (Python's parser recurses: a body nested 3,000 deep
    would raise RecursionError). The size is capped before this (MAX_CONTENT_LENGTH: 413)."""
    if not request.is_json:
        raise _bad_json("send it with Content-Type: application/json")
    raw = request.get_data(cache=True)
    if not raw.strip():
        raise _bad_json("the body is empty")
    try:
        body = json.loads(raw)
    except RecursionError:
        raise _bad_json(f"it is nested more than {MAX_JSON_DEPTH} levels deep") from None
    except ValueError as err:  # bad JSON, bad UTF-8, an int of 4,300+ digits
        raise _bad_json(f"it is not valid JSON ({str(err)[:120]})") from None
    if not isinstance(body, dict):
        raise _bad_json(f"got a JSON {_JSON_TYPES.get(type(body), type(body).__name__)}")
    if json_depth(body) > MAX_JSON_DEPTH:
        raise _bad_json(f"it is nested more than {MAX_JSON_DEPTH} levels deep")
    return body


MAX_JSON_DEPTH = 32  # the deepest body of the API (an ACL entry, a topic) is 2 levels
_JSON_TYPES = {str: "string", int: "number", float: "number", bool: "boolean", list: "array",
               type(None): "null"}


def _bad_json(why: str) -> PortalError:
    return PortalError(400, "INVALID_ARGUMENT", f"the request body must be a JSON object: {why}")


def json_depth(value: object) -> int:
    """How deeply ``value`` nests objects and arrays (a scalar: 0), without recursion; stops
    counting once past :data:`MAX_JSON_DEPTH`."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if not isinstance(item, dict | list):
            continue
        deepest = max(deepest, depth)
        if depth > MAX_JSON_DEPTH:
            break
        stack.extend((child, depth + 1) for child in
                     (item.values() if isinstance(item, dict) else item))
    return deepest


def credentials() -> Credentials:
    """The caller's own credentials (their session's token, or their verified API token), for
    clients other than the AdminClient (readers, producers) that must act as them too."""
    holder = g.get("session") or g.get("caller")
    if holder is None:  # _identify lets no such request reach a view
        raise RuntimeError("no caller credentials in this request")
    return holder.credentials
