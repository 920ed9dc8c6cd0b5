"""``tubeq user|apikey|acl|quota|ip|rotate-signing-key ...``: users, API keys, ACLs, quotas, IP
allow/deny lists and token signing keys.

Passwords are read from a prompt (hidden, typed twice) or from ``--password-stdin`` for
scripts, never from a command-line argument, which ``ps`` and shell history would show.
"""
from __future__ import annotations

import sys

import click

from lib.auth.acl import OPERATIONS, RESOURCES, Acl
from lib.auth.addresses import make_rule
from lib.auth.quotas import human_rate, parse_rate
from lib.cli.common import admin, emit, print_rows
from lib.errors import InvalidArgument

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
password_stdin = click.option("--password-stdin", is_flag=True,
                              help="Read the password from the first line of stdin.")


def _password(from_stdin: bool) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\n")
    return click.prompt("Password", hide_input=True, confirmation_prompt=True)


def _users_table(users) -> None:
    print_rows([{"user": u.name, "kind": u.kind, "roles": ",".join(u.roles)} for u in users],
               ["user", "kind", "roles"])


@click.group()
def user() -> None:
    """Add, list, change and delete users and service accounts."""


@user.command("add")
@click.argument("name")
@click.option("--role", "roles", multiple=True, help="A role (repeat for several).")
@click.option("--service", is_flag=True, help="A service account: no password, API keys only.")
@password_stdin
@json_option
@click.pass_context
def user_add(ctx, name, roles, service, password_stdin, as_json) -> None:
    """Add a user (asks for its password) or a service account."""
    password = None if service else _password(password_stdin)
    emit(admin(ctx).add_user(name, password, roles, service=service), as_json,
         lambda u: _users_table([u]))


@user.command("list")
@json_option
@click.pass_context
def user_list(ctx, as_json) -> None:
    """Every user and service account with its roles (never a password hash)."""
    emit(admin(ctx).list_users(), as_json, _users_table)


@user.command("passwd")
@click.argument("name")
@password_stdin
@click.pass_context
def user_passwd(ctx, name, password_stdin) -> None:
    """Set a user's password."""
    admin(ctx).set_password(name, _password(password_stdin))
    click.echo(f"password of {name} changed")


@user.command("roles")
@click.argument("name")
@click.argument("roles", nargs=-1)
@json_option
@click.pass_context
def user_roles(ctx, name, roles, as_json) -> None:
    """Replace a user's roles."""
    emit(admin(ctx).set_roles(name, roles), as_json, lambda u: _users_table([u]))


@user.command("delete")
@click.argument("name")
@click.pass_context
def user_delete(ctx, name) -> None:
    """Delete a user and every API key it owns."""
    admin(ctx).delete_user(name)
    click.echo(f"user {name} deleted")


@click.group()
def apikey() -> None:
    """Create, list and revoke API keys."""


def _keys_table(keys) -> None:
    print_rows([{"key_id": k.key_id, "principal": k.principal, "description": k.description}
                for k in keys], ["key_id", "principal", "description"])


@apikey.command("create")
@click.argument("principal")
@click.option("--description", default="", help="What the key is for.")
@click.pass_context
def apikey_create(ctx, principal, description) -> None:
    """Create an API key for a user or service account; it is printed this once."""
    info, key = admin(ctx).create_api_key(principal, description)
    click.echo(f"key id  {info.key_id}\napi key {key}\n(shown once: store it now)")


@apikey.command("list")
@json_option
@click.pass_context
def apikey_list(ctx, as_json) -> None:
    """Every API key (ids and owners; never the keys)."""
    emit(admin(ctx).list_api_keys(), as_json, _keys_table)


@apikey.command("revoke")
@click.argument("key_id")
@click.pass_context
def apikey_revoke(ctx, key_id) -> None:
    """Revoke an API key: logins with it fail from now on."""
    admin(ctx).revoke_api_key(key_id)
    click.echo(f"API key {key_id} revoked")


@click.command("rotate-signing-key")
@click.pass_context
def rotate_signing_key(ctx) -> None:
    """Sign new tokens with a fresh key; keys replaced over a token lifetime ago retire."""
    key_id, retired = admin(ctx).rotate_signing_key()
    click.echo(f"signing key {key_id} is in use; retired: {', '.join(retired) or 'none'}")


@click.group()
def acl() -> None:
    """Add, list and remove ACL entries (deny by default; deny wins)."""


def _acl_args(fn):
    """PRINCIPAL OPERATION RESOURCE [NAME] [--prefix] [--deny]: "user:alice produce topic
    orders" reads as the entry it makes."""
    for decorator in reversed((
            click.argument("principal"),
            click.argument("operation", type=click.Choice(OPERATIONS)),
            click.argument("resource", type=click.Choice(RESOURCES)),
            click.argument("name", required=False, default=""),
            click.option("--prefix", is_flag=True,
                         help="NAME is a prefix: every topic or group whose name starts with "
                              "it (an empty prefix: all of them)."),
            click.option("--deny", is_flag=True, help="A deny entry (deny wins over allow)."))):
        fn = decorator(fn)
    return fn


def _acl_fields(principal, operation, resource, name, prefix, deny) -> dict:
    if resource == "cluster":
        name = name or "cluster"
    elif not name and not prefix:
        raise click.UsageError(f"name the {resource} (or give --prefix with a prefix, possibly "
                               "empty)")
    return {"principal": principal, "operation": operation, "resource": resource, "name": name,
            "effect": "deny" if deny else "allow", "pattern": "prefix" if prefix else "literal"}


