"""Server side of authentication: one gRPC interceptor per process decides who is calling.

Every call but the public ones (a login, health checks, master status) must carry
``authorization: Bearer <token>`` (a client that logged in) or ``authorization: Cluster
<secret>`` (a broker or master: the cluster secret that ``cluster up`` makes, which no client
holds). The interceptor checks it before the handler runs, with no call to anything (tokens
are verified against the keyring held in memory), and refuses the call with UNAUTHENTICATED
naming what is wrong, without reading the request message (an anonymous caller cannot make
the server buffer and parse a large request). Then it takes the ACL decision the method's rule
asks for (lib/auth/rules.py) on the decoded request, and refuses with PERMISSION_DENIED naming
the principal, the operation and the resource; methods only brokers may call refuse every client
identity. A handler finds the caller and its rights in :data:`current_access`.

With ``auth = "none"`` (an explicit setting, logged loudly at start) every call passes, as
``anonymous``.
"""
from __future__ import annotations

import hmac
import inspect
import logging
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass

import grpc

from lib.auth.acl import CLUSTER_NAME, Authorizer
from lib.auth.addresses import AddressRules, peer_address
from lib.auth.client import AUTH_HEADER
from lib.auth.refusals import RefusalLog
from lib.auth.rules import PUBLIC, RULES, Rule
from lib.auth.tokens import verify
from lib.errors import PermissionDenied, TubeqError, Unauthenticated, Unavailable
from lib.wire_errors import abort_with, abort_with_async

log = logging.getLogger(__name__)
AUTH_MODES = ("token", "none")
CLUSTER = "cluster"
CLUSTER_SECRET_ENV = "TUBEQ_CLUSTER_SECRET"
MIN_CLUSTER_SECRET = 16


@dataclass(frozen=True)
class Identity:
    principal: str
    roles: tuple[str, ...]
    kind: str  # user, apikey, cert, cluster, or anonymous (auth = "none", public methods)


ANONYMOUS = Identity("anonymous", (), "anonymous")
CLUSTER_IDENTITY = Identity(CLUSTER, (), CLUSTER)


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


class KeyRing:
    """The signing keys a broker verifies with: its copy of the masters', replaced whole by
    every response of theirs (swapping one reference is atomic, so readers take no lock)."""

    def __init__(self) -> None:
        self._keys: Mapping[str, bytes] = {}

    def get(self) -> Mapping[str, bytes]:
        return self._keys

    def replace(self, keys: Mapping[str, bytes]) -> None:
        if dict(keys) != self._keys:
            self._keys = dict(keys)


class Authenticator:
    """Turns an ``authorization`` header into an Identity, or raises Unauthenticated.

    A verified token is remembered with the key that signed it until it expires, so a client
    costs one HMAC per token, not one per call; the entry stops counting the moment its key
    leaves the keyring (retired) or changes."""

    CACHE_SIZE = 4096

    def __init__(self, keyring: Callable[[], Mapping[str, bytes]], cluster_secret: str) -> None:
        self.keyring = keyring
        self._secret = cluster_secret.encode()
        self._verified: dict[str, tuple[Identity, str, bytes, int]] = {}

    def identify(self, header: str) -> Identity:
        if not header:
            raise Unauthenticated("no credentials: log in with a user and password or an API "
                                  "key (TUBEQ_USER + TUBEQ_PASSWORD, or TUBEQ_API_KEY)")
        scheme, _, value = header.partition(" ")
        if scheme == "Bearer":
            return self._bearer(value)
        if scheme == "Cluster":
            if self._secret and hmac.compare_digest(value.encode(), self._secret):
                return CLUSTER_IDENTITY
            raise Unauthenticated("wrong cluster credential")
        raise Unauthenticated("unsupported authorization scheme (expected Bearer <token>)")

    def _bearer(self, token: str) -> Identity:
        keys = self.keyring()
        hit = self._verified.get(token)
        if hit is not None:
            identity, key_id, secret, expires_ms = hit
            if keys.get(key_id) == secret and time.time() * 1000 < expires_ms:
                return identity
            self._verified.pop(token, None)
        if not keys:
            raise Unavailable("this server cannot check tokens yet (a broker gets the "
                              "signing keys from the masters when it registers): retry shortly")
        claims = verify(token, keys)
        identity = Identity(claims.subject, claims.roles, claims.kind)
        if len(self._verified) >= self.CACHE_SIZE:
            self._verified.clear()
        self._verified[token] = (identity, claims.key_id, keys[claims.key_id],
                                 claims.expires_ms)
        return identity


