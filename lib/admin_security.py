"""The security half of :class:`lib.admin.AdminClient`: logins, users, API keys, signing keys,
ACLs, quotas, IP lists.

Calls ``tubeq.security.Security`` on the active master. Passwords and API keys are sent only
in the calls that need them and never kept by the client.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lib.auth import addresses, quotas
from lib.auth.acl import Acl, from_pb, to_pb
from lib.auth.addresses import IpRule
from lib.auth.quotas import Quota
from lib.names import check_name
from lib.proto import security_pb2 as spb
from lib.proto import security_pb2_grpc
from lib.rpc import MasterClient
from lib.types import ApiKeyInfo, LoginResult, UserInfo


def _user(info: spb.UserInfo) -> UserInfo:
    return UserInfo(info.name, info.kind, tuple(info.roles), info.created_ms, info.updated_ms)


def _key(info: spb.ApiKeyInfo) -> ApiKeyInfo:
    return ApiKeyInfo(info.key_id, info.principal, info.description, info.created_ms)


class SecurityCalls:
    """Mixed into AdminClient (which provides ``_master``, ``timeout`` and ``_metadata``)."""

    _master: MasterClient
    timeout: float
    _metadata: Any

    def _security(self, method: str, request: Any) -> Any:
        return self._master.call(security_pb2_grpc.SecurityStub, method, request,
                                 timeout=self.timeout, metadata=self._metadata)

    def login(self, user: str = "", password: str = "", api_key: str = "") -> LoginResult:
        """A token for ``user`` + ``password`` or for an ``api_key``."""
        r = self._security("Login", spb.LoginRequest(user=user, password=password,
                                                     api_key=api_key))
        return LoginResult(r.token, r.expires_ms, r.principal, tuple(r.roles))

    def add_user(self, name: str, password: str | None = None, roles: Iterable[str] = (),
                 service: bool = False) -> UserInfo:
        """A user with a password, or (``service=True``, no password) a service account."""
        return _user(self._security("AddUser", spb.AddUserRequest(
            name=check_name(name, "user"), password=password or "", roles=list(roles),
            service=service)))

    def list_users(self) -> list[UserInfo]:
        return [_user(u) for u in self._security("ListUsers", spb.ListUsersRequest()).users]

    def set_password(self, name: str, password: str) -> UserInfo:
        return _user(self._security("SetPassword", spb.SetPasswordRequest(
            name=check_name(name, "user"), password=password)))

    def set_roles(self, name: str, roles: Iterable[str]) -> UserInfo:
        return _user(self._security("SetRoles", spb.SetRolesRequest(
            name=check_name(name, "user"), roles=list(roles))))

    def delete_user(self, name: str) -> UserInfo:
        """Delete a user and every API key it owns."""
        return _user(self._security("DeleteUser", spb.DeleteUserRequest(
            name=check_name(name, "user"))))

    def create_api_key(self, principal: str, description: str = "") -> tuple[ApiKeyInfo, str]:
        """(its listing, the key itself): the key is shown this once, only its hash is kept."""
        r = self._security("CreateApiKey", spb.CreateApiKeyRequest(
            principal=check_name(principal, "user"), description=description))
        return _key(r.info), r.api_key

    def list_api_keys(self) -> list[ApiKeyInfo]:
        return [_key(k) for k in self._security("ListApiKeys", spb.ListApiKeysRequest()).keys]

    def revoke_api_key(self, key_id: str) -> ApiKeyInfo:
        return _key(self._security("RevokeApiKey", spb.RevokeApiKeyRequest(key_id=key_id)))

    def rotate_signing_key(self) -> tuple[str, list[str]]:
        """(the new signing key's id, the ids of keys retired by this rotation)."""
        r = self._security("RotateSigningKey", spb.RotateSigningKeyRequest())
        return r.key_id, list(r.retired)

    def add_acl(self, principal: str, operation: str, resource: str, name: str = "cluster",
                *, effect: str = "allow", pattern: str = "literal") -> bool:
        """Allow (or, ``effect="deny"``, deny) ``principal`` (``user:<name>``, ``role:<name>``
        or ``*``) ``operation`` on a topic, group, transactional_id or the cluster, named
        literally or by prefix. True if the entry is new (adding one that exists changes
        nothing). Effective on the masters at once and on the brokers with their next
        heartbeat (about a second)."""
        entry = Acl(principal, resource, name, operation, effect, pattern)  # checked here first
        return self._security("AddAcl", to_pb(entry)).changed

    def remove_acl(self, principal: str, operation: str, resource: str, name: str = "cluster",
                   *, effect: str = "allow", pattern: str = "literal") -> None:
        """Remove the entry with exactly these fields (InvalidArgument if there is none)."""
        entry = Acl(principal, resource, name, operation, effect, pattern)
        self._security("RemoveAcl", to_pb(entry))

    def list_acls(self) -> list[Acl]:
        return [from_pb(e) for e in self._security("ListAcls", spb.ListAclsRequest()).entries]

    def set_quota(self, entity: str, *, produce_bytes_per_s: int = 0,
                  consume_bytes_per_s: int = 0) -> Quota:
        """Limit ``entity`` (``user:<name>``, ``user:*``, ``group:<name>``, ``group:*``) to so
        many bytes per second of produce and consume on each broker (0: no limit), replacing
        its quota if it had one. Effective on the brokers with their next heartbeat."""
        quota = Quota(entity, produce_bytes_per_s, consume_bytes_per_s)  # checked here first
        self._security("SetQuota", quotas.to_pb(quota))
        return quota

    def remove_quota(self, entity: str) -> None:
        """Remove the quota of ``entity`` (InvalidArgument if it has none)."""
        self._security("RemoveQuota", spb.QuotaEntry(entity=entity))

    def list_quotas(self) -> list[Quota]:
        return [quotas.from_pb(e)
                for e in self._security("ListQuotas", spb.ListQuotasRequest()).entries]

    def add_ip_rule(self, network: str, *, effect: str = "allow", topic: str | None = None,
                    prefix: bool = False, force: bool = False) -> bool:
        """Allow (or, ``effect="deny"``, deny) the IP ``network`` (``10.0.0.0/8``,
        ``192.168.1.7``) to reach the cluster, or ``topic`` (a prefix with ``prefix=True``).
        True if the rule is new. A cluster rule that would refuse the caller's own address is
        refused unless ``force``. Effective on the brokers with their next heartbeat."""
        rule = addresses.make_rule(network, effect, topic, prefix)  # checked here first
        return self._security("AddIpRule", spb.IpRuleRequest(rule=addresses.to_pb(rule),
                                                             force=force)).changed

    def remove_ip_rule(self, network: str, *, effect: str = "allow", topic: str | None = None,
                       prefix: bool = False) -> None:
        """Remove the rule with exactly these fields (InvalidArgument if there is none)."""
        rule = addresses.make_rule(network, effect, topic, prefix)
        self._security("RemoveIpRule", spb.IpRuleRequest(rule=addresses.to_pb(rule)))

    def list_ip_rules(self) -> list[IpRule]:
        return [addresses.from_pb(r)
                for r in self._security("ListIpRules", spb.ListIpRulesRequest()).entries]
