"""The portal's session store and API clients drop what a deleted user or a revoked API key
held (tokens are checked by signature, so a cached one would outlive the revocation)."""
from __future__ import annotations

import pytest

from lib.errors import Unauthenticated
from lib.types import LoginResult
from portal_web.callers import REFUSAL_TTL_S, ApiCaller, ApiClients
from portal_web.sessions import SessionStore


class _Closing:
    def __init__(self, creds) -> None:
        self.creds, self.closed = creds, False

    def close(self) -> None:
        self.closed = True


class _Verifier:
    """Takes every credential but ``refused``, for ``ttl_s``; counts its checks."""

    def __init__(self, now: list[float], ttl_s: float = 60.0) -> None:
        self.now, self.ttl_s, self.checks = now, ttl_s, 0

    def __call__(self, creds) -> ApiCaller:
        self.checks += 1
        if "refused" in (creds.token or creds.api_key or ""):
            raise Unauthenticated("the master refused it")
        return ApiCaller("sam", ("viewer",), "token", self.now[0] + self.ttl_s,
                         _Closing(creds), creds)


def test_forgetting_a_revoked_key_drops_only_that_keys_client():
    clients = ApiClients(_Verifier([0.0]), clock=lambda: 0.0)
    revoked = clients.for_header("ApiKey tqk_0123abcd_secret-one").client
    other = clients.for_header("ApiKey tqk_99ff_secret-two").client
    bearer = clients.for_header("Bearer tq1.some.token").client
    assert clients.for_header("ApiKey tqk_0123abcd_secret-one").client is revoked  # kept
    assert clients.forget_api_key("0123abcd") == 1 and revoked.closed
    assert not other.closed and not bearer.closed
    assert clients.for_header("ApiKey tqk_0123abcd_secret-one").client is not revoked
    assert clients.forget_api_key("") == 0 and clients.forget_api_key("99") == 0


def test_an_api_caller_is_verified_once_until_its_credential_expires():
    now = [0.0]
    verify = _Verifier(now, ttl_s=60)
    clients = ApiClients(verify, clock=lambda: now[0])
    first = clients.for_header("Bearer tq1.good.token")
    assert clients.for_header("Bearer tq1.good.token") is first and verify.checks == 1
    now[0] = 61.0
    again = clients.for_header("Bearer tq1.good.token")
    assert again is not first and first.client.closed and verify.checks == 2


def test_a_refused_or_unknown_credential_is_unauthenticated_and_not_kept():
    now = [0.0]
    verify = _Verifier(now)
    clients = ApiClients(verify, clock=lambda: now[0])
    for header in ("Bearer tq1.refused.token", "Basic eA==", "Bearer ", "ApiKey"):
        with pytest.raises(Unauthenticated):
            clients.for_header(header)
    with pytest.raises(Unauthenticated, match="the master refused it"):
        clients.for_header("Bearer tq1.refused.token")
    assert verify.checks == 1  # the refusal is remembered a while: no second master call
    now[0] = REFUSAL_TTL_S + 1
    with pytest.raises(Unauthenticated):
        clients.for_header("Bearer tq1.refused.token")
    assert verify.checks == 2  # then asked again, never kept as a caller


def test_at_most_size_callers_are_kept_and_the_dropped_are_closed():
    clients = ApiClients(_Verifier([0.0]), size=2, clock=lambda: 0.0)
    made = [clients.for_header(f"Bearer tq1.token-{i}.x") for i in range(3)]
    assert made[0].client.closed and not made[1].client.closed and not made[2].client.closed


def test_closing_a_users_sessions_leaves_the_others():
    store = SessionStore(_Closing, ttl_s=60, max_sessions=10)
    far = 2**42
    sams = [store.open(LoginResult(f"t{i}", far, "sam", ())) for i in range(2)]
    vera = store.open(LoginResult("t3", far, "vera", ("viewer",)))
    assert store.close_user("sam") == 2 and all(s.client.closed for s in sams)
    assert store.get(sams[0].sid) is None and store.get(vera.sid) is vera
    assert not vera.client.closed


def test_a_tokens_claims_are_read_without_a_key_and_junk_is_unauthenticated():
    """The portal holds no signing key: it reads whose a token is (a master checks it)."""
    from lib.auth.tokens import issue, read_claims

    token, claims = issue("sam", ("viewer",), "user", "k1", b"s" * 32, ttl_s=60)
    assert read_claims(token) == claims
    for junk in ("whatever", "tq1.e30.AAAA", "tq1.!!.x", "tq2." + token[4:], "x" * 5000):
        with pytest.raises(Unauthenticated, match="malformed token"):
            read_claims(junk)