def auth_setting_problem(component: str, auth: str, cluster_secret: str) -> str:
    """What is wrong with a component's ``auth`` and cluster secret settings ('' if nothing)."""
    if auth not in AUTH_MODES:
        return f"{component}.auth must be one of {AUTH_MODES}"
    if auth != "none" and len(cluster_secret) < MIN_CLUSTER_SECRET:
        return (f"{component}: auth = 'token' needs cluster_secret (or ${CLUSTER_SECRET_ENV}) "
                f"of at least {MIN_CLUSTER_SECRET} characters: brokers and masters present it "
                "to each other")
    return ""


def announce_auth_off(logger: logging.Logger) -> None:
    """Said at the start of every process that runs with ``auth = "none"``."""
    logger.warning("security.auth_disabled", extra={"fields": {
        "warning": "auth = 'none': every call is allowed to anyone who can reach this port; "
                   "use only on a trusted network"}})


def cluster_header(secret: str) -> tuple[tuple[str, str], ...]:
    """Metadata a broker or master presents to its peers."""
    return ((AUTH_HEADER, f"Cluster {secret}"),) if secret else ()


class CertificateIdentities:
    """Under mutual TLS, a call without a token is its client certificate's: the CN is the
    principal, each O entry a role (the CA vouches for both, as Kubernetes reads them). A
    certificate is parsed once, then remembered."""

    CACHE_SIZE = 1024

    def __init__(self) -> None:
        self._known: dict[bytes, Identity] = {}

    def identify(self, context) -> Identity:
        pems = context.auth_context().get("x509_pem_cert") or ()
        if not pems:
            raise Unauthenticated("no credentials: log in with a user and password or an API "
                                  "key, or present a client certificate")
        pem = pems[0]
        identity = self._known.get(pem)
        if identity is None:
            identity = _certificate_identity(pem)
            if len(self._known) >= self.CACHE_SIZE:
                self._known.clear()
            self._known[pem] = identity
        return identity


def certificate_identities(tls) -> CertificateIdentities | None:
    """Identities from client certificates when a server's TLS asks for them (mutual TLS)."""
    return CertificateIdentities() if tls.enabled and tls.client_auth else None


def _certificate_identity(pem: bytes) -> Identity:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    from lib.names import check_name

    subject = x509.load_pem_x509_certificate(pem).subject
    cns = subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    try:
        principal = check_name(str(cns[0].value) if cns else "", "user")
        roles = tuple(check_name(str(a.value), "role")
                      for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME))
    except TubeqError as err:
        raise Unauthenticated(f"client certificate: {err.message}") from None
    return Identity(principal, roles, "cert")


class _Gate:
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
               ) -> tuple[Identity | None, Rule] | _Refused | None:
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
            return _Refused(err, identity.principal if identity else "")
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


@dataclass(frozen=True)
class _Refused:
    error: TubeqError
    principal: str  # "" when nobody was identified


class ServerAuth(grpc.ServerInterceptor, _Gate):
    """The interceptor of a synchronous gRPC server (the master)."""

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        decision = self.decide(handler_call_details)
        if isinstance(decision, _Refused):
            return _unread(handler, self._refusing(decision, method))
        if decision is None:
            return _rebuilt(handler, lambda behaviour: self._open(behaviour, method))
        identity, rule = decision
        return _rebuilt(handler, lambda behaviour: self._serving_as(behaviour, identity, rule,
                                                                    method))

    def _open(self, behaviour, method: str):
        def run(request, context):
            current_access.set(OPEN)  # the pool thread may hold a previous call's access
            if self.screens_public():
                try:
                    self.access(ANONYMOUS, method, context, acls=False).check_address()
                except PermissionDenied as err:  # reported by check_address()
                    abort_with(context, err)
            return behaviour(request, context)
        return run

    def _serving_as(self, behaviour, identity: Identity | None, rule: Rule, method: str):
        def run(request, context):
            try:
                caller = self.identity(identity, context)
            except Unauthenticated as err:
                self.refused("", method, err, context)
                abort_with(context, err)
            access = self.access(caller, method, context)
            current_access.set(access)  # a sync server runs each call on one pool thread
            try:
                access.check_address()
                if rule.needs:
                    access.enforce(rule, request)
            except PermissionDenied as err:  # reported by check()
                abort_with(context, err)
            return behaviour(request, context)
        return run

    def _refusing(self, refusal: _Refused, method: str):
        def run(_requests, context):  # never iterated: see _unread
            self.refused(refusal.principal, method, refusal.error, context)
            abort_with(context, refusal.error)
        return run


