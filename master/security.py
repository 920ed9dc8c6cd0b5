"""gRPC servicer of ``tubeq.security.Security``: logins, users, API keys, signing keys.

Hashing happens here, on the active master, before a command is replicated: the Raft log and
the state hold hashes only. A login checks the password (scrypt) or API key (SHA-256) and
answers a token signed with the newest signing key (lib/auth/tokens.py); failures say "wrong
user or password" whichever part was wrong, so a caller cannot probe which users exist.

:func:`bootstrap` runs when a master becomes active: a cluster without users gets an ``admin``
with a generated password, written once to ``<data_dir>/admin-password`` (0600; no default
password exists anywhere), and a cluster without a signing key gets its first one. Keys are
sealed with the cluster secret before they are replicated (master/sealing.py); keys an older
master stored in clear are sealed then too.
"""
from __future__ import annotations

import hmac
import json
import logging
import math
from collections.abc import Callable
from dataclasses import asdict
from itertools import pairwise
from pathlib import Path
from typing import Any

from lib.auth import (
    VerifiedPasswords,
    addresses,
    check_password_policy,
    generate_password,
    hash_password,
    issue,
    new_api_key,
    new_signing_key,
    parse_api_key,
    quotas,
    verify_api_key,
)
from lib.auth.acl import Authorizer, from_pb, to_pb
from lib.auth.addresses import AddressRules
from lib.auth.client import AUTH_HEADER
from lib.auth.refusals import LoginBackoff, RefusalLog
from lib.errors import InvalidArgument, PrincipalExists, Unauthenticated, Unavailable
from lib.logs import event
from lib.private_files import write_private
from lib.proto import security_pb2 as spb
from lib.proto import security_pb2_grpc
from master import scram
from master.brokers import wall_ms
from master.guard import Leadership, caller, guarded
from master.state import MetaState

log = logging.getLogger(__name__)
ADMIN = "admin"
ADMIN_PASSWORD_FILE = "admin-password"
WRONG = "wrong user or password"


def quota_set(principals) -> spb.QuotaSet:
    version, entries = principals.quotas()
    return spb.QuotaSet(version=version, entries=[quotas.to_pb(q) for q in entries])


def bootstrap(state: MetaState, write: Callable[[dict[str, Any]], Any], data_dir: str,
              password: str = "") -> None:
    """First admin and first signing key of a new cluster (no-ops afterwards). The admin's
    password is ``password`` if given (from the operator's file, see
    :func:`read_admin_password`), else generated and written to ``<data_dir>/admin-password``."""
    principals = state.principals
    if principals.signer() is None:  # a new cluster, or every key sealed by another secret
        key_id, secret = new_signing_key()
        write({"op": "add_signing_key", "time_ms": wall_ms(), "key_id": key_id,
               "secret": principals.seal(key_id, secret),
               "audit": _system("add_signing_key", key_id)})
    resealed = principals.resealed()
    if resealed:  # kept in clear by a master from before sealing (master/sealing.py)
        write({"op": "reseal_signing_keys", "time_ms": wall_ms(), "keys": resealed,
               "audit": _system("reseal_signing_keys", ",".join(sorted(resealed)))})
    if principals.users():
        return
    made = not password
    path = Path(data_dir) / ADMIN_PASSWORD_FILE
    if made:
        password = generate_password()
        write_private(path, password + "\n")
    try:
        write({"op": "add_user", "time_ms": wall_ms(), "name": ADMIN, "roles": [ADMIN],
               "password": hash_password(password), "scram": scram.credentials(password),
               "audit": _system("add_user", ADMIN)})
    except PrincipalExists:
        if made:
            path.unlink(missing_ok=True)  # another master made it first
        return
    event(log, "security.admin_created", user=ADMIN,
          password_file=str(path) if made else "given by admin_password_file")


def address_rules(state: MetaState) -> Callable[[], AddressRules]:
    """The IP lists in force, rebuilt when their version changes (as :func:`acl_authorizer`)."""
    return _following(state, AddressRules(), lambda p: p.ip_version, lambda p: p.ip_rules())


