"""IP allow and deny lists (TubeMQ's black and white lists), per cluster and per topic.

A rule names a network (``10.0.0.0/8``, ``192.168.1.7``, ``::1``), an effect (allow or deny)
and a scope: the whole cluster, or topics by literal name or by prefix. For each scope that
applies to a call (the cluster always; a topic when the call names one), deny wins, and once
any allow rule covers the scope, only the networks it allows pass (an allow list). The cluster
identity (brokers and masters among themselves) passes whatever the lists say, so a rule cannot
cut the cluster apart. Decisions are cached per (address, scope, name) until the rules change.
"""
from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

from lib.errors import InvalidArgument
from lib.names import check_name
from lib.proto import security_pb2 as spb

SCOPES = ("cluster", "topic")
EFFECTS = ("allow", "deny")
PATTERNS = ("literal", "prefix")
MAX_ENTRIES = 10_000
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, order=True)
class IpRule:
    network: str  # CIDR, normalised: 10.0.0.0/8, 192.168.1.7/32
    effect: str = "allow"
    scope: str = "cluster"
    name: str = ""  # the topic, or topic prefix ("" for the cluster)
    pattern: str = "literal"

    def __post_init__(self) -> None:
        object.__setattr__(self, "network", str(parse_network(self.network)))
        for field, value, allowed in (("effect", self.effect, EFFECTS),
                                      ("scope", self.scope, SCOPES),
                                      ("pattern", self.pattern, PATTERNS)):
            if value not in allowed:
                raise InvalidArgument(f"IP rule {field} must be one of {', '.join(allowed)}, "
                                      f"got {str(value)[:40]!r}")
        if self.scope == "cluster":
            if self.name or self.pattern != "literal":
                raise InvalidArgument("a cluster IP rule names no topic")
        elif self.pattern == "literal" or self.name:
            check_name(self.name, "topic")  # a prefix may be empty: every topic

    @cached_property
    def net(self) -> Network:
        return ipaddress.ip_network(self.network)

    def covers(self, scope: str, name: str) -> bool:
        if scope != self.scope:
            return False
        if scope == "cluster":
            return True
        return name == self.name if self.pattern == "literal" else name.startswith(self.name)

    def describe(self) -> str:
        where = ("the cluster" if self.scope == "cluster" else
                 f"topic {self.name}" + ("*" if self.pattern == "prefix" else ""))
        return f"{self.effect} {self.network} on {where}"


def make_rule(network: str, effect: str = "allow", topic: str | None = None,
              prefix: bool = False) -> IpRule:
    """A rule for the cluster (``topic`` None) or for a topic (a prefix with ``prefix``)."""
    if topic is None:
        return IpRule(network, effect)
    return IpRule(network, effect, "topic", topic, "prefix" if prefix else "literal")


def parse_network(text: str) -> Network:
    try:
        return ipaddress.ip_network(str(text).strip(), strict=False)
    except ValueError:
        raise InvalidArgument(f"{str(text)[:60]!r} is not an IP address or network such as "
                              "10.0.0.0/8, 192.168.1.7 or ::1") from None


def peer_address(peer: str) -> str:
    """The IP of a gRPC peer string (``ipv4:127.0.0.1:5000``, ``ipv6:[::1]:5000``); "" when
    it has none (a Unix socket)."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rsplit(":", 1)[0]
    if kind == "ipv6":
        return rest.rsplit(":", 1)[0].strip("[]")
    return ""


def to_pb(rule: IpRule) -> spb.IpRule:
    return spb.IpRule(network=rule.network, effect=rule.effect, scope=rule.scope,
                      name=rule.name, pattern=rule.pattern)


def from_pb(rule: spb.IpRule) -> IpRule:
    return IpRule(rule.network, rule.effect or "allow", rule.scope or "cluster", rule.name,
                  rule.pattern or "literal")


def decide(rules: Iterable[IpRule], address: str, scope: str, name: str = "") -> bool:
    """Whether ``address`` may reach ``scope`` (and topic ``name``) under ``rules``."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        ip = None  # not an IP (a Unix socket): only an allow list can refuse it
    allow_list = False
    allowed = False
    for rule in rules:
        if not rule.covers(scope, name):
            continue
        inside = ip is not None and ip.version == rule.net.version and ip in rule.net
        if rule.effect == "deny":
            if inside:
                return False
        else:
            allow_list = True
            allowed = allowed or inside
    return allowed or not allow_list


class AddressRules:
    """The rules a server enforces; replaced whole (masters: from their state; brokers: from
    heartbeat responses when the version differs)."""

    CACHE_SIZE = 65_536

    def __init__(self, rules: Iterable[IpRule] = (), version: int = -1) -> None:
        self.rules = tuple(rules)
        self.version = version
        self._cache: dict[tuple[str, str, str], bool] = {}

    @property
    def active(self) -> bool:
        return bool(self.rules)

    def replace(self, rules: Iterable[IpRule], version: int) -> None:
        self.rules, self.version, self._cache = tuple(rules), version, {}

    def allowed(self, address: str, scope: str, name: str = "") -> bool:
        if not self.rules:
            return True
        key = (address, scope, name)
        hit = self._cache.get(key)
        if hit is None:
            if len(self._cache) >= self.CACHE_SIZE:
                self._cache = {}
            hit = self._cache[key] = decide(self.rules, address, scope, name)
        return hit
