"""The JSON API of the security pages under ``/api/v1/security/`` (see security.py and
openapi.py): the same plain-dict functions, the same admin check before every call."""
from __future__ import annotations

from flask import Blueprint, jsonify, request

from portal_web import security_limits as limits
from portal_web import security_views as sv
from portal_web.context import client, json_body, portal
from portal_web.security import admins_only, forget_keys, me

bp = Blueprint("security_api", __name__, url_prefix="/api/v1/security")
bp.before_request(admins_only)


@bp.get("/users")
def users():
    return jsonify(sv.users(client()))


@bp.post("/users")
def user_add():
    return jsonify(sv.add_user(client(), json_body())), 201


@bp.get("/users/<name>")
def user(name: str):
    return jsonify(sv.user(client(), name))


@bp.put("/users/<name>/roles")
def user_roles(name: str):
    return jsonify(sv.set_roles(client(), name, json_body().get("roles")))


@bp.put("/users/<name>/password")
def user_password(name: str):
    sv.set_password(client(), name, json_body())
    return "", 204


@bp.delete("/users/<name>")
def user_delete(name: str):
    forget_keys(sv.delete_user(client(), name, request.args.get("confirm", ""), me()))
    portal().sessions.close_user(name)
    return "", 204


@bp.get("/api-keys")
def api_keys():
    return jsonify(sv.api_keys(client(), request.args))


@bp.post("/api-keys")
def api_key_create():
    return jsonify(sv.create_api_key(client(), json_body())), 201


@bp.delete("/api-keys/<key_id>")
def api_key_revoke(key_id: str):
    sv.revoke_api_key(client(), key_id)
    forget_keys([key_id])
    return "", 204


@bp.get("/acls")
def acls():
    return jsonify(sv.acls(client(), request.args))


@bp.post("/acls")
def acl_add():
    made = sv.add_acl(client(), json_body())
    return jsonify(made), 201 if made["added"] else 200


@bp.delete("/acls")
def acl_remove():
    sv.remove_acl(client(), request.args)
    return "", 204


@bp.get("/quotas")
def quotas():
    return jsonify(limits.list_quotas(client()))


@bp.put("/quotas/<entity>")
def quota_set(entity: str):
    return jsonify(limits.set_quota(client(), entity, json_body()))


@bp.delete("/quotas/<entity>")
def quota_remove(entity: str):
    limits.remove_quota(client(), entity)
    return "", 204


@bp.get("/ip-rules")
def ip_rules():
    return jsonify(limits.list_ip_rules(client()))


@bp.post("/ip-rules")
def ip_rule_add():
    made = limits.add_ip_rule(client(), json_body())
    return jsonify(made), 201 if made["added"] else 200


@bp.delete("/ip-rules")
def ip_rule_remove():
    limits.remove_ip_rule(client(), request.args)
    return "", 204
