"""``create_app(config)``: the Flask app, its blueprints and the checks every request passes.

Before a view runs, the caller is known: a browser session (cookie ``tubeq_session``, a random
id) or an API credential (``Authorization: Bearer <token>`` / ``ApiKey <key>``). A request that
changes something (any method but GET/HEAD/OPTIONS) from a browser session must carry the
session's CSRF token (form field ``csrf_token`` or header ``X-CSRF-Token``); API credentials
need none (a browser never sends them by itself).
"""
from __future__ import annotations

import hmac
import logging
from datetime import UTC, datetime
from urllib.parse import urlencode

from flask import Flask, g, jsonify, redirect, render_template, request, url_for

from lib.errors import TubeqError
from lib.tls import Tls
from portal_web import (
    api,
    auth,
    brokers,
    dead_letters,
    humane,
    messages,
    pages,
    security,
    security_api,
)
from portal_web.charts import line_chart
from portal_web.config import PortalConfig
from portal_web.context import SESSION_COOKIE, ClientMaker, Portal, client_factory, portal
from portal_web.errors import PortalError, as_json, describe
from portal_web.links import back_link

log = logging.getLogger(__name__)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
MAX_REQUEST_BYTES = 1 << 20
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "frame-ancestors 'none'; form-action 'self'; base-uri 'none'")


def create_app(config: PortalConfig | None = None,
               make_client: ClientMaker | None = None,
               testing: bool = False) -> Flask:
    config = config or PortalConfig()
    app = Flask(__name__)
    app.config.update(TESTING=testing, MAX_CONTENT_LENGTH=MAX_REQUEST_BYTES,
                      TEMPLATES_AUTO_RELOAD=False)
    tls = Tls.from_env()
    portal = Portal(config, make_client or client_factory(config, tls))
    app.extensions["tubeq"] = portal
    for blueprint in (auth.bp, pages.bp, api.bp, brokers.bp, security.bp, security_api.bp):
        app.register_blueprint(blueprint)
    messages.init_app(app, config, tls)
    dead_letters.init_app(app, config, tls)
    app.before_request(_identify)
    app.after_request(_headers)
    app.register_error_handler(Exception, _error)
    app.jinja_env.globals.update(csrf_token=lambda: g.session.csrf if g.get("session") else "",
                                 query=_query, line_chart=line_chart,
                                 unreachable_masters=_unreachable_masters)
    app.jinja_env.filters["ms_time"] = _ms_time
    app.jinja_env.filters.update(humane.FILTERS)
    return app


def _query(**changes) -> str:
    """This page's query string with ``changes`` (sorting and paging links keep the rest)."""
    args = request.args.to_dict()
    args.update({k: str(v) for k, v in changes.items()})
    return urlencode(args)


def _ms_time(ms: int) -> str:
    if not ms or ms <= 0:
        return ""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _unreachable_masters() -> list[dict]:
    """For the banner of every page; a portal that cannot even ask shows no banner."""
    try:
        return portal().unreachable_masters()
    except TubeqError:
        return []


def wants_json() -> bool:
    return request.path.startswith("/api/")


def _identify():
    """Who calls; refuse the unidentified and a state change without the CSRF token."""
    g.session, g.caller, g.client = None, None, None
    if request.endpoint in auth.OPEN_ENDPOINTS or request.endpoint == "static":
        return None
    header = request.headers.get("Authorization", "")
    if header and wants_json():
        g.caller = portal().api_clients.for_header(header)  # verified: Unauthenticated (401)
        g.client = g.caller.client
        return None
    session = portal().sessions.get(request.cookies.get(SESSION_COOKIE, ""))
    if session is None:
        if wants_json():
            raise PortalError(401, "UNAUTHENTICATED", "log in first (POST /login), or send "
                              "Authorization: Bearer <token> or ApiKey <key>")
        return redirect(url_for("auth.login", next=request.full_path.rstrip("?")))
    g.session, g.client = session, session.client
    if request.method not in SAFE_METHODS:
        sent = request.headers.get("X-CSRF-Token") or request.form.get("csrf_token", "")
        if not hmac.compare_digest(sent.encode(), session.csrf.encode()):
            raise PortalError(403, "CSRF", "missing or wrong CSRF token: reload the page and "
                              "try again")
    return None


def _headers(response):
    response.headers.setdefault("Content-Security-Policy", CSP)
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Referrer-Policy"] = "same-origin"
    if g.get("session") is not None:
        response.headers["Cache-Control"] = "no-store"
    return response


def _error(exc: Exception):
    from werkzeug.exceptions import HTTPException

    if isinstance(exc, HTTPException):
        status, code, message = exc.code or 500, exc.name.upper().replace(" ", "_"), \
            exc.description or exc.name
        if status == 413:
            message = f"the request body is larger than the {MAX_REQUEST_BYTES} bytes the " \
                "portal takes"
    else:
        status, code, message = describe(exc)
        if status == 500 and not isinstance(exc, TubeqError | PortalError):
            log.exception("portal.internal_error")
    if wants_json():
        return jsonify(as_json(status, code, message)), status
    # A real link, not javascript:history.back(): the portal's own CSP blocks javascript: URLs.
    back = back_link(request.referrer, request.host, request.full_path.rstrip("?"))
    return render_template("error.html", status=status, code=code, message=message,
                           back=back), status
