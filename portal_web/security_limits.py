"""Quotas (bytes per second per user or group) and IP allow/deny rules for the security pages
and their JSON API, as plain dicts; fields are checked with their names in the errors."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lib.admin import AdminClient
from lib.auth import addresses, quotas
from lib.errors import InvalidArgument
from portal_web import fields
from portal_web.views import plain


def _quota_row(quota: quotas.Quota) -> dict:
    return {**plain(quota), "describe": quota.describe(),
            "produce": human_rate(quota.produce_bytes_per_s),
            "consume": human_rate(quota.consume_bytes_per_s)}


def human_rate(rate: int) -> str:
    return quotas.human_rate(rate) if rate else "no limit"


def list_quotas(client: AdminClient) -> dict:
    rows = [_quota_row(q) for q in client.list_quotas()]
    return {"items": rows, "total": len(rows)}


def entity(value: str) -> str:
    """``user:<name>``, ``user:*``, ``group:<name>`` or ``group:*``."""
    kind, sep, name = value.partition(":")
    if not sep or kind not in quotas.KINDS:
        raise fields.bad("entity", f"must be user:<name>, user:*, group:<name> or group:*, "
                                   f"got {fields.shown(value)}")
    if name != "*":
        fields.check_name_field("entity", name, kind)
    return value


def rate(data: Mapping[str, Any], field: str) -> int:
    """Bytes per second: a number, or text such as 1048576, 512KiB, 10MB (empty: no limit)."""
    value = data.get(field)
    if value is None or value == "":
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        got = value
    elif isinstance(value, str):
        try:
            got = quotas.parse_rate(value)
        except InvalidArgument:
            raise fields.bad(field, f"must be bytes per second such as 1048576, 512KiB or "
                                    f"10MB, got {fields.shown(value)}") from None
    else:
        raise fields.bad(field, f"must be a number of bytes per second, got {fields.shown(value)}")
    if got and not quotas.MIN_RATE <= got <= quotas.MAX_RATE:
        raise fields.bad(field, f"must be 0 (no limit) or {quotas.MIN_RATE} to "
                                f"{quotas.MAX_RATE} bytes/s, got {got}")
    return got


def set_quota(client: AdminClient, who: str, data: Mapping[str, Any]) -> dict:
    """Set (replace) the quota of ``who``."""
    produce = rate(data, "produce_bytes_per_s")
    consume = rate(data, "consume_bytes_per_s")
    made = client.set_quota(entity(who), produce_bytes_per_s=produce,
                            consume_bytes_per_s=consume)
    return _quota_row(made)


def remove_quota(client: AdminClient, who: str) -> None:
    client.remove_quota(entity(who))


def _rule_row(rule: addresses.IpRule) -> dict:
    return {**plain(rule), "describe": rule.describe()}


def list_ip_rules(client: AdminClient) -> dict:
    rows = [_rule_row(r) for r in client.list_ip_rules()]
    return {"items": rows, "total": len(rows)}


def ip_rule_of(data: Mapping[str, Any]) -> addresses.IpRule:
    """A rule from network, effect, scope (cluster or topic), name and pattern."""
    network = fields.text(data, "network", max_len=64)
    try:
        network = str(addresses.parse_network(network))
    except InvalidArgument:
        raise fields.bad("network", f"must be an IP address or network such as 10.0.0.0/8, "
                                    f"192.168.1.7 or ::1, got {fields.shown(network)}") from None
    effect = fields.choice(data, "effect", addresses.EFFECTS, "allow")
    scope = fields.choice(data, "scope", addresses.SCOPES, "cluster")
    pattern = fields.choice(data, "pattern", addresses.PATTERNS, "literal")
    if scope == "cluster":
        if fields.text(data, "name", required=False) or pattern != "literal":
            raise fields.bad("name", "must be empty for a cluster rule (and pattern literal)")
        return addresses.make_rule(network, effect)
    name = fields.name(data, "name", "topic", required=pattern == "literal")
    return addresses.make_rule(network, effect, name, pattern == "prefix")


def add_ip_rule(client: AdminClient, data: Mapping[str, Any]) -> dict:
    """``{"rule": the rule, "added": False if it was there already}``. A cluster rule that
    would shut out the portal's own address is refused unless ``force``."""
    rule = ip_rule_of(data)
    added = client.add_ip_rule(rule.network, effect=rule.effect,
                               topic=rule.name if rule.scope == "topic" else None,
                               prefix=rule.pattern == "prefix", force=fields.flag(data, "force"))
    return {"rule": _rule_row(rule), "added": added}


def remove_ip_rule(client: AdminClient, data: Mapping[str, Any]) -> dict:
    rule = ip_rule_of(data)
    client.remove_ip_rule(rule.network, effect=rule.effect,
                          topic=rule.name if rule.scope == "topic" else None,
                          prefix=rule.pattern == "prefix")
    return _rule_row(rule)