def ip_rule_set(principals) -> spb.IpRuleSet:
    version, rules = principals.ip_rules()
    return spb.IpRuleSet(version=version, entries=[addresses.to_pb(r) for r in rules])


def acl_authorizer(state: MetaState) -> Callable[[], Authorizer]:
    """The ACL decision over the replicated entries, rebuilt when their version changes."""
    return _following(state, Authorizer(), lambda p: p.acl_version, lambda p: p.acls())


def _following(state: MetaState, holder: Any, version_of: Callable[[Any], int],
               read: Callable[[Any], tuple[int, list[Any]]]) -> Callable[[], Any]:
    """``holder`` (anything with ``version`` and ``replace(entries, version)``) kept equal to
    a versioned list of the state: read through ``state.principals`` each time, since a
    snapshot install replaces that object."""
    def current() -> Any:
        principals = state.principals
        if version_of(principals) != holder.version:
            version, entries = read(principals)
            holder.replace(entries, version)
        return holder
    return current


def refusal_audit(refusal: Any, server: str) -> dict[str, Any]:
    """The audit command for one summary of refused calls (a lib.auth.refusals.Refusal, or the
    Refusal message a broker sends with its heartbeat)."""
    details = json.dumps({"reason": refusal.reason, "count": refusal.count,
                          "first_ms": refusal.first_ms, "server": server})
    return {"op": "audit", "time_ms": wall_ms(), "audit": {
        "principal": refusal.principal or "-", "peer": refusal.peer, "action": "refused",
        "target": refusal.method, "details": details}}


def bootstrapped(state: MetaState) -> bool:
    """Whether the cluster has its first user and signing key (logins can succeed)."""
    return bool(state.principals.users()) and state.principals.signer() is not None


def read_admin_password(path: str) -> str:
    """The first admin's password from an operator's file (its first line), checked against
    the password policy; InvalidArgument names what is wrong."""
    try:
        password = Path(path).read_text().splitlines()[0].strip()
    except (OSError, IndexError) as exc:
        raise InvalidArgument(f"admin_password_file {path}: cannot read a password "
                              f"({getattr(exc, 'strerror', None) or 'empty file'})") from None
    check_password_policy(password)
    return password


def _system(action: str, target: str) -> dict[str, str]:
    return {"principal": "system", "peer": "", "action": action, "target": target}


def _user_info(name: str, record: dict[str, Any]) -> spb.UserInfo:
    return spb.UserInfo(name=name, kind=record["kind"], roles=record["roles"],
                        created_ms=record["created_ms"], updated_ms=record["updated_ms"])


def _key_info(key_id: str, record: dict[str, Any]) -> spb.ApiKeyInfo:
    return spb.ApiKeyInfo(key_id=key_id, principal=record["principal"],
                          description=record.get("description", ""),
                          created_ms=record["created_ms"])


