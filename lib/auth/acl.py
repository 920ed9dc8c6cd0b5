"""Who may do what: ACL entries and the decision masters and brokers take from them.

An entry names a principal (``user:<name>``, ``role:<name>``, or ``*`` for anyone logged in),
a resource (``topic``, ``group``, ``transactional_id`` or ``cluster``) by literal name or by
prefix, an operation and an effect. The decision is deny by default: a call passes only if
some ``allow`` entry matches and no ``deny`` entry does (deny wins, whatever the order). The
role ``admin`` passes everything (the first admin has it: a cluster cannot lock its operators
out), and so does the cluster identity brokers and masters present to each other.

Operations: produce, consume, describe, create, alter, delete, admin, write, and ``all``.
``write`` is the one operation of a ``transactional_id`` besides describe (a transactional
producer's InitProducerId, AddPartitionsToTxn and EndTxn need it, as Kafka's), and belongs to
no other resource. Every
operation but admin also grants describe on the same resource (a producer may look up the
routes of the topic it writes), as in Kafka. The decisions are cached per (principal, roles,
operation, resource, name) until the entries are replaced: a hot path costs one dict lookup.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from lib.errors import InvalidArgument
from lib.names import check_name
from lib.proto import security_pb2 as spb

OPERATIONS = ("produce", "consume", "describe", "create", "alter", "delete", "admin", "write",
              "all")
RESOURCES = ("topic", "group", "transactional_id", "cluster")
# The operations a transactional_id takes (write is its alone).
TXN_OPERATIONS = ("write", "describe", "all")
PATTERNS = ("literal", "prefix")
EFFECTS = ("allow", "deny")
SUPERUSER_ROLE = "admin"
CLUSTER_NAME = "cluster"  # the one resource of type cluster
MAX_ENTRIES = 10_000
_GRANT_DESCRIBE = frozenset(OPERATIONS) - {"describe", "admin"}


@dataclass(frozen=True, order=True)
class Acl:
    principal: str  # user:<name>, role:<name>, or *
    resource: str
    name: str
    operation: str
    effect: str = "allow"
    pattern: str = "literal"

    def __post_init__(self) -> None:
        check_principal(self.principal)
        _one_of("resource", self.resource, RESOURCES)
        _one_of("operation", self.operation, OPERATIONS)
        _one_of("effect", self.effect, EFFECTS)
        _one_of("pattern", self.pattern, PATTERNS)
        txn = self.resource == "transactional_id"
        if txn and self.operation not in TXN_OPERATIONS:
            raise InvalidArgument(f"a transactional_id ACL takes {', '.join(TXN_OPERATIONS)}, "
                                  f"not {self.operation}")
        if not txn and self.operation == "write":
            raise InvalidArgument(f"write is an operation of a transactional_id, not of a "
                                  f"{self.resource}")
        if self.resource == "cluster":
            if self.name != CLUSTER_NAME or self.pattern != "literal":
                raise InvalidArgument("a cluster ACL names the resource 'cluster', literally")
        elif self.pattern == "literal" or self.name:
            check_name(self.name, self.resource)  # a prefix may be empty: every name

    def matches(self, principals: frozenset[str], operation: str, resource: str,
                name: str) -> bool:
        if not self.applies(principals, operation, resource):
            return False
        return name == self.name if self.pattern == "literal" else name.startswith(self.name)

    def applies(self, principals: frozenset[str], operation: str, resource: str) -> bool:
        """Whether the entry speaks of these principals, operation and kind of resource
        (whatever the name)."""
        if self.resource != resource or self.principal not in principals:
            return False
        return self.operation in ("all", operation) or (
            operation == "describe" and self.operation in _GRANT_DESCRIBE)

    def covers(self, other: Acl) -> bool:
        """Whether every name ``other`` matches, this entry matches too."""
        if self.pattern == "prefix":
            return other.name.startswith(self.name)
        return other.pattern == "literal" and other.name == self.name

    def describe(self) -> str:
        what = f"{self.resource} {self.name}" + ("*" if self.pattern == "prefix" else "")
        return f"{self.effect} {self.principal} {self.operation} on {what}"


def check_principal(principal: str) -> str:
    if principal == "*":
        return principal
    kind, sep, name = principal.partition(":")
    if not sep or kind not in ("user", "role"):
        raise InvalidArgument(f"ACL principal must be user:<name>, role:<name> or *, got "
                              f"{principal[:80]!r}")
    check_name(name, kind)
    return principal


def _one_of(field: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise InvalidArgument(f"ACL {field} must be one of {', '.join(allowed)}, got "
                              f"{str(value)[:40]!r}")


class Authorizer:
    """The decision over one set of entries; :meth:`replace` swaps the set whole. Entries, their
    cached decisions and the version live in one tuple behind one reference, so a reader on
    another thread sees one set or the other, never a decision of the old set cached under
    the new one."""

    CACHE_SIZE = 65_536

    def __init__(self, entries: Iterable[Acl] = (), version: int = 0) -> None:
        self._state: tuple[tuple[Acl, ...], dict[tuple, bool], int] = ((), {}, -1)
        self.replace(entries, version)

    @property
    def entries(self) -> tuple[Acl, ...]:
        return self._state[0]

    @property
    def version(self) -> int:
        return self._state[2]

    def replace(self, entries: Iterable[Acl], version: int) -> None:
        entries = tuple(sorted(set(entries)))
        if len(entries) > MAX_ENTRIES:
            raise InvalidArgument(f"at most {MAX_ENTRIES} ACL entries")
        self._state = (entries, {}, version)

    def allowed(self, principal: str, roles: Iterable[str], kind: str, operation: str,
                resource: str, name: str) -> bool:
        return self._decision(principal, roles, kind, operation, resource, name)

    def allowed_somewhere(self, principal: str, roles: Iterable[str], kind: str,
                          operation: str, resource: str) -> bool:
        """Whether ``operation`` is allowed on at least one name of ``resource`` (Kafka's rule
        for an idempotent producer's id: write on any topic): an allow entry, literal or
        prefix, that no deny entry covers whole (a deny of the same name or of a prefix of
        it; a literal deny never covers a prefix, which matches endless names)."""
        return self._decision(principal, roles, kind, operation, resource, None)

    def _decision(self, principal: str, roles: Iterable[str], kind: str, operation: str,
                  resource: str, name: str | None) -> bool:
        """The cached decision on ``name`` (None: on some name)."""
        if kind == "cluster":
            return True
        roles = tuple(roles)
        if SUPERUSER_ROLE in roles:
            return True
        entries, cache, _ = self._state
        key = (principal, roles, operation, resource, name)
        hit = cache.get(key)
        if hit is None:
            hit = (_decide(entries, principal, roles, operation, resource, name)
                   if name is not None else
                   _decide_somewhere(entries, principal, roles, operation, resource))
            if len(cache) >= self.CACHE_SIZE:
                cache.clear()
            cache[key] = hit
        return hit


def _who(principal: str, roles: tuple[str, ...]) -> frozenset[str]:
    return frozenset({f"user:{principal}", "*", *(f"role:{r}" for r in roles)})


def _decide(entries: tuple[Acl, ...], principal: str, roles: tuple[str, ...], operation: str,
            resource: str, name: str) -> bool:
    who = _who(principal, roles)
    matching = [e for e in entries if e.matches(who, operation, resource, name)]
    return bool(matching) and all(e.effect == "allow" for e in matching)


def _decide_somewhere(entries: tuple[Acl, ...], principal: str, roles: tuple[str, ...],
                      operation: str, resource: str) -> bool:
    who = _who(principal, roles)
    mine = [e for e in entries if e.applies(who, operation, resource)]
    denies = [e for e in mine if e.effect == "deny"]
    return any(e.effect == "allow" and not any(d.covers(e) for d in denies) for e in mine)


def to_pb(entry: Acl) -> spb.AclEntry:
    return spb.AclEntry(principal=entry.principal, resource=entry.resource, name=entry.name,
                        operation=entry.operation, effect=entry.effect, pattern=entry.pattern)


def from_pb(msg: spb.AclEntry) -> Acl:
    """An entry from the wire (InvalidArgument names a bad field); empty effect and pattern
    mean allow and literal."""
    return Acl(msg.principal, msg.resource, msg.name, msg.operation, msg.effect or "allow",
               msg.pattern or "literal")
