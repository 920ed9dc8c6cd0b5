"""What one caller may do on one call: the ACL and IP-list decisions, and where handlers find them.

An :class:`Access` joins the caller's :class:`~lib.auth.identities.Identity` with the ACLs
(lib/auth/acl.py) and IP allow and deny lists (lib/auth/addresses.py) in force when the call
began, and refuses with PERMISSION_DENIED naming the principal, the operation and the
resource (or the address). The interceptor (lib/auth/server.py) takes the decisions a
method's rule asks for before the handler runs and leaves the call's Access in
:data:`current_access`, where a handler finds it for the checks only it can make (a
Subscribe's first message, a sink commit). Every refusal is reported for the audit log.
"""
from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass

from lib.auth.acl import CLUSTER_NAME, Authorizer
from lib.auth.addresses import AddressRules
from lib.auth.identities import ANONYMOUS, CLUSTER, Identity
from lib.auth.rules import Rule
from lib.errors import PermissionDenied, TubeqError


@dataclass(frozen=True)
class Access:
    """Who is calling and the ACLs that decide for them (None: auth = "none", all passes)."""

    identity: Identity
    authorizer: Authorizer | None = None
    # Told of every refusal check() raises, so refusals inside handlers (a Subscribe's first
    # message, a sink commit) reach the audit summaries like the interceptor's own.
    report: Callable[[TubeqError], None] | None = None
    peer: str = ""  # the caller's IP, when IP lists are in force
    addresses: AddressRules | None = None  # the IP allow/deny lists

    def _reachable(self, resource: str, name: str) -> bool:
        """Whether the IP lists let the caller reach the cluster or a topic (the cluster
        identity always passes)."""
        rules = self.addresses
        if rules is None or not rules.rules or resource not in ("cluster", "topic") \
                or self.identity.kind == CLUSTER:
            return True
        return rules.allowed(self.peer, resource, name if resource == "topic" else "")

    @property
    def quota_principal(self) -> str:
        """Whom byte-rate quotas charge the call to: its principal; nobody ("") for brokers
        and masters."""
        return "" if self.identity.kind == CLUSTER else self.identity.principal

    def allowed(self, operation: str, resource: str, name: str) -> bool:
        if not self._reachable(resource, name):
            return False
        return self._acl_allows(operation, resource, name)

    def _acl_allows(self, operation: str, resource: str, name: str) -> bool:
        if self.authorizer is None:
            return True
        i = self.identity
        return self.authorizer.allowed(i.principal, i.roles, i.kind, operation, resource, name)

    def check(self, operation: str, resource: str, name: str) -> None:
        """PermissionDenied naming who, what and which resource, unless allowed."""
        target = "the cluster" if resource == "cluster" else f"{resource} {name[:256]!r}"
        if not self._reachable(resource, name):
            self._refuse(PermissionDenied(
                f"address {self.peer or '(unknown)'} may not reach {target} (an IP allow or "
                "deny list: see tubeq ip list)", address=self.peer, resource=resource,
                name=name[:256]))
        if not self._acl_allows(operation, resource, name):
            self._refuse(PermissionDenied(
                f"{self.identity.principal} may not {operation} on {target} (no ACL allows "
                "it, or one denies it: see tubeq acl list)", operation=operation,
                resource=resource, name=name[:256]))

    def check_somewhere(self, operation: str, resource: str, what: str) -> None:
        """PermissionDenied unless ``operation`` is allowed on at least one name of
        ``resource`` (:meth:`~lib.auth.acl.Authorizer.allowed_somewhere`; the ACLs only: the
        IP lists of one topic are for the calls that name it). ``what``: the call, for the
        refusal's message."""
        i = self.identity
        if self.authorizer is None or self.authorizer.allowed_somewhere(
                i.principal, i.roles, i.kind, operation, resource):
            return
        self._refuse(PermissionDenied(
            f"{i.principal} may not {operation} on any {resource} ({what} needs {operation} on "
            f"at least one {resource}: no ACL allows it, or one denies it: see tubeq acl list)",
            operation=operation, resource=resource, name=""))

    def check_address(self) -> None:
        """PermissionDenied unless the cluster's IP lists let the caller in."""
        if not self._reachable("cluster", CLUSTER_NAME):
            self._refuse(PermissionDenied(
                f"address {self.peer or '(unknown)'} may not reach this cluster (an IP allow "
                "or deny list: see tubeq ip list)", address=self.peer, resource="cluster",
                name=CLUSTER_NAME))

    def _refuse(self, err: PermissionDenied) -> None:
        if self.report is not None:
            self.report(err)
        raise err

    def enforce(self, rule: Rule, request: object) -> None:
        """The needs of a method's rule, on the names its request gives."""
        if rule.own is not None and self.identity.kind in ("user", "apikey") \
                and rule.own(request) == self.identity.principal:
            return
        for need in rule.needs:
            for name in need.names(request):
                self.check(need.operation, need.resource, name)


OPEN = Access(ANONYMOUS)  # public methods, auth = "none"
current_access: ContextVar[Access] = ContextVar("tubeq_access", default=OPEN)
