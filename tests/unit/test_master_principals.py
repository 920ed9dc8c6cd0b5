"""master/principals.py through MetaState: users, API keys and signing keys as replicated
commands, surviving a reopen, with the hashes and secrets kept out of every listing."""
from __future__ import annotations

import pytest

from lib.auth import hash_password, new_api_key, new_signing_key, verify_password
from lib.errors import InvalidArgument, InvalidName, PrincipalExists, UnknownPrincipal
from master.state import MetaState


@pytest.fixture
def state(tmp_path):
    s = MetaState(tmp_path / "meta", map_size=1 << 24)
    yield s
    s.close()


def add_user(state, name, password="a long password", roles=("admin",), **extra):
    return state.apply({"op": "add_user", "time_ms": 5, "name": name, "roles": list(roles),
                        "password": hash_password(password) if password else None, **extra})


def test_users_are_added_listed_without_hashes_and_survive_a_reopen(tmp_path):
    s = MetaState(tmp_path / "m", map_size=1 << 24)
    assert add_user(s, "alice", audit={"principal": "boot", "action": "add_user"}) == {
        "kind": "user", "roles": ["admin"], "created_ms": 5, "updated_ms": 5}
    add_user(s, "ci", password=None, roles=["producer"], kind="service")
    s.close()
    s = MetaState(tmp_path / "m", map_size=1 << 24)
    assert s.principals.users() == {
        "alice": {"kind": "user", "roles": ["admin"], "created_ms": 5, "updated_ms": 5},
        "ci": {"kind": "service", "roles": ["producer"], "created_ms": 5, "updated_ms": 5}}
    assert verify_password("a long password", s.principals.password_hash("alice"))
    assert s.principals.password_hash("ci") is None
    assert s.audit(10)[-1]["action"] == "add_user"
    s.close()


def test_bad_user_commands_change_nothing_and_say_why(state):
    add_user(state, "alice")
    with pytest.raises(PrincipalExists, match="user 'alice' already exists"):
        add_user(state, "alice")
    with pytest.raises(InvalidName, match="user name"):
        add_user(state, "no/slash")
    with pytest.raises(InvalidArgument, match="service account has none"):
        add_user(state, "svc", kind="service")
    with pytest.raises(InvalidArgument, match="a user needs a password"):
        add_user(state, "nopw", password=None)
    with pytest.raises(InvalidArgument, match="at most 32 names"):
        add_user(state, "many", roles=[f"r{i}" for i in range(33)])
    with pytest.raises(UnknownPrincipal, match="unknown user 'bob'"):
        state.apply({"op": "set_password", "time_ms": 6, "name": "bob", "password": "x"})
    assert list(state.principals.users()) == ["alice"]


def test_password_and_roles_change_and_delete_takes_the_users_api_keys(state):
    add_user(state, "alice")
    state.apply({"op": "set_password", "time_ms": 7, "name": "alice",
                 "password": hash_password("another long one")})
    assert verify_password("another long one", state.principals.password_hash("alice"))
    assert state.apply({"op": "set_roles", "time_ms": 8, "name": "alice",
                        "roles": ["viewer", "viewer"]})["roles"] == ["viewer"]
    key = new_api_key()
    made = state.apply({"op": "create_api_key", "time_ms": 9, "principal": "alice",
                        "key_id": key.key_id, "digest": key.digest, "description": "ci"})
    assert made == {"key_id": key.key_id, "principal": "alice", "description": "ci",
                    "created_ms": 9}
    assert "digest" not in state.principals.api_keys()[key.key_id]
    assert state.principals.api_key(key.key_id)["digest"] == key.digest
    state.apply({"op": "delete_user", "time_ms": 10, "name": "alice"})
    assert state.principals.users() == {} and state.principals.api_keys() == {}
    with pytest.raises(UnknownPrincipal, match="unknown user 'alice'"):
        state.apply({"op": "create_api_key", "time_ms": 11, "principal": "alice",
                     "key_id": "k", "digest": "d"})


