"""lib/auth: password hashes, API keys and signed tokens, including every way a token is bad."""
from __future__ import annotations

import base64
import json

import pytest

from lib.auth import (
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
from lib.errors import InvalidArgument, Unauthenticated


def test_a_password_hash_is_salted_and_verifies_only_the_password():
    one, two = hash_password("correct horse"), hash_password("correct horse")
    assert one != two and one.startswith("scrypt$16384$8$1$")
    assert "correct horse" not in one
    assert verify_password("correct horse", one) and verify_password("correct horse", two)
    assert not verify_password("correct horsf", one)
    assert not verify_password("correct horse", "plain$text")
    assert not verify_password("correct horse", one.replace("$16384$", "$1073741824$"))


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
