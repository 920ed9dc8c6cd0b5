"""Logging in and out with the cluster's users (the masters check the password)."""
from __future__ import annotations

import hmac
import secrets

from flask import Blueprint, g, jsonify, make_response, redirect, render_template, request, url_for

from lib.errors import Unauthenticated
from portal_web.context import SESSION_COOKIE, json_body, portal
from portal_web.errors import PortalError
from portal_web.links import local_or_home

bp = Blueprint("auth", __name__)
OPEN_ENDPOINTS = frozenset({"auth.login", "auth.login_submit", "auth.api_login", "api.openapi"})
LOGIN_COOKIE = "tubeq_login"  # double-submit token of the login form (no session yet)


def _cookie_flags() -> dict:
    return {"httponly": True, "samesite": "Strict", "secure": portal().config.tls, "path": "/"}


def _login_token() -> str:
    """The browser's login token: kept while its cookie lives, so a second GET of /login (a
    second tab, or a browser following a redirect for its favicon) does not invalidate the
    form already on screen."""
    held = request.cookies.get(LOGIN_COOKIE, "")
    if len(held) == 32 and all(c.isalnum() or c in "-_" for c in held):
        return held
    return secrets.token_urlsafe(24)


@bp.get("/login")
def login():
    token = _login_token()
    page = render_template("login.html", login_token=token, next=request.args.get("next", ""),
                           error="")
    response = make_response(page)
    response.set_cookie(LOGIN_COOKIE, token, max_age=3600, **_cookie_flags())
    return response


@bp.post("/login")
def login_submit():
    sent, expected = request.form.get("login_token", ""), request.cookies.get(LOGIN_COOKIE, "")
    user, password = request.form.get("user", ""), request.form.get("password", "")
    target = request.form.get("next", "")
    if not expected or not hmac.compare_digest(sent.encode(), expected.encode()):
        return _login_again("the login form expired: try again", target, 403)
    try:
        result = portal().public.login(user=user, password=password)
    except Unauthenticated as err:
        return _login_again(err.message, target, 401)
    session = portal().sessions.open(result)
    response = make_response(redirect(local_or_home(target)))
    response.set_cookie(SESSION_COOKIE, session.sid,
                        max_age=int(portal().config.session_ttl_s), **_cookie_flags())
    response.delete_cookie(LOGIN_COOKIE, path="/")
    return response


def _login_again(error: str, target: str, status: int):
    token = secrets.token_urlsafe(24)
    response = make_response(render_template("login.html", login_token=token, next=target,
                                             error=error), status)
    response.set_cookie(LOGIN_COOKIE, token, max_age=3600, **_cookie_flags())
    return response


@bp.post("/logout")
def logout():
    portal().sessions.close(g.session.sid)
    response = redirect(url_for("auth.login"))
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


@bp.post("/api/v1/login")
def api_login():
    """A tubeq token for API calls (``Authorization: Bearer <token>``): no cookie is set."""
    body = json_body()
    result = portal().public.login(user=_string(body, "user"),
                                   password=_string(body, "password"),
                                   api_key=_string(body, "api_key"))
    return jsonify({"token": result.token, "expires_ms": result.expires_ms,
                    "principal": result.principal, "roles": list(result.roles)})


def _string(body: dict, name: str) -> str:
    value = body.get(name, "")
    if not isinstance(value, str):
        raise PortalError(400, "INVALID_ARGUMENT", f"{name} must be a string, got "
                          f"{type(value).__name__}")
    return value
