"""One Kafka connection's identity: SASL/PLAIN and SCRAM-SHA-256 mapped to tubeq's users.

With the broker's ``auth = "none"`` every connection is anonymous and may do anything, as on
the gRPC port. Otherwise a connection must authenticate before any request but ApiVersions
and the SASL ones: ``SaslHandshake`` (v1) names PLAIN, ``SaslAuthenticate`` carries
``authzid NUL user NUL password``. The broker logs in at the active master with those (a user
and password; or user ``apikey`` and a ``tqk_...`` API key as the password), verifies the
token it gets as every gRPC call's is verified, and from then on the connection acts as that
principal under the cluster's ACLs and IP lists. The token's expiry is the session's: past it
the broker logs in again with the same credentials, so a deleted user or a revoked key stops
working within a token's lifetime, as on the gRPC port. SCRAM-SHA-256 (``SaslHandshake``
naming it): the broker relays the client's two messages to the active master, which holds the
users' SCRAM keys (master/scram.py) and answers the final one with a token; the broker never
sees a password. A SCRAM session ends with its token: SaslAuthenticate tells the client
(``session_lifetime_ms``, KIP-368) to authenticate again before, else the connection closes.
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
    raw_sasl: bool = False  # a SaslHandshake v0 was answered: bare SASL messages are next
    scram_exchange: str = ""  # a SCRAM exchange under way (its first message answered)
    gone: Callable[[], bool] = lambda: False  # the client hung up (its reader saw EOF)

    @classmethod
    def opened(cls, peer: str, auth_on: bool, gone: Callable[[], bool]) -> Session:
        return cls(peer, None if auth_on else OPEN, gone=gone)

    def needs_renewal(self) -> bool:
        return self.login is not None and time.time() * 1000 > self.expires_ms - RENEW_BEFORE_MS

    def expired(self) -> bool:
        """A SCRAM session past its token (no password to log in again with: the client
        authenticates again, KIP-368, or reconnects)."""
        return self.login is None and self.expires_ms > 0 and \
            time.time() * 1000 > self.expires_ms


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
                 authenticator: Authenticator, access: Callable[..., Access],
                 scram: Callable[[spb.ScramStepRequest], spb.ScramStepResponse] | None = None
                 ) -> None:
        self._login, self._authenticator, self._access = login, authenticator, access
        self._scram = scram

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

    def scram_step(self, session: Session, message: bytes) -> bytes:
        """One SCRAM-SHA-256 message of the client, relayed to the active master; the
        server's answer. After the final one the session acts as the principal."""
        request = spb.ScramStepRequest(message=message, exchange=session.scram_exchange,
                                       on_behalf_of=session.peer)
        session.scram_exchange = ""
        try:
            res = self._scram(request)
        except TubeqError as err:
            raise Unauthenticated(f"authentication failed: {err.message}") from None
        if not res.done:
            session.scram_exchange = res.exchange
            return res.message
        identity = self._authenticator.identify(f"Bearer {res.token}")
        session.access = self._access(identity, session.peer)
        session.login, session.expires_ms, session.token = None, res.expires_ms, res.token
        return res.message
