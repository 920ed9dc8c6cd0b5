"""Who may call which method: the decision both interceptors take, before and as a call runs.

Given a call's method and metadata, :meth:`Gate.decide` finds the method's rule
(lib/auth/rules.py) and, without reading the request message, either lets it pass unchecked
(a public method, or ``auth = "none"``), names the caller, or refuses: UNAUTHENTICATED for a
missing or wrong credential, PERMISSION_DENIED for a method with no rule (fail closed) or a
client on a method only brokers and masters may call. :meth:`Gate.access` then builds the
call's :class:`~lib.auth.access.Access` from the ACLs and IP lists in force, and
:meth:`Gate.refused` counts every refusal for the audit log. It knows nothing of how a gRPC
server runs handlers: the sync and asyncio interceptors in lib/auth/server.py apply it.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import grpc

from lib.auth.access import Access
from lib.auth.acl import Authorizer
from lib.auth.addresses import AddressRules, peer_address
from lib.auth.client import AUTH_HEADER
from lib.auth.identities import CLUSTER, Authenticator, CertificateIdentities, Identity
from lib.auth.refusals import RefusalLog
from lib.auth.rules import RULES, Rule
from lib.errors import PermissionDenied, TubeqError, Unauthenticated

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Refused:
    """A call :meth:`Gate.decide` refused, and whom it identified (for the audit)."""

    error: TubeqError
    principal: str  # "" when nobody was identified


class Gate:
    """Who may call what: the decision both interceptors (sync and asyncio servers) take."""

    def __init__(self, authenticator: Authenticator | None,
                 authorizer: Callable[[], Authorizer] | None = None,
                 rules: Mapping[str, Rule] = RULES, refusals: RefusalLog | None = None,
                 certificates: CertificateIdentities | None = None,
                 addresses: Callable[[], AddressRules] | None = None) -> None:
        self.authenticator = authenticator  # None: auth = "none"
        self.authorizer = authorizer or Authorizer
        self.addresses = addresses or AddressRules  # the IP lists in force now
        self.rules = rules
        self.refusals = refusals  # summarised into the audit log
        self.certificates = certificates  # mutual TLS: a client certificate identifies

    def refused(self, principal: str, method: str, err: TubeqError, context) -> None:
        """Count a refusal for the audit (an Unavailable is no refusal). The process log gets
        it at DEBUG only: a flood of refused calls must not fill it, and the audit log has
        one summary per principal, method and reason per window."""
        if not isinstance(err, Unauthenticated | PermissionDenied):
            return
        log.debug("auth.refused", extra={"fields": {"method": method, "principal": principal,
                                                   "error": err.message}})
        if self.refusals is not None:
            try:
                peer = context.peer() or ""
            except Exception:  # noqa: BLE001 - a peer is nice to have, never worth a failure
                peer = ""
            self.refusals.record(principal, method, err.message, peer)

    def decide(self, details: grpc.HandlerCallDetails
               ) -> tuple[Identity | None, Rule] | Refused | None:
        """The caller and the method's rule, the refusal, or None: no check (a public
        method, or auth = "none"; the caller is anonymous). A None caller is the client
        certificate's, which only the call's context shows (:meth:`identity`)."""
        method = details.method
        rule = self.rules.get(method)
        if self.authenticator is None or (rule is not None and rule.kind == "public"):
            return None
        header = next((v for k, v in details.invocation_metadata or ()
                       if k == AUTH_HEADER), "")
        identity = None
        try:
            if rule is None:
                raise PermissionDenied(f"{method[:200]} has no access rule: refused")
            if not header and self.certificates is not None and rule.kind != "cluster":
                return None, rule
            identity = self.authenticator.identify(header if isinstance(header, str) else "")
            if rule.kind == "cluster" and identity.kind != CLUSTER:
                raise PermissionDenied(f"{method.rsplit('/', 1)[-1]} is for brokers and masters "
                                       "only")
        except TubeqError as err:
            return Refused(err, identity.principal if identity else "")
        return identity, rule

    def identity(self, identity: Identity | None, context) -> Identity:
        """The caller :meth:`decide` found, else its client certificate's."""
        return identity if identity is not None else self.certificates.identify(context)

    def access(self, identity: Identity, method: str, context,
               acls: bool = True) -> Access:
        """One call's access: the ACLs (unless ``acls`` is False: a public method) and IP
        lists in force now, and refusals reported for this call."""
        addresses = self.addresses()
        return Access(identity, self.authorizer() if acls else None,
                      lambda err: self.refused(identity.principal, method, err, context),
                      _peer_ip(context) if addresses.active else "", addresses)

    def screens_public(self) -> bool:
        """Whether public calls must pass the IP lists now (never with auth = "none")."""
        return self.authenticator is not None and self.addresses().active


def _peer_ip(context) -> str:
    try:
        return peer_address(context.peer() or "")
    except Exception:  # noqa: BLE001 - no peer: an IP allow list refuses it, a deny passes
        return ""
