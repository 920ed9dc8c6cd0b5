"""Authentication primitives shared by masters, brokers and clients (issue "Permissions").

``credentials``: password hashing (scrypt) and API keys; ``tokens``: signed, expiring tokens
and their verification with a rotating keyring.

Servers check every call with ``identities`` (who is calling: a token, the cluster secret or a
client certificate), ``access`` (what that caller may do: ACLs and IP lists), ``gate`` (which
method needs what, decided before the request is read) and ``server`` (the gRPC interceptors
that apply the gate); ``settings`` checks the auth mode and cluster secret a server is given.
"""
from __future__ import annotations

from lib.auth.credentials import (
    ApiKey,
    VerifiedPasswords,
    check_password_policy,
    generate_password,
    hash_password,
    new_api_key,
    parse_api_key,
    verify_api_key,
    verify_password,
)
from lib.auth.tokens import Claims, issue, new_signing_key, sign, verify

__all__ = [
    "ApiKey",
    "Claims",
    "check_password_policy",
    "generate_password",
    "hash_password",
    "issue",
    "new_api_key",
    "new_signing_key",
    "parse_api_key",
    "sign",
    "verify",
    "verify_api_key",
    "VerifiedPasswords",
    "verify_password",
]