def test_api_keys_are_revoked_once(state):
    add_user(state, "svc", password=None, kind="service")
    key = new_api_key()
    state.apply({"op": "create_api_key", "time_ms": 9, "principal": "svc",
                 "key_id": key.key_id, "digest": key.digest})
    assert state.apply({"op": "revoke_api_key", "time_ms": 10, "key_id": key.key_id}) == {
        "key_id": key.key_id, "principal": "svc"}
    with pytest.raises(UnknownPrincipal, match="unknown API key"):
        state.apply({"op": "revoke_api_key", "time_ms": 11, "key_id": key.key_id})


def test_the_newest_signing_key_signs_and_old_ones_verify_until_retired(tmp_path):
    s = MetaState(tmp_path / "m", map_size=1 << 24)
    assert s.principals.signer() is None
    (k1, s1), (k2, s2) = new_signing_key(), new_signing_key()
    for kid, secret, t in ((k1, s1, 1), (k2, s2, 2)):
        assert "secret" not in s.apply({"op": "add_signing_key", "time_ms": t, "key_id": kid,
                                        "secret": secret.hex()})
    assert s.principals.signer() == (k2, s2)
    assert s.principals.signer(now_ms=5, settle_ms=4) == (k1, s1)  # k2 still reaching brokers
    assert s.principals.signer(now_ms=6, settle_ms=4) == (k2, s2)
    assert s.principals.signer(now_ms=1, settle_ms=100) == (k1, s1)  # none settled: the oldest
    assert s.principals.keyring() == {k1: s1, k2: s2}
    with pytest.raises(InvalidArgument, match="newest signing key cannot be retired"):
        s.apply({"op": "retire_signing_key", "time_ms": 3, "key_id": k2})
    s.apply({"op": "retire_signing_key", "time_ms": 3, "key_id": k1})
    s.close()
    s = MetaState(tmp_path / "m", map_size=1 << 24)
    assert s.principals.keyring() == {k2: s2}
    assert s.principals.signing_keys() == [{"key_id": k2, "created_ms": 2}]
    for i in range(10):  # at most 8 live keys: the oldest drop out
        s.apply({"op": "add_signing_key", "time_ms": 10 + i, "key_id": f"n{i}",
                 "secret": "00" * 32})
    assert [k["key_id"] for k in s.principals.signing_keys()] == [f"n{i}" for i in range(2, 10)]
    s.close()


def test_a_snapshot_restore_brings_the_principals_along(tmp_path):
    import os

    a = MetaState(tmp_path / "a", map_size=1 << 24)
    add_user(a, "alice")
    fd = os.open(tmp_path / "snap.mdb", os.O_CREAT | os.O_WRONLY, 0o600)
    a.copy_to(fd)
    os.close(fd)
    b = MetaState(tmp_path / "b", map_size=1 << 24)
    b.restore_from(tmp_path / "snap.mdb")
    assert list(b.principals.users()) == ["alice"]
    b.apply({"op": "delete_user", "time_ms": 9, "name": "alice"})  # handlers use the new one
    assert b.principals.users() == {}
    a.close()
    b.close()


def test_acls_are_added_once_removed_versioned_and_survive_a_reopen(tmp_path):
    s = MetaState(tmp_path / "m", map_size=1 << 24)
    alice = {"principal": "user:alice", "resource": "topic", "name": "orders",
             "operation": "produce"}
    etl = {"principal": "role:etl", "resource": "topic", "name": "raw-", "operation": "consume",
           "pattern": "prefix", "effect": "allow"}
    assert s.apply({"op": "add_acl", "time_ms": 1, "acl": alice})["added"]
    assert not s.apply({"op": "add_acl", "time_ms": 2, "acl": alice})["added"]  # no change
    s.apply({"op": "add_acl", "time_ms": 3, "acl": etl})
    assert s.principals.acls()[0] == 2
    s.close()
    s = MetaState(tmp_path / "m", map_size=1 << 24)
    version, entries = s.principals.acls()
    assert version == 2 and {e.principal for e in entries} == {"user:alice", "role:etl"}
    s.apply({"op": "remove_acl", "time_ms": 4, "acl": alice})
    with pytest.raises(InvalidArgument, match="no ACL entry 'allow user:alice produce on topic "
                                              "orders'"):
        s.apply({"op": "remove_acl", "time_ms": 5, "acl": alice})
    with pytest.raises(InvalidArgument, match="operation must be one of"):
        s.apply({"op": "add_acl", "time_ms": 6, "acl": {**alice, "operation": "read"}})
    assert s.principals.acls()[0] == 3 and len(s.principals.acls()[1]) == 1
    s.close()