@acl.command("add")
@_acl_args
@click.pass_context
def acl_add(ctx, principal, operation, resource, name, prefix, deny) -> None:
    """Add an entry, e.g. ``tubeq acl add user:alice produce topic orders`` or
    ``tubeq acl add role:etl consume topic raw- --prefix``."""
    fields = _acl_fields(principal, operation, resource, name, prefix, deny)
    added = admin(ctx).add_acl(**fields)
    entry = Acl(**fields).describe()
    click.echo(f"added: {entry}" if added else f"already there: {entry}")


@acl.command("remove")
@_acl_args
@click.pass_context
def acl_remove(ctx, principal, operation, resource, name, prefix, deny) -> None:
    """Remove the entry with exactly these fields."""
    fields = _acl_fields(principal, operation, resource, name, prefix, deny)
    admin(ctx).remove_acl(**fields)
    click.echo(f"removed: {Acl(**fields).describe()}")


@acl.command("list")
@json_option
@click.pass_context
def acl_list(ctx, as_json) -> None:
    """Every ACL entry."""
    emit(admin(ctx).list_acls(), as_json, lambda entries: print_rows(
        [{"effect": e.effect, "principal": e.principal, "operation": e.operation,
          "resource": e.resource, "name": e.name + ("*" if e.pattern == "prefix" else "")}
         for e in entries], ["effect", "principal", "operation", "resource", "name"]))


@click.group()
def quota() -> None:
    """Set, list and remove byte-rate quotas (enforced by each broker on its own traffic)."""


def _rate(_ctx, _param, value: str | None) -> int:
    try:
        return 0 if value is None else parse_rate(value)
    except InvalidArgument as err:
        raise click.BadParameter(err.message) from None


@quota.command("set")
@click.argument("entity")
@click.option("--produce", callback=_rate, help="Produce bytes/s (e.g. 1MiB, 500KB; 0: none).")
@click.option("--consume", callback=_rate, help="Consume bytes/s (e.g. 10MiB; 0: none).")
@click.pass_context
def quota_set(ctx, entity, produce, consume) -> None:
    """Limit ENTITY: user:<name>, user:* (each user without its own), group:<name> or group:*
    (consumers of the group), e.g. ``tubeq quota set user:etl --produce 5MiB``."""
    made = admin(ctx).set_quota(entity, produce_bytes_per_s=produce,
                                consume_bytes_per_s=consume)
    click.echo(f"quota set: {made.describe()}")


@quota.command("remove")
@click.argument("entity")
@click.pass_context
def quota_remove(ctx, entity) -> None:
    """Remove the quota of ENTITY."""
    admin(ctx).remove_quota(entity)
    click.echo(f"quota removed: {entity}")


@quota.command("list")
@json_option
@click.pass_context
def quota_list(ctx, as_json) -> None:
    """Every quota."""
    def rate(value: int) -> str:
        return human_rate(value) if value else "-"
    emit(admin(ctx).list_quotas(), as_json, lambda entries: print_rows(
        [{"entity": q.entity, "produce": rate(q.produce_bytes_per_s),
          "consume": rate(q.consume_bytes_per_s)} for q in entries],
        ["entity", "produce", "consume"]))


@click.group()
def ip() -> None:
    """Add, list and remove IP allow/deny rules for the cluster or for topics."""


def _ip_args(fn):
    """NETWORK [--deny] [--topic NAME [--prefix]]"""
    for decorator in reversed((
            click.argument("network"),
            click.option("--deny", is_flag=True, help="A deny rule (deny wins over allow)."),
            click.option("--topic", default=None,
                         help="The rule covers this topic (else the whole cluster)."),
            click.option("--prefix", is_flag=True,
                         help="--topic is a prefix: every topic whose name starts with it."))):
        fn = decorator(fn)
    return fn


def _ip_fields(network, deny, topic, prefix) -> dict:
    if prefix and topic is None:
        raise click.UsageError("--prefix needs --topic")
    return {"network": network, "effect": "deny" if deny else "allow", "topic": topic,
            "prefix": prefix}


@ip.command("add")
@_ip_args
@click.option("--force", is_flag=True,
              help="Add a cluster rule even if it refuses the address you call from.")
@click.pass_context
def ip_add(ctx, network, deny, topic, prefix, force) -> None:
    """Add a rule, e.g. ``tubeq ip add 10.0.0.0/8`` (the cluster allows only 10/8 once any
    allow rule exists) or ``tubeq ip add 10.9.0.0/16 --deny --topic payments``."""
    fields = _ip_fields(network, deny, topic, prefix)
    added = admin(ctx).add_ip_rule(**fields, force=force)
    click.echo(("added: " if added else "already there: ") + make_rule(**fields).describe())


@ip.command("remove")
@_ip_args
@click.pass_context
def ip_remove(ctx, network, deny, topic, prefix) -> None:
    """Remove the rule with exactly these fields."""
    fields = _ip_fields(network, deny, topic, prefix)
    admin(ctx).remove_ip_rule(**fields)
    click.echo(f"removed: {make_rule(**fields).describe()}")


@ip.command("list")
@json_option
@click.pass_context
def ip_list(ctx, as_json) -> None:
    """Every IP rule."""
    emit(admin(ctx).list_ip_rules(), as_json, lambda rules: print_rows(
        [{"effect": r.effect, "network": r.network,
          "scope": "cluster" if r.scope == "cluster" else
          f"topic {r.name}" + ("*" if r.pattern == "prefix" else "")} for r in rules],
        ["effect", "network", "scope"]))


def register(main: click.Group) -> None:
    for cmd in (user, apikey, acl, quota, ip, rotate_signing_key):
        main.add_command(cmd)
