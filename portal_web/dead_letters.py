"""A consumer group's dead letters in the portal: the page (``/groups/<g>/dead-letters``),
its replay form, and the JSON API (``/api/v1/groups/<g>/dead-letters``, ``.../replay``).

Reads and replays act as the caller, as the message browser does (portal_web/messages.py):
the brokers check that user's ACLs, and the audit log names them (lib/dead_letters.py).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from flask import (
    Blueprint,
    Flask,
    current_app,
    jsonify,
    redirect,
    render_template,
    request,
    url_for,
)

from lib.dead_letters import DeadLetters
from lib.names import check_name
from lib.tls import Tls
from portal_web.config import PortalConfig
from portal_web.context import client, credentials, json_body
from portal_web.views import integer

pages = Blueprint("dead_letters", __name__)
api = Blueprint("dead_letters_api", __name__, url_prefix="/api/v1")
EXTENSION = "tubeq.dead_letters"
PAGE_LIMIT = 100
MAX_LIMIT = 1000
PREVIEW = 200  # characters of a value shown


def init_app(app: Flask, config: PortalConfig, tls: Tls | None) -> None:
    app.extensions[EXTENSION] = (config, tls)
    app.register_blueprint(pages)
    app.register_blueprint(api)


def _letters() -> DeadLetters:
    config, tls = current_app.extensions[EXTENSION]
    return DeadLetters(config.masters, client(), credentials(), tls)


def view(group: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """The group's dead-letter topic, its count and the first ``limit`` dead letters."""
    check_name(group, "group")
    letters = _letters()
    limit = integer(args, "limit", PAGE_LIMIT, 1, MAX_LIMIT)
    start = integer(args, "from_offset", 0, 0, 2**62)
    topic = letters.topic_of(group)
    count = letters.count(topic)
    items = [{**dataclasses.asdict(d), "key": None if d.key is None
              else d.key.decode("utf-8", "replace"),
              "value": d.value[:PREVIEW].decode("utf-8", "replace"),
              "value_bytes": len(d.value)} for d in letters.show(group, limit, start)]
    return {"group": group, "topic": topic, "records": count, "items": items,
            "limit": limit, "from_offset": start}


def replay(group: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """Replay (``to``: a topic, else each record's original one; ``limit``, ``from_offset``)."""
    check_name(group, "group")
    to = str(body.get("to") or "").strip() or None
    if to is not None:
        check_name(to, "topic")
    limit = integer(body, "limit", None, 1, 1_000_000)
    start = integer(body, "from_offset", 0, 0, 2**62)
    return {"group": group, "replayed": _letters().replay(group, to, limit, start),
            "to": to or "original topics"}


@pages.get("/groups/<name>/dead-letters")
def page(name: str):
    return render_template("dead_letters.html", view=view(name, request.args),
                           replayed=request.args.get("replayed"))


@pages.post("/groups/<name>/dead-letters/replay")
def replay_page(name: str):
    done = replay(name, request.form)
    return redirect(url_for("dead_letters.page", name=name, replayed=done["replayed"]))


@api.get("/groups/<name>/dead-letters")
def view_api(name: str):
    return jsonify(view(name, request.args))


@api.post("/groups/<name>/dead-letters/replay")
def replay_api(name: str):
    return jsonify(replay(name, json_body()))
