"""Passwords and API keys: how they are made, stored (hashed) and checked.

Passwords are stored as scrypt hashes (standard library, memory-hard, salted per user), so a
copy of the master state does not give them away cheaply. API keys are random 256-bit secrets:
brute force is hopeless whatever the hash, so they are stored as SHA-256 and checked in
microseconds (GitHub's tokens work the same way). Every comparison is constant-time.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from lib.errors import InvalidArgument, Unauthenticated

MIN_PASSWORD_CHARS = 10
MAX_PASSWORD_CHARS = 1024
# scrypt cost: ~50 ms and 16 MiB per check on this class of machine (OWASP's minimum is
# N=2**17 with r=8 for interactive logins on servers; logins here happen once per token).
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
MAX_SCRYPT_N = 2**20  # a stored hash asking for more is refused rather than obeyed
API_KEY_PREFIX = "tqk"


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def check_password_policy(password: str) -> None:
    if not isinstance(password, str) or not MIN_PASSWORD_CHARS <= len(password) <= \
            MAX_PASSWORD_CHARS:
        raise InvalidArgument(f"a password must be {MIN_PASSWORD_CHARS} to "
                              f"{MAX_PASSWORD_CHARS} characters")


def generate_password() -> str:
    """A random password for a new cluster's admin (about 143 bits)."""
    return secrets.token_urlsafe(18)


def hash_password(password: str) -> str:
    """``scrypt$N$r$p$salt$hash``: what the master state keeps instead of the password."""
    check_password_policy(password)
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P,
                            maxmem=64 << 20, dklen=32)
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${b64url(salt)}${b64url(digest)}"


def verify_password(password: str, stored: str) -> bool:
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        n, r, p = int(n), int(r), int(p)
    except ValueError:
        return False
    if scheme != "scrypt" or not (1 < n <= MAX_SCRYPT_N and 0 < r <= 16 and 0 < p <= 4) or \
            not isinstance(password, str) or len(password) > MAX_PASSWORD_CHARS:
        return False
    got = hashlib.scrypt(password.encode(), salt=unb64url(salt), n=n, r=r, p=p,
                         maxmem=256 << 20, dklen=32)
    return hmac.compare_digest(got, unb64url(digest))


class VerifiedPasswords:
    """Recent successful password checks, so that logging in again costs a keyed hash
    instead of scrypt's ~50 ms of CPU and 16 MiB.

    Every new client logs in (a producer, a consumer, each CLI call, each Spark task's
    reader), and a master answering them all with scrypt spends its cores on it. As
    Elasticsearch's realm cache does, a success is remembered for ``ttl_s`` under the stored
    hash (a changed password is a miss) as an HMAC of the password whose key never leaves
    this process; a wrong password always pays scrypt (and the caller's login backoff)."""

    def __init__(self, ttl_s: float = 600.0, size: int = 1024) -> None:
        self.ttl_s, self.size = ttl_s, size
        self._key = secrets.token_bytes(32)
        self._lock = threading.Lock()
        self._seen: OrderedDict[str, tuple[bytes, float]] = OrderedDict()

    def verify(self, password: str, stored: str) -> bool:
        if not isinstance(password, str) or len(password) > MAX_PASSWORD_CHARS:
            return False
        mac = hmac.new(self._key, password.encode(), hashlib.sha256).digest()
        now = time.monotonic()
        with self._lock:
            hit = self._seen.get(stored)
        if hit is not None and hit[1] > now and hmac.compare_digest(hit[0], mac):
            return True
        if not verify_password(password, stored):
            return False
        with self._lock:
            self._seen[stored] = (mac, now + self.ttl_s)
            self._seen.move_to_end(stored)
            while len(self._seen) > self.size:
                self._seen.popitem(last=False)
        return True


@dataclass(frozen=True)
class ApiKey:
    """A new API key: ``text`` is shown to its owner once; the state keeps ``key_id`` and
    ``digest``."""

    key_id: str
    text: str
    digest: str


def new_api_key() -> ApiKey:
    key_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
    return ApiKey(key_id, f"{API_KEY_PREFIX}_{key_id}_{secret}", _key_digest(secret))


def parse_api_key(text: str) -> tuple[str, str]:
    """(key id, secret) of an API key's text; Unauthenticated when it is not one."""
    parts = text.split("_", 2) if isinstance(text, str) and len(text) < 256 else []
    if len(parts) != 3 or parts[0] != API_KEY_PREFIX or not parts[1] or not parts[2]:
        raise Unauthenticated(f"malformed API key (expected {API_KEY_PREFIX}_<id>_<secret>)")
    return parts[1], parts[2]


def verify_api_key(secret: str, digest: str) -> bool:
    return hmac.compare_digest(_key_digest(secret), digest)


def _key_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()
