"""Users, API keys and logins against a real master process, on a new cluster whose first
admin gets a generated password."""
from __future__ import annotations

import base64
import json
import stat
import time

import pytest

from lib.admin import AdminClient
from lib.auth import verify
from lib.errors import InvalidArgument, PrincipalExists, Unauthenticated, UnknownPrincipal
from tests.integration.test_consumer_common import wait_for


@pytest.fixture
def admin(cluster_factory):
    cluster = cluster_factory(0, given_admin_password=False)  # the bootstrap generates one
    with AdminClient(cluster.master_addresses, credentials=cluster.admin_credentials()) as client:
        yield cluster, client


def admin_password(cluster) -> str:
    """The bootstrap password, once the admin it belongs to is in the state (the file is
    written first, so that a crash in between never leaves an admin nobody can log in as)."""
    path = cluster.master_process(0).data_dir / "admin-password"
    with AdminClient(cluster.master_addresses, credentials=cluster.admin_credentials()) as client:
        for _ in range(100):
            if client.list_users():
                break
            time.sleep(0.1)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    return path.read_text().strip()


def test_a_new_cluster_has_one_admin_whose_generated_password_logs_in(admin):
    cluster, client = admin
    password = admin_password(cluster)
    assert len(password) >= 20
    got = client.login("admin", password)
    assert got.principal == "admin" and got.roles == ("admin",)
    assert [(u.name, u.kind, u.roles) for u in client.list_users()] == \
        [("admin", "user", ("admin",))]
    for user, wrong in (("admin", password + "x"), ("nobody", password)):
        with pytest.raises(Unauthenticated, match="wrong user or password") as info:
            client.login(user, wrong)
        assert password not in info.value.message
    entry = next(e for e in client.audit_log() if e.action == "add_user")
    assert (entry.principal, entry.target) == ("system", "admin")


def test_users_passwords_roles_and_api_keys_round_trip(admin):
    _, client = admin
    client.add_user("alice", "alice's long password", roles=["viewer"])
    with pytest.raises(PrincipalExists, match="user 'alice' already exists"):
        client.add_user("alice", "another long password")
    with pytest.raises(InvalidArgument, match="10 to 1024 characters"):
        client.add_user("bob", "short")
    assert client.login("alice", "alice's long password").roles == ("viewer",)
    client.set_password("alice", "a brand new password")
    with pytest.raises(Unauthenticated):
        client.login("alice", "alice's long password")
    assert client.set_roles("alice", ["producer", "viewer"]).roles == ("producer", "viewer")
    assert client.login("alice", "a brand new password").roles == ("producer", "viewer")

    svc = client.add_user("ingest", service=True, roles=["producer"])
    assert svc.kind == "service"
    info, key = client.create_api_key("ingest", "nightly loader")
    assert key.startswith(f"tqk_{info.key_id}_")
    assert [(k.key_id, k.principal, k.description) for k in client.list_api_keys()] == \
        [(info.key_id, "ingest", "nightly loader")]
    login = client.login(api_key=key)
    assert (login.principal, login.roles) == ("ingest", ("producer",))
    with pytest.raises(Unauthenticated, match="wrong user or password"):
        client.login("ingest", "any password at all")  # service accounts have none
    client.revoke_api_key(info.key_id)
    with pytest.raises(Unauthenticated, match="unknown or revoked API key"):
        client.login(api_key=key)
    with pytest.raises(UnknownPrincipal, match="unknown API key"):
        client.revoke_api_key(info.key_id)
    client.delete_user("alice")
    with pytest.raises(Unauthenticated):
        client.login("alice", "a brand new password")
    assert all(key not in str(e) for e in client.audit_log())


def test_a_rotation_signs_with_a_new_key(admin):
    cluster, client = admin
    password = admin_password(cluster)
    before = client.login("admin", password)
    new_key, retired = client.rotate_signing_key()
    assert retired == []  # the old key signed tokens that are still valid

    def kid(token: str) -> str:
        return json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))["kid"]

    assert kid(before.token) != new_key
    # The new key signs once the brokers have had it for a few heartbeats.
    after = wait_for(lambda: (lambda t: t if kid(t.token) == new_key else None)(
        client.login("admin", password)), 15, "logins signed with the new key")
    with pytest.raises(Unauthenticated, match="does not accept"):
        verify(after.token, {})  # a keyring without it refuses it
