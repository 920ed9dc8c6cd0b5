"""The data behind the security pages and their JSON API, as plain dicts (as views.py does for
the rest): users and their roles, API keys, ACL entries, quotas and IP rules. Every call goes
through the caller's own client, so the masters decide (admin on the cluster) and audit it as
the caller. Passwords and API keys pass through and are never kept, logged or echoed; a new
key's secret is returned once, by :func:`create_api_key`."""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from lib.admin import AdminClient
from lib.auth import acl
from lib.errors import InvalidArgument, PermissionDenied
from lib.types import UserInfo
from portal_web import fields
from portal_web.errors import PortalError
from portal_web.views import plain

MAX_ROLES = 32
KEY_ID_RE = re.compile(r"^[0-9a-f]{1,64}$")


def check_admin(client: AdminClient) -> None:
    """403 unless the masters let the caller manage security (any admin-only read asks them:
    the role admin passes, and so does an ACL entry allowing admin on the cluster)."""
    try:
        client.list_ip_rules()
    except PermissionDenied as err:
        raise PortalError(403, "PERMISSION_DENIED",
                          f"security is for admins only: {err.message}") from None


# -- users ---------------------------------------------------------------------------------

def known_roles(acl_entries: Iterable[acl.Acl], users: Iterable[UserInfo]) -> list[str]:
    """Roles that mean something: admin, those ACL entries name and those users hold."""
    found = {acl.SUPERUSER_ROLE}
    found.update(e.principal[5:] for e in acl_entries if e.principal.startswith("role:"))
    found.update(r for u in users for r in u.roles)
    return sorted(found)


def roles(value: Any, known: Iterable[str]) -> list[str]:
    """Role names (a list, or one string separated by commas), each one of ``known``: a role
    no ACL names and no user holds grants nothing, so it is most likely a typo."""
    if value is None:
        raise fields.bad("roles", "is required (a list of role names, may be empty)")
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        raise fields.bad("roles", "must be a list of role names")
    wanted = sorted({i.strip() for i in items if i.strip()})
    known = set(known)
    for role in wanted:
        fields.check_name_field("roles", role, "role")
        if role not in known:
            raise fields.bad("roles", f"has an unknown role {fields.shown(role)}: known roles "
                                      f"are {', '.join(sorted(known))} (a new role is known "
                                      f"once an ACL entry names role:{role})")
    if len(wanted) > MAX_ROLES:
        raise fields.bad("roles", f"may hold at most {MAX_ROLES} roles, got {len(wanted)}")
    return wanted


def users(client: AdminClient) -> dict:
    listed = client.list_users()
    keys: dict[str, int] = {}
    for key in client.list_api_keys():
        keys[key.principal] = keys.get(key.principal, 0) + 1
    rows = [{**plain(u), "api_keys": keys.get(u.name, 0)} for u in listed]
    return {"items": rows, "total": len(rows), "roles": known_roles(client.list_acls(), listed)}


def user(client: AdminClient, name: str) -> dict:
    """A user with its API keys, the ACL entries that apply to it (its own, its roles', and
    everyone's) and the roles it could have."""
    listed = client.list_users()
    found = next((u for u in listed if u.name == name), None)
    if found is None:
        raise PortalError(404, "UNKNOWN_PRINCIPAL", f"unknown user {fields.shown(name)}")
    entries = client.list_acls()
    mine = {"*", f"user:{name}", *(f"role:{r}" for r in found.roles)}
    return {"user": plain(found),
            "api_keys": [plain(k) for k in client.list_api_keys() if k.principal == name],
            "acls": [_acl_row(e) for e in entries if e.principal in mine],
            "roles": known_roles(entries, listed)}


def add_user(client: AdminClient, data: Mapping[str, Any]) -> dict:
    """A user with a password, or (``service``) a service account, which has none."""
    name = fields.name(data, "name", "user")
    service = fields.flag(data, "service")
    if service:
        if data.get("password"):
            raise fields.bad("password", "must be empty for a service account (it logs in "
                                         "with API keys)")
        secret = None
    else:
        secret = fields.password(data)
    wanted = roles(fields.values(data, "roles") or [],
                   known_roles(client.list_acls(), client.list_users()))
    return plain(client.add_user(name, secret, wanted, service=service))


def set_roles(client: AdminClient, name: str, value: Any) -> dict:
    """Replace a user's roles (they reach its tokens at its next login)."""
    wanted = roles(value, known_roles(client.list_acls(), client.list_users()))
    return plain(client.set_roles(fields.check_name_field("name", name, "user"), wanted))


