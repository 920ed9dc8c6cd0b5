"""Signed, expiring tokens: what a client presents on every call after logging in once.

``tq1.<claims>.<signature>``: the claims are base64url JSON (subject, roles, kind, key id,
issued and expiry times in ms), the signature is HMAC-SHA256 over ``tq1.<claims>`` with one of
the cluster's signing keys. Brokers verify tokens with the keyring the masters send them, with
no call to a master. Rotation without downtime: a new key signs from the moment it is added,
and the old one keeps verifying until it is retired (after the longest token lifetime), so
every token in flight stays valid through the rotation.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass

from lib.auth.credentials import b64url, unb64url
from lib.errors import Unauthenticated

VERSION = "tq1"
MAX_TOKEN_CHARS = 4096  # checked before any parsing: a huge header costs nothing to refuse
KINDS = ("user", "apikey", "cluster")


@dataclass(frozen=True)
class Claims:
    subject: str
    roles: tuple[str, ...]
    kind: str  # user, apikey, or cluster (brokers and masters among themselves)
    key_id: str
    issued_ms: int
    expires_ms: int


def new_signing_key() -> tuple[str, bytes]:
    """(key id, 256-bit secret)."""
    return secrets.token_hex(4), secrets.token_bytes(32)


def sign(claims: Claims, secret: bytes) -> str:
    body = json.dumps({"sub": claims.subject, "roles": list(claims.roles), "kind": claims.kind,
                       "kid": claims.key_id, "iat": claims.issued_ms, "exp": claims.expires_ms},
                      separators=(",", ":"), sort_keys=True).encode()
    head = f"{VERSION}.{b64url(body)}"
    return f"{head}.{b64url(_mac(secret, head))}"


def issue(subject: str, roles: tuple[str, ...], kind: str, key_id: str, secret: bytes,
          ttl_s: float, now: float | None = None) -> tuple[str, Claims]:
    issued = int((time.time() if now is None else now) * 1000)
    claims = Claims(subject, tuple(roles), kind, key_id, issued, issued + int(ttl_s * 1000))
    return sign(claims, secret), claims


def verify(token: str, keyring: Mapping[str, bytes], now: float | None = None) -> Claims:
    """The token's claims, or Unauthenticated saying what is wrong with it (never the token
    or a key)."""
    claims = read_claims(token)
    parts = token.split(".")
    try:
        signature = unb64url(parts[2])
    except ValueError:
        raise Unauthenticated("malformed token (its signature does not parse)") from None
    secret = keyring.get(claims.key_id)
    if secret is None:
        raise Unauthenticated("token signed with a key this cluster does not accept (rotated "
                              "out, or from another cluster): log in again")
    if not hmac.compare_digest(_mac(secret, f"{parts[0]}.{parts[1]}"), signature):
        raise Unauthenticated("token signature does not match (tampered with?)")
    if claims.kind not in KINDS:
        raise Unauthenticated("malformed token (unknown kind)")
    now_ms = int((time.time() if now is None else now) * 1000)
    if now_ms >= claims.expires_ms:
        raise Unauthenticated(f"token expired {(now_ms - claims.expires_ms) // 1000} s ago: "
                              "log in again")
    return claims


def read_claims(token: str) -> Claims:
    """What a token says, NOT verified: for a holder of no signing key (the portal) that has
    the token checked by a master, and then wants to know whose it is. Unauthenticated when it
    does not parse."""
    if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS:
        raise Unauthenticated(f"malformed token (more than {MAX_TOKEN_CHARS} characters)")
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != VERSION:
        raise Unauthenticated(f"malformed token (expected {VERSION}.<claims>.<signature>)")
    try:
        raw = json.loads(unb64url(parts[1]))
        return Claims(str(raw["sub"]), tuple(str(r) for r in raw["roles"]), str(raw["kind"]),
                      str(raw["kid"]), int(raw["iat"]), int(raw["exp"]))
    except (ValueError, KeyError, TypeError, RecursionError):
        raise Unauthenticated("malformed token (its claims do not parse)") from None


def _mac(secret: bytes, head: str) -> bytes:
    return hmac.new(secret, head.encode(), hashlib.sha256).digest()

