"""lib/auth: password hashes, API keys and signed tokens, including every way a token is bad."""
from __future__ import annotations

import base64
import hashlib
import json
import stat

import pytest

from lib.auth import (
    VerifiedPasswords,
    generate_password,
    hash_password,
    issue,
    new_api_key,
    new_signing_key,
    parse_api_key,
    verify,
    verify_api_key,
    verify_password,
)
from lib.auth.client import Credentials
from lib.errors import InvalidArgument, Unauthenticated


def test_a_password_hash_is_salted_and_verifies_only_the_password():
    one, two = hash_password("correct horse"), hash_password("correct horse")
    assert one != two and one.startswith("scrypt$16384$8$1$")
    assert "correct horse" not in one
    assert verify_password("correct horse", one) and verify_password("correct horse", two)
    assert not verify_password("correct horsf", one)
    assert not verify_password("correct horse", "plain$text")
    assert not verify_password("correct horse", one.replace("$16384$", "$1073741824$"))


def test_a_password_checked_again_is_not_hashed_again_and_a_wrong_one_always_is(monkeypatch):
    stored, other = hash_password("correct horse"), hash_password("correct horse")
    scrypts = []
    real = hashlib.scrypt
    monkeypatch.setattr(hashlib, "scrypt", lambda *a, **k: scrypts.append(1) or real(*a, **k))
    seen = VerifiedPasswords(ttl_s=60)
    assert seen.verify("correct horse", stored) and len(scrypts) == 1
    assert seen.verify("correct horse", stored) and len(scrypts) == 1  # remembered
    assert not seen.verify("correct horsf", stored) and len(scrypts) == 2
    assert not seen.verify("correct horsf", stored) and len(scrypts) == 3  # never remembered
    assert seen.verify("correct horse", other) and len(scrypts) == 4  # a new hash: checked
    assert not seen.verify(12345, stored) and not seen.verify("x" * 1025, stored)


def test_remembered_passwords_expire_and_are_bounded(monkeypatch):
    stored = [hash_password(f"password-{i:02d}") for i in range(3)]
    scrypts = []
    real = hashlib.scrypt
    monkeypatch.setattr(hashlib, "scrypt", lambda *a, **k: scrypts.append(1) or real(*a, **k))
    expired = VerifiedPasswords(ttl_s=0)
    assert expired.verify("password-00", stored[0]) and expired.verify("password-00", stored[0])
    assert len(scrypts) == 2
    small = VerifiedPasswords(ttl_s=60, size=2)
    for i in (0, 1, 2, 0):  # the third pushes the first out
        assert small.verify(f"password-{i:02d}", stored[i])
    assert len(scrypts) == 6


@pytest.mark.parametrize("bad", ["short", "x" * 1025, 12345])
def test_password_policy_names_the_limits(bad):
    with pytest.raises(InvalidArgument, match="10 to 1024 characters"):
        hash_password(bad)


def test_generated_passwords_are_long_and_distinct():
    made = {generate_password() for _ in range(50)}
    assert len(made) == 50 and min(map(len, made)) >= 20


def test_api_keys_parse_and_verify_against_their_digest_only():
    key = new_api_key()
    key_id, secret = parse_api_key(key.text)
    assert key_id == key.key_id and secret not in key.digest
    assert verify_api_key(secret, key.digest)
    assert not verify_api_key(secret[:-1] + "x", key.digest)
    for bad in ["", "tqk", "tqk__x", "abc_123_x", "tqk_" + "a" * 300]:
        with pytest.raises(Unauthenticated, match="malformed API key"):
            parse_api_key(bad)


@pytest.fixture
def keyring():
    kid, secret = new_signing_key()
    return kid, secret, {kid: secret}


def test_a_token_carries_its_claims_until_it_expires(keyring):
    kid, secret, ring = keyring
    token, claims = issue("alice", ("admin",), "user", kid, secret, ttl_s=60, now=1000.0)
    got = verify(token, ring, now=1059.0)
    assert got == claims and got.subject == "alice" and got.roles == ("admin",)
    with pytest.raises(Unauthenticated, match="token expired 1 s ago"):
        verify(token, ring, now=1061.0)


def test_tampered_foreign_and_malformed_tokens_are_refused_without_echoing_them(keyring):
    kid, secret, ring = keyring
    token, _ = issue("bob", ("viewer",), "user", kid, secret, ttl_s=60)
    head, body, sig = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=="))
    claims["roles"] = ["admin"]
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    cases = {
        f"{head}.{forged}.{sig}": "signature does not match",
        token[:-2] + ("AA" if not token.endswith("AA") else "BB"): "signature does not match",
        "nonsense": "malformed token",
        f"tq0.{body}.{sig}": "malformed token",
        f"{head}.!!.{sig}": "malformed token",
        "tq1." + "a" * 5000 + ".b": "more than 4096 characters",
    }
    for bad, why in cases.items():
        with pytest.raises(Unauthenticated, match=why) as info:
            verify(bad, ring)
        assert sig not in info.value.message and secret.hex() not in info.value.message
    other_kid, other_secret = new_signing_key()
    foreign, _ = issue("bob", ("viewer",), "user", other_kid, other_secret, ttl_s=60)
    with pytest.raises(Unauthenticated, match="does not accept .rotated out"):
        verify(foreign, ring)