def test_quotas_are_set_replaced_removed_versioned_and_survive_a_reopen(tmp_path):
    s = MetaState(tmp_path / "m", map_size=1 << 24)
    alice = {"entity": "user:alice", "produce_bytes_per_s": 1 << 20}
    s.apply({"op": "set_quota", "time_ms": 1, "quota": alice})
    s.apply({"op": "set_quota", "time_ms": 2, "quota": {**alice, "consume_bytes_per_s": 4096}})
    s.apply({"op": "set_quota", "time_ms": 3,
             "quota": {"entity": "group:*", "consume_bytes_per_s": 1 << 30}})
    assert s.principals.acls()[0] == 0  # the ACLs keep their own version
    s.close()
    s = MetaState(tmp_path / "m", map_size=1 << 24)
    version, entries = s.principals.quotas()
    assert version == 3 and [(q.entity, q.produce_bytes_per_s, q.consume_bytes_per_s)
                             for q in entries] == [("group:*", 0, 1 << 30),
                                                   ("user:alice", 1 << 20, 4096)]
    s.apply({"op": "remove_quota", "time_ms": 4, "entity": "group:*"})
    with pytest.raises(InvalidArgument, match="no quota for 'group:\\*'"):
        s.apply({"op": "remove_quota", "time_ms": 5, "entity": "group:*"})
    with pytest.raises(InvalidArgument, match="consume only"):
        s.apply({"op": "set_quota", "time_ms": 6,
                 "quota": {"entity": "group:g", "produce_bytes_per_s": 1 << 20}})
    with pytest.raises(InvalidArgument, match="malformed quota"):
        s.apply({"op": "set_quota", "time_ms": 7, "quota": {"entity": "user:a", "rate": 5}})
    assert s.principals.quota_version == 4 and len(s.principals.quotas()[1]) == 1
    s.close()


def test_ip_rules_are_added_once_removed_versioned_and_survive_a_reopen(tmp_path):
    s = MetaState(tmp_path / "m", map_size=1 << 24)
    allow = {"network": "10.0.0.0/8"}
    deny = {"network": "10.9.0.0/16", "effect": "deny", "scope": "topic", "name": "payments"}
    assert s.apply({"op": "add_ip_rule", "time_ms": 1, "rule": allow})["added"]
    assert not s.apply({"op": "add_ip_rule", "time_ms": 2, "rule": allow})["added"]
    s.apply({"op": "add_ip_rule", "time_ms": 3, "rule": deny})
    s.close()
    s = MetaState(tmp_path / "m", map_size=1 << 24)
    version, rules = s.principals.ip_rules()
    assert version == 2 and [r.describe() for r in rules] == [
        "allow 10.0.0.0/8 on the cluster", "deny 10.9.0.0/16 on topic payments"]
    s.apply({"op": "remove_ip_rule", "time_ms": 4, "rule": allow})
    with pytest.raises(InvalidArgument, match="no IP rule 'allow 10.0.0.0/8 on the cluster'"):
        s.apply({"op": "remove_ip_rule", "time_ms": 5, "rule": allow})
    with pytest.raises(InvalidArgument, match="not an IP address"):
        s.apply({"op": "add_ip_rule", "time_ms": 6, "rule": {"network": "nowhere"}})
    assert s.principals.ip_version == 3
    s.close()
