"""API callers: who sends ``Authorization: Bearer <token>`` or ``ApiKey <key>``, checked
before any view runs.

A credential is verified the first time the portal meets it, so a made-up one is a 401 on
every route, those answered without the caller's own call to a master (``whoami``,
``masters``, the masters of ``overview``) included:

- an API key logs in: the master checks it and answers whose it is, with a token that the
  caller's client then presents (a key's login is not repeated on every request);
- a token says whose it is (its claims, read by :func:`lib.auth.tokens.read_claims`); the
  portal holds no signing key, so a master checks the signature and expiry with a call any
  authenticated caller may make (``ListGroups``: it answers only the groups the caller may
  see, so it costs little and needs no ACL).

A verified caller is kept, with its :class:`AdminClient`, until its token expires (an API
key then logs in again), at most ``size`` of them; a refusal is remembered for a few seconds.
A flood of made-up headers costs one master call each and holds little. Keys are a hash of
the header (and an API key's id, so a revoked key's caller can be dropped): no secret is held
as a key.
"""
from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from lib.admin import AdminClient
from lib.auth.client import Credentials
from lib.auth.credentials import parse_api_key
from lib.auth.tokens import read_claims
from lib.errors import Unauthenticated

ClientFactory = Callable[[Credentials], AdminClient]
RELOGIN_MARGIN_S = 60.0  # an API key's token is renewed this long (at most half its life)
# before it expires
REFUSAL_TTL_S = 10.0  # a refused credential is answered 401 without a master call meanwhile
MAX_REFUSALS = 1024


@dataclass
class ApiCaller:
    """A verified API caller: whose credential it is, and its client (presenting a token)."""

    principal: str
    roles: tuple[str, ...]
    via: str  # "token" or "api key"
    expires_at: float  # wall clock, seconds: then the caller is verified again
    client: AdminClient = field(repr=False)
    credentials: Credentials = field(repr=False)  # the token, for readers and producers


def credentials_of(header: str) -> Credentials | None:
    """The credentials of an Authorization header (``Bearer <token>`` or ``ApiKey <key>``);
    None when it is no credential we take."""
    scheme, _, value = header.partition(" ")
    value = value.strip()
    if not value or scheme not in ("Bearer", "ApiKey"):
        return None
    return Credentials(token=value) if scheme == "Bearer" else Credentials(api_key=value)


def verifier(public: AdminClient, make_client: ClientFactory
             ) -> Callable[[Credentials], ApiCaller]:
    """Checks a credential with the masters (see the module docstring): the caller, or
    Unauthenticated (a 401) naming what is wrong."""

    def verify(creds: Credentials) -> ApiCaller:
        if creds.api_key:
            parse_api_key(creds.api_key)  # a malformed key costs no call
            login = public.login(api_key=creds.api_key)
            token = Credentials(token=login.token)
            life = login.expires_ms / 1000 - time.time()
            renew_at = time.time() + life - min(RELOGIN_MARGIN_S, life / 2)
            return ApiCaller(login.principal, tuple(login.roles), "api key", renew_at,
                             make_client(token), token)
        claims = read_claims(creds.token)
        client = make_client(creds)
        try:
            client.list_groups()  # the master refuses a forged, tampered or expired token
        except BaseException:
            client.close()
            raise
        return ApiCaller(claims.subject, claims.roles, "token", claims.expires_ms / 1000,
                         client, creds)

    return verify


def _key_id(api_key: str) -> str:
    try:
        return parse_api_key(api_key)[0]
    except Unauthenticated:
        return ""


class ApiClients:
    """Verified API callers by Authorization header, thread-safe, the least recently used
    dropped past ``size``."""

    def __init__(self, verify: Callable[[Credentials], ApiCaller], size: int = 256,
                 clock: Callable[[], float] = time.time) -> None:
        self._verify = verify
        self._size = size
        self._clock = clock
        self._lock = threading.Lock()
        self._callers: OrderedDict[str, ApiCaller] = OrderedDict()
        self._refused: OrderedDict[str, tuple[float, str]] = OrderedDict()  # until, why

    def for_header(self, header: str) -> ApiCaller:
        """The verified caller of an Authorization header; Unauthenticated when it is no
        credential we take or the masters refuse it."""
        creds = credentials_of(header)
        if creds is None:
            raise Unauthenticated("Authorization must be 'Bearer <token>' or 'ApiKey <key>'")
        key = f"{_key_id(creds.api_key) if creds.api_key else ''}/" \
            f"{hashlib.sha256(header.encode()).hexdigest()}"
        with self._lock:
            caller = self._callers.get(key)
            if caller is not None and self._clock() < caller.expires_at:
                self._callers.move_to_end(key)
                return caller
            stale = self._callers.pop(key, None)
        if stale is not None:
            stale.client.close()
        caller = self._verify_once(key, creds)
        if self._clock() >= caller.expires_at:
            caller.client.close()
            raise Unauthenticated("the credential has expired: log in again")
        with self._lock:
            held = self._callers.get(key)  # verified meanwhile by a request of the same caller
            if held is not None and self._clock() < held.expires_at:
                evicted, kept = [caller], held
            else:
                self._callers[key] = kept = caller
                evicted = [self._callers.popitem(last=False)[1]
                           for _ in range(len(self._callers) - self._size)]
        for gone in evicted:
            gone.client.close()
        return kept

    def _verify_once(self, key: str, creds: Credentials) -> ApiCaller:
        """``verify``, with a refusal remembered for :data:`REFUSAL_TTL_S`: a client that
        repeats a wrong API key costs the masters one failed login, not one a request (the
        masters slow down logins from an address that fails many: the portal's own)."""
        now = self._clock()
        with self._lock:
            refused = self._refused.get(key)
        if refused is not None and now < refused[0]:
            raise Unauthenticated(refused[1])
        try:
            return self._verify(creds)
        except Unauthenticated as err:
            with self._lock:
                self._refused[key] = (now + REFUSAL_TTL_S, err.message)
                while len(self._refused) > MAX_REFUSALS:
                    self._refused.popitem(last=False)
            raise

    def forget_api_key(self, key_id: str) -> int:
        """Drop the callers of a revoked API key: its token would keep working here until it
        expires (tokens are checked by signature, not against the key). How many there were."""
        with self._lock:
            gone = [k for k in self._callers if key_id and k.startswith(f"{key_id}/")]
            callers = [self._callers.pop(k) for k in gone]
        for caller in callers:
            caller.client.close()
        return len(callers)

    def close_all(self) -> None:
        with self._lock:
            callers, self._callers = list(self._callers.values()), OrderedDict()
        for caller in callers:
            caller.client.close()
