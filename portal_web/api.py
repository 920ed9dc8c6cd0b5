"""The JSON API under /api/v1: everything the pages show and do (see openapi.py)."""
from __future__ import annotations

from flask import Blueprint, g, jsonify, request

from portal_web import views
from portal_web.context import client, json_body, page_sizes, portal
from portal_web.openapi import document

bp = Blueprint("api", __name__, url_prefix="/api/v1")


@bp.get("/openapi.json")
def openapi():
    return jsonify(document())


@bp.get("/whoami")
def whoami():
    session, caller = g.get("session"), g.get("caller")
    if session is None:
        return jsonify({"principal": caller.principal, "roles": list(caller.roles),
                        "via": caller.via, "expires_ms": int(caller.expires_at * 1000)})
    return jsonify({"principal": session.user, "roles": list(session.roles),
                    "via": "session", "csrf_token": session.csrf,
                    "expires_ms": int(session.expires_at * 1000)})


@bp.get("/overview")
def overview():
    return jsonify({**views.overview(portal().public, client(), portal().sampler),
                    "rates": views.rates(portal().sampler)})


@bp.get("/masters")
def masters():
    return jsonify(views.masters(portal().public))


@bp.get("/brokers")
def brokers():
    return jsonify([views.plain(b) for b in client().list_brokers()])


@bp.get("/topics")
def topics():
    return jsonify(views.topics(client(), request.args, *page_sizes()))


@bp.post("/topics")
def topic_create():
    return jsonify(views.create_topic(client(), json_body())), 201


@bp.get("/topics/<name>")
def topic(name: str):
    return jsonify(views.topic(client(), name, portal().sampler))


@bp.patch("/topics/<name>")
def topic_alter(name: str):
    return jsonify(views.alter_topic(client(), name, json_body()))


@bp.delete("/topics/<name>")
def topic_delete(name: str):
    views.delete_topic(client(), name, request.args.get("confirm", ""))
    return "", 204


@bp.get("/groups")
def groups():
    return jsonify(views.paginate(client().list_groups(), request.args, *page_sizes()))


@bp.get("/groups/<name>")
def group(name: str):
    return jsonify({**views.group(client(), name),
                    "lag_history": views.lag_history(portal().sampler, name)})


@bp.post("/groups/<name>/reset")
def group_reset(name: str):
    body = json_body()
    return jsonify(views.reset_offsets(client(), name, body, bool(body.get("dry_run"))))


@bp.get("/transactions")
def transactions():
    return jsonify(views.transactions(client(), request.args))


@bp.post("/transactions/<tid>/abort")
def transaction_abort(tid: str):
    return jsonify(views.plain(client().abort_transaction(tid)))


@bp.get("/audit")
def audit():
    return jsonify(views.audit(client(), request.args))