class SecurityService(security_pb2_grpc.SecurityServicer):
    def __init__(self, state: MetaState, leadership: Leadership,
                 write: Callable[[dict[str, Any]], Any], token_ttl_s: float,
                 key_settle_ms: int = 0, refusals: RefusalLog | None = None,
                 backoff: LoginBackoff | None = None, cluster_secret: str = "") -> None:
        self.state, self.leadership, self.write = state, leadership, write
        self._cluster = f"Cluster {cluster_secret}".encode() if cluster_secret else b""
        self.refusals = refusals or RefusalLog()
        self.backoff = backoff or LoginBackoff()
        self.token_ttl_s = token_ttl_s
        self.key_settle_ms = key_settle_ms  # a new key signs once brokers have it
        self.passwords = VerifiedPasswords()
        self.scram = scram.ScramExchanges()  # SCRAM-SHA-256 exchanges under way

    @property
    def principals(self):
        return self.state.principals

    @guarded
    def Login(self, request, context):  # noqa: N802
        """Failures count against the caller's host (:class:`LoginBackoff`) and reach the
        audit log summarised; a success is audited as it happens."""
        if not bootstrapped(self.state):
            raise Unavailable("the cluster is being set up (its first admin and signing key "
                              "are not made yet): retry in a moment")
        peer = self._login_peer(request, context)
        claimed = "" if request.api_key else request.user[:64]
        name, kind, user, signer = self._counted(peer, claimed, "Login",
                                                 lambda: self._checked_login(request))
        self.write({"op": "audit", "time_ms": wall_ms(),
                    "audit": self._audit(context, "login", name, kind, principal=name)})
        token, claims = issue(name, tuple(user["roles"]), kind, signer[0], signer[1],
                              self.token_ttl_s)
        return spb.LoginResponse(token=token, expires_ms=claims.expires_ms, principal=name,
                                 roles=user["roles"])

    @guarded
    def ScramStep(self, request, context):  # noqa: N802
        """SCRAM-SHA-256 for a broker's Kafka client (cluster credential only, the access
        rule): failures count against the client's address, a success is audited and gets a
        token as a Login does."""
        if not bootstrapped(self.state):
            raise Unavailable("the cluster is being set up: retry in a moment")
        peer = f"kafka:{request.on_behalf_of[:64]}"
        if not request.exchange:
            message, exchange = self.scram.first(request.message, self.principals.scram)
            return spb.ScramStepResponse(message=message, exchange=exchange)
        name, message = self._counted(peer, "", "ScramStep", lambda: self.scram.final(
            request.exchange, request.message))
        user = self.principals.user(name) or {}
        signer = self.principals.signer(wall_ms(), self.key_settle_ms)
        if not user or signer is None:
            raise Unauthenticated(scram.WRONG)
        self.write({"op": "audit", "time_ms": wall_ms(),
                    "audit": {**self._audit(context, "login", name, "scram", principal=name),
                              "peer": peer}})
        token, claims = issue(name, tuple(user["roles"]), "user", signer[0], signer[1],
                              self.token_ttl_s)
        return spb.ScramStepResponse(message=message, exchange=request.exchange, done=True,
                                     token=token, expires_ms=claims.expires_ms, principal=name)

    def _counted(self, peer: str, claimed: str, method: str, check: Callable[[], Any]) -> Any:
        """``check()`` (a login's proof) unless ``peer`` must wait; failures count against
        it and reach the audit summaries, a success clears its count."""
        try:
            wait = self.backoff.wait_s(peer)
            if wait > 0:
                raise Unauthenticated(f"too many failed logins from this address: try again "
                                      f"in {math.ceil(wait)} s")
            try:
                result = check()
            except Unauthenticated:
                self.backoff.failed(peer)
                raise
        except Unauthenticated as err:
            self.refusals.record(claimed, method, err.message, peer)
            raise
        self.backoff.succeeded(peer)
        return result

    def _login_peer(self, request, context) -> str:
        """Whose failed logins count: the caller's address, or, for a broker logging a Kafka
        client in (cluster credential), that client's; one client's bad passwords must not
        lock every Kafka user of that broker out."""
        peer = context.peer() or ""
        if not request.on_behalf_of or not self._cluster:
            return peer
        for key, value in context.invocation_metadata() or ():
            if key == AUTH_HEADER and isinstance(value, str) and \
                    hmac.compare_digest(value.encode(), self._cluster):
                return f"kafka:{request.on_behalf_of[:64]}"
        return peer

    def _checked_login(self, request) -> tuple[str, str, dict[str, Any], tuple[str, bytes]]:
        name, kind = self._authenticate(request)
        user = self.principals.user(name)
        signer = self.principals.signer(wall_ms(), self.key_settle_ms)
        if user is None or signer is None:
            raise Unauthenticated(WRONG)
        return name, kind, user, signer

    def _authenticate(self, request) -> tuple[str, str]:
        """(principal, token kind) of a password or API-key login."""
        if request.api_key:
            if request.user or request.password:
                raise InvalidArgument("log in with user and password, or with an API key alone")
            key_id, secret = parse_api_key(request.api_key)
            record = self.principals.api_key(key_id)
            if record is None or not verify_api_key(secret, record["digest"]):
                raise Unauthenticated("unknown or revoked API key")
            return record["principal"], "apikey"
        stored = self.principals.password_hash(request.user) if request.user else None
        if stored is None or not self.passwords.verify(request.password, stored):
            raise Unauthenticated(WRONG)
        return request.user, "user"

    @guarded
    def AddUser(self, request, context):  # noqa: N802
        password = scram_keys = None
        if not request.service:
            check_password_policy(request.password)
            password = hash_password(request.password)
            scram_keys = scram.credentials(request.password)
        elif request.password:
            raise InvalidArgument("a service account has no password: create an API key")
        record = self.write({"op": "add_user", "time_ms": wall_ms(), "name": request.name,
                             "kind": "service" if request.service else "user",
                             "roles": list(request.roles), "password": password,
                             "scram": scram_keys,
                             "audit": self._audit(context, "add_user", request.name)})
        return _user_info(request.name, record)

    @guarded
    def ListUsers(self, request, context):  # noqa: N802
        return spb.ListUsersResponse(users=[_user_info(n, r) for n, r in
                                            sorted(self.principals.users().items())])

    @guarded
    def SetPassword(self, request, context):  # noqa: N802
        check_password_policy(request.password)
        record = self.write({"op": "set_password", "time_ms": wall_ms(), "name": request.name,
                             "password": hash_password(request.password),
                             "scram": scram.credentials(request.password),
                             "audit": self._audit(context, "set_password", request.name)})
        return _user_info(request.name, record)

    @guarded
    def SetRoles(self, request, context):  # noqa: N802
        record = self.write({"op": "set_roles", "time_ms": wall_ms(), "name": request.name,
                             "roles": list(request.roles),
                             "audit": self._audit(context, "set_roles", request.name,
                                                  ",".join(request.roles))})
        return _user_info(request.name, record)

    @guarded
    def DeleteUser(self, request, context):  # noqa: N802
        record = self.write({"op": "delete_user", "time_ms": wall_ms(), "name": request.name,
                             "audit": self._audit(context, "delete_user", request.name)})
        return _user_info(request.name, record)

    @guarded
    def CreateApiKey(self, request, context):  # noqa: N802
        key = new_api_key()
        made = self.write({"op": "create_api_key", "time_ms": wall_ms(),
                           "principal": request.principal, "key_id": key.key_id,
                           "digest": key.digest, "description": request.description,
                           "audit": self._audit(context, "create_api_key", request.principal,
                                                key.key_id)})
        return spb.CreateApiKeyResponse(info=_key_info(key.key_id, made), api_key=key.text)

    @guarded
    def ListApiKeys(self, request, context):  # noqa: N802
        return spb.ListApiKeysResponse(keys=[_key_info(i, r) for i, r in
                                             sorted(self.principals.api_keys().items())])

    @guarded
    def RevokeApiKey(self, request, context):  # noqa: N802
        info = self.principals.api_keys().get(request.key_id)
        self.write({"op": "revoke_api_key", "time_ms": wall_ms(), "key_id": request.key_id,
                    "audit": self._audit(context, "revoke_api_key",
                                         info["principal"] if info else "", request.key_id)})
        return _key_info(request.key_id, info)

    @guarded
    def RotateSigningKey(self, request, context):  # noqa: N802
        """A new key signs once it has reached the brokers (``key_settle_ms``); keys replaced
        more than a token lifetime ago (so no token they signed is still valid) stop
        verifying."""
        now = wall_ms()
        key_id, secret = new_signing_key()
        self.write({"op": "add_signing_key", "time_ms": now, "key_id": key_id,
                    "secret": self.principals.seal(key_id, secret),
                    "audit": self._audit(context, "rotate_signing_key", key_id)})
        keys = self.principals.signing_keys()
        retired = [old["key_id"] for old, new in pairwise(keys)
                   if new["created_ms"] + self.key_settle_ms <= now - self.token_ttl_s * 1000]
        for old in retired:
            self.write({"op": "retire_signing_key", "time_ms": now, "key_id": old,
                        "audit": self._audit(context, "retire_signing_key", old)})
        return spb.RotateSigningKeyResponse(key_id=key_id, retired=retired)

    @guarded
    def AddAcl(self, request, context):  # noqa: N802
        entry = from_pb(request)
        made = self.write({"op": "add_acl", "time_ms": wall_ms(), "acl": asdict(entry),
                           "audit": self._audit(context, "add_acl", entry.describe())})
        return spb.AclChange(entry=to_pb(entry), changed=made["added"],
                             version=self.principals.acl_version)

    @guarded
    def RemoveAcl(self, request, context):  # noqa: N802
        entry = from_pb(request)
        self.write({"op": "remove_acl", "time_ms": wall_ms(), "acl": asdict(entry),
                    "audit": self._audit(context, "remove_acl", entry.describe())})
        return spb.AclChange(entry=to_pb(entry), changed=True,
                             version=self.principals.acl_version)

    @guarded
    def ListAcls(self, request, context):  # noqa: N802
        version, entries = self.principals.acls()
        return spb.AclSet(version=version, entries=[to_pb(e) for e in entries])

    @guarded
    def SetQuota(self, request, context):  # noqa: N802
        quota = quotas.from_pb(request)
        self.write({"op": "set_quota", "time_ms": wall_ms(), "quota": asdict(quota),
                    "audit": self._audit(context, "set_quota", quota.describe())})
        return quota_set(self.principals)

    @guarded
    def RemoveQuota(self, request, context):  # noqa: N802
        self.write({"op": "remove_quota", "time_ms": wall_ms(), "entity": request.entity,
                    "audit": self._audit(context, "remove_quota", request.entity[:200])})
        return quota_set(self.principals)

    @guarded
    def ListQuotas(self, request, context):  # noqa: N802
        return quota_set(self.principals)

    @guarded
    def AddIpRule(self, request, context):  # noqa: N802
        """Refused when the rule would lock the caller's own address out of the cluster,
        unless ``force``: a typo in an allow list must not cut the operators off."""
        rule = addresses.from_pb(request.rule)
        if rule.scope == "cluster" and not request.force:
            _, rules = self.principals.ip_rules()
            own = addresses.peer_address(context.peer() or "")
            if not addresses.decide([*rules, rule], own, "cluster"):
                raise InvalidArgument(
                    f"'{rule.describe()}' would refuse your own address {own or '(unknown)'}: "
                    "allow it first, or add the rule with force (tubeq ip add --force)")
        made = self.write({"op": "add_ip_rule", "time_ms": wall_ms(), "rule": asdict(rule),
                           "audit": self._audit(context, "add_ip_rule", rule.describe())})
        return spb.IpRuleChange(changed=made["added"], version=self.principals.ip_version)

    @guarded
    def RemoveIpRule(self, request, context):  # noqa: N802
        rule = addresses.from_pb(request.rule)
        self.write({"op": "remove_ip_rule", "time_ms": wall_ms(), "rule": asdict(rule),
                    "audit": self._audit(context, "remove_ip_rule", rule.describe())})
        return spb.IpRuleChange(changed=True, version=self.principals.ip_version)

    @guarded
    def ListIpRules(self, request, context):  # noqa: N802
        return ip_rule_set(self.principals)

    @staticmethod
    def _audit(context, action: str, target: str, details: str = "",
               principal: str = "") -> dict[str, str]:
        who = caller(context)
        if principal:  # a login: the caller is whom it just proved to be
            who["principal"] = principal
        return {**who, "action": action, "target": target, "details": details}


def add_to(server, service: SecurityService) -> None:
    security_pb2_grpc.add_SecurityServicer_to_server(service, server)
