"""The security pages under ``/security/`` (their JSON API is security_api.py): users and
roles, API keys, ACL entries, quotas and IP rules. Admins only: before any view runs, the
masters are asked, with the caller's own client, whether the caller may administer the cluster
(403 otherwise); every change goes through that client, so the masters check and audit it as
the caller. A form that fails shows its page again with the error (status 4xx) and the fields
sent, passwords left out; a new API key is shown once, on the page that answers its creation.
"""
from __future__ import annotations

from collections.abc import Callable

from flask import Blueprint, g, redirect, render_template, request, url_for

from lib.errors import TubeqError
from portal_web import security_limits as limits
from portal_web import security_views as sv
from portal_web.context import client, portal
from portal_web.errors import PortalError, describe

bp = Blueprint("security", __name__)
SECRET_FIELDS = frozenset({"password", "password_again", "csrf_token"})


@bp.before_request
def admins_only():
    sv.check_admin(client())


def me() -> str | None:
    session = g.get("session")
    return None if session is None else session.user


def _submit(action: Callable, page: Callable):
    """``action()``'s response; if it fails on the input (4xx), ``page`` again with the error."""
    try:
        return action()
    except (PortalError, TubeqError) as err:
        status, code, message = describe(err)
        if status >= 500:
            raise
        kept = {k: v for k, v in request.form.items() if k not in SECRET_FIELDS}
        return page(error=f"{code}: {message}", form=kept), status


def forget_keys(key_ids: list[str]) -> None:
    """This portal's clients of revoked keys go (their tokens would outlive the keys)."""
    for key_id in key_ids:
        portal().api_clients.forget_api_key(key_id)


# -- pages: users ----------------------------------------------------------------------------

@bp.get("/security")
def index():
    return redirect(url_for("security.users"))


@bp.get("/security/users")
def users(error: str = "", form: dict | None = None):
    return render_template("security_users.html", view=sv.users(client()), error=error,
                           form=form or {})


@bp.post("/security/users")
def user_add():
    def add():
        made = sv.add_user(client(), request.form)
        return redirect(url_for("security.user", name=made["name"]))
    return _submit(add, users)


@bp.get("/security/users/<name>")
def user(name: str, error: str = "", form: dict | None = None):
    return render_template("security_user.html", view=sv.user(client(), name), error=error,
                           form=form or {})


@bp.post("/security/users/<name>/roles")
def user_roles(name: str):
    def change():
        sv.set_roles(client(), name, request.form.getlist("roles"))
        return redirect(url_for("security.user", name=name))
    return _submit(change, lambda **kw: user(name, **kw))


@bp.post("/security/users/<name>/password")
def user_password(name: str):
    def change():
        sv.set_password(client(), name, request.form)
        return redirect(url_for("security.user", name=name))
    return _submit(change, lambda **kw: user(name, **kw))


@bp.post("/security/users/<name>/delete")
def user_delete(name: str):
    def delete():
        forget_keys(sv.delete_user(client(), name, request.form.get("confirm", ""), me()))
        portal().sessions.close_user(name)
        return redirect(url_for("security.users"))
    return _submit(delete, lambda **kw: user(name, **kw))


# -- pages: API keys, ACLs, quotas, IP rules --------------------------------------------------

@bp.get("/security/api-keys")
def api_keys(error: str = "", form: dict | None = None):
    return render_template("security_api_keys.html", view=sv.api_keys(client(), request.args),
                           error=error, form=form or {})


@bp.post("/security/api-keys")
def api_key_create():
    def create():
        made = sv.create_api_key(client(), request.form)
        return render_template("security_api_key_created.html", made=made)
    return _submit(create, api_keys)


@bp.post("/security/api-keys/<key_id>/revoke")
def api_key_revoke(key_id: str):
    def revoke():
        revoked = sv.revoke_api_key(client(), key_id)
        forget_keys([key_id])
        if request.form.get("back") == "user":
            return redirect(url_for("security.user", name=revoked["principal"]))
        return redirect(url_for("security.api_keys"))
    return _submit(revoke, api_keys)


@bp.get("/security/acls")
def acls(error: str = "", form: dict | None = None):
    return render_template("security_acls.html", view=sv.acls(client(), request.args),
                           error=error, form=form or {})


@bp.post("/security/acls")
def acl_add():
    def add():
        made = sv.add_acl(client(), request.form)
        return redirect(url_for("security.acls", principal=made["acl"]["principal"]))
    return _submit(add, acls)


@bp.post("/security/acls/remove")
def acl_remove():
    def remove():
        sv.remove_acl(client(), request.form)
        return redirect(url_for("security.acls"))
    return _submit(remove, acls)


@bp.get("/security/quotas")
def quotas(error: str = "", form: dict | None = None):
    return render_template("security_quotas.html", view=limits.list_quotas(client()),
                           error=error, form=form or {})


@bp.post("/security/quotas")
def quota_set():
    def set_():
        limits.set_quota(client(), request.form.get("entity", ""), request.form)
        return redirect(url_for("security.quotas"))
    return _submit(set_, quotas)


@bp.post("/security/quotas/remove")
def quota_remove():
    def remove():
        limits.remove_quota(client(), request.form.get("entity", ""))
        return redirect(url_for("security.quotas"))
    return _submit(remove, quotas)


@bp.get("/security/ip-rules")
def ip_rules(error: str = "", form: dict | None = None):
    return render_template("security_ip_rules.html", view=limits.list_ip_rules(client()),
                           error=error, form=form or {})


@bp.post("/security/ip-rules")
def ip_rule_add():
    def add():
        limits.add_ip_rule(client(), request.form)
        return redirect(url_for("security.ip_rules"))
    return _submit(add, ip_rules)


@bp.post("/security/ip-rules/remove")
def ip_rule_remove():
    def remove():
        limits.remove_ip_rule(client(), request.form)
        return redirect(url_for("security.ip_rules"))
    return _submit(remove, ip_rules)
