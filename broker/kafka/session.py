"""One Kafka connection's identity: SASL/PLAIN mapped to tubeq's users and API keys.

With the broker's ``auth = "none"`` every connection is anonymous and may do anything, as on
the gRPC port. Otherwise a connection must authenticate before any request but ApiVersions
and the SASL ones: ``SaslHandshake`` (v1) names PLAIN, ``SaslAuthenticate`` carries
``authzid NUL user NUL password``. The broker logs in at the active master with those (a user
and password; or user ``apikey`` and a ``tqk_...`` API key as the password), verifies the
token it gets as every gRPC call's is verified, and from then on the connection acts as that
principal under the cluster's ACLs and IP lists. The token's expiry is the session's: past it
the broker logs in again with the same credentials, so a deleted user or a revoked key stops
working within a token's lifetime, as on the gRPC port.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from lib.auth.access import OPEN, Access
from lib.auth.identities import Authenticator
from lib.errors import TubeqError, Unauthenticated
from lib.proto import security_pb2 as spb

API_KEY_USER = "apikey"  # PLAIN user whose password is a tubeq API key
RENEW_BEFORE_MS = 30_000
MAX_PLAIN_BYTES = 4096


@dataclass
class Session:
    """What a connection is allowed; ``access`` is None until SASL succeeds (auth on)."""

    peer: str
    access: Access | None
    mechanism: str = ""
    login: spb.LoginRequest | None = None
    expires_ms: int = 0
    token: str = ""  # the master's token for this principal: admin calls go as the user
    closing: bool = False  # answer this request, then close (a failed authentication)
    raw_sasl: bool = False  # a SaslHandshake v0 was answered: a bare PLAIN message is next
    gone: Callable[[], bool] = lambda: False  # the client hung up (its reader saw EOF)

    @classmethod
    def opened(cls, peer: str, auth_on: bool, gone: Callable[[], bool]) -> Session:
        return cls(peer, None if auth_on else OPEN, gone=gone)

    def needs_renewal(self) -> bool:
        return self.login is not None and time.time() * 1000 > self.expires_ms - RENEW_BEFORE_MS


def plain_login(auth_bytes: bytes) -> spb.LoginRequest:
    """The master Login a SASL/PLAIN message asks for; Unauthenticated when it is not one."""
    if len(auth_bytes) > MAX_PLAIN_BYTES:
        raise Unauthenticated(f"SASL/PLAIN message over {MAX_PLAIN_BYTES} bytes")
    parts = auth_bytes.split(b"\x00")
    if len(parts) != 3 or not parts[1] or not parts[2]:
        raise Unauthenticated("SASL/PLAIN message is not authzid NUL user NUL password")
    try:
        user, password = parts[1].decode(), parts[2].decode()
    except UnicodeDecodeError:
        raise Unauthenticated("SASL/PLAIN user and password must be UTF-8") from None
    if user == API_KEY_USER:
        return spb.LoginRequest(api_key=password)
    return spb.LoginRequest(user=user, password=password)


class Authenticating:
    """Turns a Login into the session's Access: ``login(request)`` calls the active master
    (blocking), ``access(identity)`` builds the ACL-checking Access for the connection."""

    def __init__(self, login: Callable[[spb.LoginRequest], spb.LoginResponse],
                 authenticator: Authenticator, access: Callable[..., Access]) -> None:
        self._login, self._authenticator, self._access = login, authenticator, access

    def authenticate(self, session: Session, request: spb.LoginRequest) -> None:
        """Log in and verify; the session's access is replaced only on success."""
        request.on_behalf_of = session.peer  # its failed logins count, not the broker's
        try:
            res = self._login(request)
        except TubeqError as err:
            raise Unauthenticated(f"authentication failed: {err.message}") from None
        identity = self._authenticator.identify(f"Bearer {res.token}")
        session.access = self._access(identity, session.peer)
        session.login, session.expires_ms, session.token = request, res.expires_ms, res.token