def set_password(client: AdminClient, name: str, data: Mapping[str, Any]) -> dict:
    secret = fields.password(data)
    return plain(client.set_password(fields.check_name_field("name", name, "user"), secret))


def delete_user(client: AdminClient, name: str, confirm: str, me: str | None) -> list[str]:
    """Delete a user (and its API keys) when ``confirm`` repeats its name; never the caller's
    own user. Returns the ids of the keys that went with it."""
    if confirm != name:
        raise PortalError(400, "CONFIRMATION", f"confirm: type the user's name ({name}) to "
                                               "delete it")
    if me is not None and name == me:
        raise fields.bad("name", "is the user you are logged in as: another admin must "
                                 "delete it")
    owned = [k.key_id for k in client.list_api_keys() if k.principal == name]
    client.delete_user(fields.check_name_field("name", name, "user"))
    return owned


# -- API keys ------------------------------------------------------------------------------

def api_keys(client: AdminClient, args: Mapping[str, Any]) -> dict:
    """API keys (never their secrets), of one ``principal`` when given."""
    principal = fields.name(args, "principal", "user", required=False)
    rows = [plain(k) for k in client.list_api_keys()
            if not principal or k.principal == principal]
    return {"items": rows, "total": len(rows), "principal": principal,
            "users": [u.name for u in client.list_users()]}


def create_api_key(client: AdminClient, data: Mapping[str, Any]) -> dict:
    """``{"key": its listing, "api_key": the key}``: the only time the key is shown."""
    principal = fields.name(data, "principal", "user")
    description = fields.text(data, "description", required=False)
    info, secret = client.create_api_key(principal, description)
    return {"key": plain(info), "api_key": secret}


def key_id(value: str) -> str:
    if not KEY_ID_RE.match(value):
        raise fields.bad("key_id", f"must be an API key id (hex digits), got "
                                   f"{fields.shown(value)}")
    return value


def revoke_api_key(client: AdminClient, value: str) -> dict:
    return plain(client.revoke_api_key(key_id(value)))


# -- ACLs ----------------------------------------------------------------------------------

def _acl_row(entry: acl.Acl) -> dict:
    return {**plain(entry), "describe": entry.describe()}


def acls(client: AdminClient, args: Mapping[str, Any]) -> dict:
    """ACL entries filtered by principal (substring), resource type and name (substring)."""
    principal = fields.text(args, "principal", required=False)
    resource = fields.choice(args, "resource", ("", *acl.RESOURCES), "")
    name = fields.text(args, "name", required=False, max_len=249)
    rows = [_acl_row(e) for e in client.list_acls()
            if principal in e.principal and resource in ("", e.resource) and name in e.name]
    return {"items": rows, "total": len(rows), "principal": principal, "resource": resource,
            "name": name}


def acl_of(data: Mapping[str, Any]) -> acl.Acl:
    """An ACL entry from its fields, each checked with its name in the error."""
    principal = fields.text(data, "principal")
    try:
        acl.check_principal(principal)
    except InvalidArgument:
        raise fields.bad("principal", f"must be user:<name>, role:<name> or *, got "
                                      f"{fields.shown(principal)}") from None
    operation = fields.choice(data, "operation", acl.OPERATIONS)
    resource = fields.choice(data, "resource", acl.RESOURCES)
    pattern = fields.choice(data, "pattern", acl.PATTERNS, "literal")
    effect = fields.choice(data, "effect", acl.EFFECTS, "allow")
    if resource == "cluster":
        name = fields.text(data, "name", required=False) or acl.CLUSTER_NAME
        if name != acl.CLUSTER_NAME or pattern != "literal":
            raise fields.bad("name", "of a cluster entry must be 'cluster', literal")
    else:  # a prefix may be empty: every name
        name = fields.name(data, "name", resource, required=pattern == "literal")
    return acl.Acl(principal, resource, name, operation, effect, pattern)


def add_acl(client: AdminClient, data: Mapping[str, Any]) -> dict:
    """``{"acl": the entry, "added": False if it was there already}``."""
    entry = acl_of(data)
    added = client.add_acl(entry.principal, entry.operation, entry.resource, entry.name,
                           effect=entry.effect, pattern=entry.pattern)
    return {"acl": _acl_row(entry), "added": added}


def remove_acl(client: AdminClient, data: Mapping[str, Any]) -> dict:
    entry = acl_of(data)
    client.remove_acl(entry.principal, entry.operation, entry.resource, entry.name,
                      effect=entry.effect, pattern=entry.pattern)
    return _acl_row(entry)
