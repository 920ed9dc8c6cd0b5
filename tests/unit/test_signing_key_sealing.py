"""Signing keys sealed with the cluster secret in the master's state (master/sealing.py)."""
from __future__ import annotations

import pytest

from lib.auth import new_signing_key
from master import security
from master.sealing import PREFIX, Sealer
from master.state import MetaState

SECRET_A = "cluster-secret-a-0123456789abcdef"
SECRET_B = "cluster-secret-b-0123456789abcdef"


def test_a_sealed_key_opens_only_with_its_secret_and_its_id():
    key_id, secret = new_signing_key()
    sealed = Sealer(SECRET_A).seal(key_id, secret)
    assert sealed.startswith(PREFIX) and secret.hex() not in sealed
    assert Sealer(SECRET_A).unseal(key_id, sealed) == secret
    assert Sealer(SECRET_B).unseal(key_id, sealed) is None
    assert Sealer().unseal(key_id, sealed) is None
    assert Sealer(SECRET_A).unseal("other-id", sealed) is None  # bound to its key id
    flipped = sealed[:-1] + ("0" if sealed[-1] != "0" else "1")
    assert Sealer(SECRET_A).unseal(key_id, flipped) is None
    assert Sealer(SECRET_A).unseal(key_id, PREFIX + "zz") is None
    assert Sealer(SECRET_A).seal(key_id, secret) != sealed  # a fresh nonce each time


def test_without_a_cluster_secret_keys_stay_plain_and_plain_keys_always_load():
    key_id, secret = new_signing_key()
    assert Sealer().seal(key_id, secret) == secret.hex() and not Sealer().can_seal
    assert Sealer(SECRET_A).unseal(key_id, secret.hex()) == secret


def _add(state: MetaState, stored: str, key_id: str, t: int = 1):
    return state.apply({"op": "add_signing_key", "time_ms": t, "key_id": key_id,
                        "secret": stored})


def test_the_state_files_hold_sealed_keys_only(tmp_path):
    state = MetaState(tmp_path / "m", map_size=1 << 24, sealer=Sealer(SECRET_A))
    key_id, secret = new_signing_key()
    _add(state, state.principals.seal(key_id, secret), key_id)
    assert state.principals.keyring() == {key_id: secret}
    assert state.principals.signer() == (key_id, secret)
    state.close()
    raw = (tmp_path / "m" / "data.mdb").read_bytes()
    assert secret not in raw and secret.hex().encode() not in raw
    assert key_id.encode() in raw  # (it is there, sealed)
    reopened = MetaState(tmp_path / "m", map_size=1 << 24, sealer=Sealer(SECRET_A))
    assert reopened.principals.keyring() == {key_id: secret}
    reopened.close()


def test_keys_stored_in_clear_by_an_older_master_load_and_get_sealed(tmp_path):
    state = MetaState(tmp_path / "m", map_size=1 << 24, sealer=Sealer(SECRET_A))
    (k1, s1), (k2, s2) = new_signing_key(), new_signing_key()
    _add(state, s1.hex(), k1, 1)  # as a master before sealing replicated it
    _add(state, state.principals.seal(k2, s2), k2, 2)
    assert state.principals.keyring() == {k1: s1, k2: s2}
    resealed = state.principals.resealed()
    assert list(resealed) == [k1] and resealed[k1].startswith(PREFIX)

    security.bootstrap(state, state.apply, str(tmp_path))  # what the active master does
    assert state.principals.resealed() == {}
    assert state.principals.keyring() == {k1: s1, k2: s2}  # still the same keys
    resealing = [a for a in state.audit(100) if a["action"] == "reseal_signing_keys"]
    assert [(a["principal"], a["target"]) for a in resealing] == [("system", k1)]
    state.close()
    reopened = MetaState(tmp_path / "m", map_size=1 << 24, sealer=Sealer(SECRET_B))
    assert reopened.principals.keyring() == {}  # both sealed now: useless without SECRET_A
    reopened.close()


def test_a_reseal_leaves_sealed_and_retired_keys_alone(tmp_path):
    state = MetaState(tmp_path / "m", map_size=1 << 24, sealer=Sealer(SECRET_A))
    key_id, secret = new_signing_key()
    sealed = state.principals.seal(key_id, secret)
    _add(state, sealed, key_id)
    done = state.apply({"op": "reseal_signing_keys", "time_ms": 2,
                        "keys": {key_id: Sealer(SECRET_B).seal(key_id, secret),
                                 "gone": Sealer(SECRET_A).seal("gone", secret)}})
    assert done == {"key_ids": []}
    assert state.principals.keyring() == {key_id: secret}
    state.close()


def test_keys_sealed_under_another_secret_are_skipped_and_a_new_one_signs(tmp_path):
    state = MetaState(tmp_path / "m", map_size=1 << 24, sealer=Sealer(SECRET_A))
    old_id, old = new_signing_key()
    _add(state, state.principals.seal(old_id, old), old_id)
    state.close()
    state = MetaState(tmp_path / "m", map_size=1 << 24, sealer=Sealer(SECRET_B))
    assert state.principals.signer() is None and state.principals.keyring() == {}
    security.bootstrap(state, state.apply, str(tmp_path), password="a long enough password")
    new_id, new = state.principals.signer()
    assert new_id != old_id and state.principals.keyring() == {new_id: new}
    assert [k["key_id"] for k in state.principals.signing_keys()] == [old_id, new_id]
    state.close()


@pytest.mark.parametrize("secret", ["", SECRET_A])
def test_bootstrap_seals_the_first_key_when_it_can(tmp_path, secret):
    state = MetaState(tmp_path / "m", map_size=1 << 24, sealer=Sealer(secret))
    security.bootstrap(state, state.apply, str(tmp_path), password="a long enough password")
    key_id, key = state.principals.signer()
    state.close()
    raw = (tmp_path / "m" / "data.mdb").read_bytes()
    assert (key.hex().encode() in raw) == (not secret)