def test_a_rotation_keeps_old_tokens_valid_until_the_old_key_is_retired(keyring):
    old_kid, old_secret, ring = keyring
    old_token, _ = issue("carol", (), "apikey", old_kid, old_secret, ttl_s=60)
    new_kid, new_secret = new_signing_key()
    ring = {**ring, new_kid: new_secret}  # rotation: both verify
    new_token, _ = issue("carol", (), "apikey", new_kid, new_secret, ttl_s=60)
    assert verify(old_token, ring).key_id == old_kid
    assert verify(new_token, ring).key_id == new_kid
    retired = {new_kid: new_secret}
    assert verify(new_token, retired).subject == "carol"
    with pytest.raises(Unauthenticated, match="rotated out"):
        verify(old_token, retired)


def test_a_credentials_file_is_read_only_when_private_and_well_formed(tmp_path):
    path = tmp_path / "credentials"
    Credentials("admin", "a long enough password").to_file(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert Credentials.from_file(path) == Credentials("admin", "a long enough password")
    assert Credentials.from_env({"TUBEQ_CREDENTIALS_FILE": str(path)}).user == "admin"
    assert Credentials.from_env({"TUBEQ_CREDENTIALS_FILE": str(path),
                                 "TUBEQ_API_KEY": "tqk_a_b"}).api_key == "tqk_a_b"  # env first
    path.chmod(0o644)
    with pytest.raises(InvalidArgument, match="open to other users .mode 644.: chmod 600"):
        Credentials.from_file(path)
    path.chmod(0o600)
    path.write_text("# mine\nuser = admin\npasswd = x\n")
    with pytest.raises(InvalidArgument, match="line 3: expected user = ...") as info:
        Credentials.from_file(path)
    assert "x" not in info.value.message.split("expected")[0]
    with pytest.raises(InvalidArgument, match="No such file"):
        Credentials.from_file(tmp_path / "missing")


def test_a_cluster_secret_file_breaks_glass_as_the_cluster(tmp_path):
    from lib.auth.client import TokenSource
    from lib.private_files import write_private

    path = tmp_path / "cluster-secret"
    path.write_text("old")
    path.chmod(0o644)
    write_private(path, "s3cret-of-the-cluster\n")  # replaced, not reopened: 0600 again
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    creds = Credentials.from_cluster_secret(path)
    assert "s3cret" not in repr(creds)
    assert TokenSource(creds, "127.0.0.1:9").header() == "Cluster s3cret-of-the-cluster"
    assert Credentials.from_env({"TUBEQ_CLUSTER_SECRET_FILE": str(path)}) == creds
    assert Credentials.from_env({"TUBEQ_CLUSTER_SECRET_FILE": str(path),
                                 "TUBEQ_USER": "u", "TUBEQ_PASSWORD": "p"}).user == "u"
    path.write_text("")
    with pytest.raises(InvalidArgument, match="cluster secret file .* is empty"):
        Credentials.from_cluster_secret(path)
    with pytest.raises(InvalidArgument, match="exactly one"):
        Credentials("admin", "a long enough password", cluster_secret="x")


def test_the_users_credentials_file_is_the_last_resort_and_cluster_up_never_replaces_a_users_own(
        tmp_path, monkeypatch):
    from lib.auth.client import CLUSTER_UP_MARK, user_credentials_path
    from lib.cli.cluster import install_user_credentials

    env = {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    assert Credentials.from_env(env) is None  # nothing anywhere: no login
    made = tmp_path / "made"
    Credentials("admin", "first cluster password").to_file(made)
    monkeypatch.setenv("XDG_CONFIG_HOME", env["XDG_CONFIG_HOME"])  # for cluster up
    target = install_user_credentials(made)
    assert target == user_credentials_path(env)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert target.read_text().startswith(CLUSTER_UP_MARK)
    assert Credentials.from_env(env) == Credentials("admin", "first cluster password")
    assert Credentials.from_env({**env, "TUBEQ_USER": "bob", "TUBEQ_PASSWORD": "p" * 10}
                                ).user == "bob"  # the environment comes first
    Credentials("admin", "second cluster password").to_file(made)
    assert install_user_credentials(made) == target  # its own file: replaced
    assert Credentials.from_env(env).password == "second cluster password"
    Credentials("alice", "alices own password").to_file(target)  # the user's own file
    assert install_user_credentials(made) is None
    assert Credentials.from_env(env).user == "alice"