class AioServerAuth(grpc.aio.ServerInterceptor, _Gate):
    """The interceptor of an asyncio gRPC server (the broker). Each call runs in its own task,
    so the access set at its start stays with that call."""

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        decision = self.decide(handler_call_details)
        if decision is None:
            if not self.screens_public():
                return handler
            return _rebuilt(handler, lambda behaviour: self._serving_as(
                behaviour, ANONYMOUS, PUBLIC, method))
        if isinstance(decision, _Refused):
            return _unread(handler, self._refusing(decision, method))
        identity, rule = decision
        return _rebuilt(handler, lambda behaviour: self._serving_as(behaviour, identity, rule,
                                                                    method))

    def _serving_as(self, behaviour, identity: Identity | None, rule: Rule, method: str):
        if inspect.isasyncgenfunction(behaviour):
            async def stream(request, context):
                # streams are IN_HANDLER: the handler checks (all but the IP lists)
                access = await self._admitted(identity, rule, method, None, context)
                current_access.set(access)
                async for response in behaviour(request, context):
                    yield response
            return stream

        async def run(request, context):
            current_access.set(await self._admitted(identity, rule, method, request, context))
            return await behaviour(request, context)
        return run

    async def _admitted(self, identity: Identity | None, rule: Rule, method: str, request,
                        context) -> Access:
        """The call's access once the IP lists and the rule's needs let it through."""
        public = rule.kind == "public"
        caller = ANONYMOUS if public else await self._caller(identity, method, context)
        access = self.access(caller, method, context, acls=not public)
        try:
            access.check_address()
            if rule.needs and request is not None:
                access.enforce(rule, request)
        except PermissionDenied as err:  # reported by check()
            await abort_with_async(context, err)
        return access if not public else OPEN

    async def _caller(self, identity: Identity | None, method: str, context) -> Identity:
        try:
            return self.identity(identity, context)
        except Unauthenticated as err:
            self.refused("", method, err, context)
            await abort_with_async(context, err)
            raise  # abort raises; this line is never reached

    def _refusing(self, refusal: _Refused, method: str):
        async def run(_requests, context):  # never iterated: see _unread
            self.refused(refusal.principal, method, refusal.error, context)
            await abort_with_async(context, refusal.error)
        return run


_KINDS = (("unary_unary", grpc.unary_unary_rpc_method_handler),
          ("unary_stream", grpc.unary_stream_rpc_method_handler),
          ("stream_unary", grpc.stream_unary_rpc_method_handler),
          ("stream_stream", grpc.stream_stream_rpc_method_handler))


def _rebuilt(handler, wrap):
    for kind, factory in _KINDS:
        behaviour = getattr(handler, kind)
        if behaviour is not None:
            return factory(wrap(behaviour), request_deserializer=handler.request_deserializer,
                           response_serializer=handler.response_serializer)
    return handler


def _unread(handler, behaviour):
    """A handler that runs ``behaviour(request_iterator, context)`` without reading a request.

    For a refused call. A unary-request handler makes grpc read the whole request message
    before the behaviour runs: up to max_receive_message_length (64 MiB) buffered by the core,
    copied to Python and parsed, about three times its size at peak, for any anonymous caller.
    A streaming-request handler gets a lazy iterator instead; left unread, the core takes no
    more than the HTTP/2 flow-control window, and the abort resets the stream. Unary and
    streaming calls look the same on the wire, so the client sees only the status.
    (tests/integration/test_request_limits.py measures it.)"""
    response_streams = handler.unary_stream is not None or handler.stream_stream is not None
    factory = (grpc.stream_stream_rpc_method_handler if response_streams
               else grpc.stream_unary_rpc_method_handler)
    return factory(behaviour, request_deserializer=handler.request_deserializer,
                   response_serializer=handler.response_serializer)
