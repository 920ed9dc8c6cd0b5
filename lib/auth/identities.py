"""Who is calling: a call's credentials turned into an :class:`Identity`, or Unauthenticated.

A client presents ``authorization: Bearer <token>`` (it logged in), a broker or master
``authorization: Cluster <secret>`` (the cluster secret, which no client holds), and under
mutual TLS a client may present a certificate instead. Each is checked with no call to
anything: tokens against the signing keys held in memory (:class:`KeyRing` on a broker), the
secret by a constant-time comparison, a certificate by reading the subject the CA vouched for.
What the identity may then do is :mod:`lib.auth.access`'s question.
"""
from __future__ import annotations

import hmac
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from lib.auth.tokens import verify
from lib.errors import TubeqError, Unauthenticated, Unavailable

CLUSTER = "cluster"


@dataclass(frozen=True)
class Identity:
    principal: str
    roles: tuple[str, ...]
    kind: str  # user, apikey, cert, cluster, or anonymous (auth = "none", public methods)


ANONYMOUS = Identity("anonymous", (), "anonymous")
CLUSTER_IDENTITY = Identity(CLUSTER, (), CLUSTER)


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
