"""The portal's session store and API clients drop what a deleted user or a revoked API key
held (tokens are checked by signature, so a cached one would outlive the revocation)."""
from __future__ import annotations

from lib.types import LoginResult
from portal_web.sessions import ApiClients, SessionStore


class _Closing:
    def __init__(self, creds) -> None:
        self.creds, self.closed = creds, False

    def close(self) -> None:
        self.closed = True


def test_forgetting_a_revoked_key_drops_only_that_keys_client():
    clients = ApiClients(_Closing)
    revoked = clients.for_header("ApiKey tqk_0123abcd_secret-one")
    other = clients.for_header("ApiKey tqk_99ff_secret-two")
    bearer = clients.for_header("Bearer tq1.some.token")
    assert clients.for_header("ApiKey tqk_0123abcd_secret-one") is revoked  # kept for reuse
    assert clients.forget_api_key("0123abcd") == 1 and revoked.closed
    assert not other.closed and not bearer.closed
    assert clients.for_header("ApiKey tqk_0123abcd_secret-one") is not revoked  # logs in anew
    assert clients.forget_api_key("") == 0 and clients.forget_api_key("99") == 0


def test_closing_a_users_sessions_leaves_the_others():
    store = SessionStore(_Closing, ttl_s=60, max_sessions=10)
    far = 2**42
    sams = [store.open(LoginResult(f"t{i}", far, "sam", ())) for i in range(2)]
    vera = store.open(LoginResult("t3", far, "vera", ("viewer",)))
    assert store.close_user("sam") == 2 and all(s.client.closed for s in sams)
    assert store.get(sams[0].sid) is None and store.get(vera.sid) is vera
    assert not vera.client.closed
