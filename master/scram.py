"""SCRAM-SHA-256 (RFC 5802, RFC 7677) for Kafka clients, run by the active master.

A user's SCRAM credentials (salt, iterations, StoredKey, ServerKey: :func:`credentials`) are
made from the password when it is set (never stored in clear) and kept beside its scrypt hash
in the user's record. A broker's Kafka port relays the client's two messages
(``Security.ScramStep``, cluster credential only); the exchange in between lives here in
memory for :data:`EXCHANGE_TTL_S` (a failover mid-exchange costs the client one retry), so the
keys never leave the masters. A user unknown, or without SCRAM credentials (created before
they existed: set its password again), gets a server-first message like any other and fails
at the proof: a client cannot tell which users exist.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass

from lib.errors import Unauthenticated

MECHANISM = "SCRAM-SHA-256"
ITERATIONS = 4096  # RFC 7677's minimum, Kafka's default
EXCHANGE_TTL_S = 30.0
MAX_EXCHANGES = 10_000
MAX_MESSAGE = 4096
WRONG = "wrong user or password"


def _hmac(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha256).digest()


def credentials(password: str, salt: bytes | None = None,
                iterations: int = ITERATIONS) -> str:
    """``SCRAM-SHA-256$iterations$salt$StoredKey$ServerKey`` (base64) of a password."""
    salt = salt or secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    stored = hashlib.sha256(_hmac(salted, b"Client Key")).digest()
    server = _hmac(salted, b"Server Key")
    return "$".join([MECHANISM, str(iterations),
                     *(base64.b64encode(x).decode() for x in (salt, stored, server))])


@dataclass(frozen=True)
class Keys:
    iterations: int
    salt: bytes
    stored: bytes
    server: bytes


def parse(stored: str | None) -> Keys | None:
    if not stored or not stored.startswith(MECHANISM + "$"):
        return None
    _, iterations, salt, stored_key, server_key = stored.split("$")
    return Keys(int(iterations), *(base64.b64decode(x) for x in (salt, stored_key, server_key)))


@dataclass
class _Exchange:
    user: str
    keys: Keys | None
    first_bare: str
    server_first: str
    nonce: str
    expires: float


def _attributes(message: str) -> dict[str, str]:
    out = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise Unauthenticated("a SCRAM message is not a list of a=value attributes")
        out[key] = value
    return out


def _saslname(name: str) -> str:
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise Unauthenticated("a SCRAM user name has a bad escape")
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramExchanges:
    """The exchanges under way; thread-safe."""

    def __init__(self, clock=time.monotonic, nonce=lambda: secrets.token_urlsafe(18)) -> None:
        self._clock, self._nonce = clock, nonce
        self._lock = threading.Lock()
        self._open: dict[str, _Exchange] = {}

    def first(self, message: bytes, lookup) -> tuple[bytes, str]:
        """The server-first message for a client-first one, and the exchange's id;
        ``lookup(user)`` gives the user's stored credentials (or None)."""
        text = _text(message)
        gs2, _, bare = text.partition(",")
        authzid, _, bare = bare.partition(",")
        if gs2 not in ("n", "y") or (authzid and not authzid.startswith("a=")):
            raise Unauthenticated("SCRAM channel binding is not supported (gs2 header n,,)")
        attrs = _attributes(bare)
        if "n" not in attrs or "r" not in attrs or not attrs["r"]:
            raise Unauthenticated("a SCRAM client-first message needs n= and r=")
        if attrs.get("tokenauth") == "true":
            raise Unauthenticated("SCRAM delegation tokens are not supported")
        user = _saslname(attrs["n"])
        keys = parse(lookup(user))
        nonce = attrs["r"] + self._nonce()
        salt = keys.salt if keys else secrets.token_bytes(16)
        iterations = keys.iterations if keys else ITERATIONS
        server_first = f"r={nonce},s={base64.b64encode(salt).decode()},i={iterations}"
        exchange = secrets.token_urlsafe(16)
        with self._lock:
            now = self._clock()
            for key in [k for k, e in self._open.items() if e.expires < now]:
                del self._open[key]
            if len(self._open) >= MAX_EXCHANGES:
                raise Unauthenticated("too many SCRAM exchanges under way: retry")
            self._open[exchange] = _Exchange(user, keys, bare, server_first, nonce,
                                             now + EXCHANGE_TTL_S)
        return server_first.encode(), exchange

    def final(self, exchange: str, message: bytes) -> tuple[str, bytes]:
        """(user, server-final message) for a client-final message whose proof holds;
        Unauthenticated otherwise (the exchange is over either way)."""
        with self._lock:
            state = self._open.pop(exchange, None)
        if state is None or state.expires < self._clock():
            raise Unauthenticated("the SCRAM exchange is unknown or expired: start again")
        text = _text(message)
        attrs = _attributes(text)
        without_proof, sep, _ = text.rpartition(",p=")
        if not sep or attrs.get("r") != state.nonce or "p" not in attrs:
            raise Unauthenticated("a SCRAM client-final message needs the nonce and p=")
        if state.keys is None:
            raise Unauthenticated(WRONG)
        auth = f"{state.first_bare},{state.server_first},{without_proof}".encode()
        try:
            proof = base64.b64decode(attrs["p"], validate=True)
        except ValueError:
            raise Unauthenticated("a SCRAM proof is not base64") from None
        signature = _hmac(state.keys.stored, auth)
        if len(proof) != len(signature):
            raise Unauthenticated(WRONG)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.sha256(client_key).digest(), state.keys.stored):
            raise Unauthenticated(WRONG)
        verifier = base64.b64encode(_hmac(state.keys.server, auth)).decode()
        return state.user, f"v={verifier}".encode()


def _text(message: bytes) -> str:
    if len(message) > MAX_MESSAGE:
        raise Unauthenticated(f"a SCRAM message over {MAX_MESSAGE} bytes")
    try:
        return message.decode()
    except UnicodeDecodeError:
        raise Unauthenticated("a SCRAM message is not UTF-8") from None
