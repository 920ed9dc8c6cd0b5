"""Users, service accounts, API keys and token signing keys: the security part of the state.

Lives in the master's LMDB beside topics and groups and changes only through the same
replicated commands (master/state.py applies them; ``OPS`` lists them), so every master holds
the same principals and keys and a standby that takes over keeps accepting the tokens its
predecessor issued. Commands carry hashes, never passwords or API keys: the active master
hashes before it replicates, so the Raft log holds nothing a login could replay. The signing
secrets are in the state by design (every master must sign and verify), sealed with the
cluster secret (master/sealing.py): a copy of the state, the Raft log or a snapshot signs
nothing without it.

Reads return copies without hashes or secrets, except the two calls a login or a token check
needs (:meth:`Principals.password_hash`, :meth:`Principals.api_key`, :meth:`Principals.keyring`).
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict
from typing import Any

from lib.auth.acl import MAX_ENTRIES as MAX_ACLS
from lib.auth.acl import Acl
from lib.auth.addresses import MAX_ENTRIES as MAX_IP_RULES
from lib.auth.addresses import IpRule
from lib.auth.quotas import MAX_ENTRIES as MAX_QUOTAS
from lib.auth.quotas import Quota
from lib.errors import InvalidArgument, PrincipalExists, UnknownPrincipal
from lib.logs import event
from lib.names import check_name
from master.sealing import Sealer, is_sealed

log = logging.getLogger(__name__)

KINDS = ("user", "service")  # service accounts log in with API keys only
MAX_ROLES = 32
MAX_SIGNING_KEYS = 8  # live keys: the newest signs, every one verifies


def _dump(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _acl_of(cmd: dict[str, Any]) -> Acl:
    try:
        return Acl(**cmd["acl"])
    except (TypeError, KeyError):
        raise InvalidArgument("malformed ACL entry") from None


def _ip_rule_of(cmd: dict[str, Any]) -> IpRule:
    try:
        return IpRule(**cmd["rule"])
    except (TypeError, KeyError):
        raise InvalidArgument("malformed IP rule") from None


def _quota_of(cmd: dict[str, Any]) -> Quota:
    try:
        return Quota(**cmd["quota"])
    except (TypeError, KeyError):
        raise InvalidArgument("malformed quota entry") from None


def check_roles(roles: Any) -> list[str]:
    if not isinstance(roles, list | tuple) or len(roles) > MAX_ROLES:
        raise InvalidArgument(f"roles must be a list of at most {MAX_ROLES} names")
    return sorted({check_name(r, "role") for r in roles})


class Principals:
    OPS = ("add_user", "set_password", "set_roles", "delete_user", "create_api_key",
           "revoke_api_key", "add_signing_key", "retire_signing_key", "add_acl", "remove_acl",
           "set_quota", "remove_quota", "add_ip_rule", "remove_ip_rule", "reseal_signing_keys")

    def __init__(self, env: Any, users_db: Any, keys_db: Any, meta_db: Any,
                 sealer: Sealer | None = None) -> None:
        self._users_db, self._keys_db, self._meta_db = users_db, keys_db, meta_db
        self._sealer = sealer or Sealer()
        self._clear: tuple[Any, list[tuple[str, bytes, int]]] = (None, [])
        with env.begin() as txn:
            self._users = {bytes(k).decode(): json.loads(bytes(v))
                           for k, v in txn.cursor(db=users_db)}
            self._keys = {bytes(k).decode(): json.loads(bytes(v))
                          for k, v in txn.cursor(db=keys_db)}
            raw = txn.get(b"signing_keys", db=meta_db)
            lists = {key: txn.get(key.encode(), db=meta_db)
                     for key in ("acls", "quotas", "ip_rules")}
        self._signing: list[dict[str, Any]] = [] if raw is None else json.loads(bytes(raw))
        # Versioned lists brokers enforce (they ask again when their version differs).
        self._lists: dict[str, dict[str, Any]] = {
            key: {"version": 0, "entries": []} if raw_list is None else json.loads(bytes(raw_list))
            for key, raw_list in lists.items()}

    def handlers(self) -> dict[str, Any]:
        """op -> the handler :class:`~master.state.MetaState` applies it with (``OPS``)."""
        return {op: getattr(self, "_" + op) for op in self.OPS}

    # -- reads ---------------------------------------------------------------------------

    def users(self) -> dict[str, dict[str, Any]]:
        """name -> {kind, roles, created_ms, updated_ms} (no hashes)."""
        return {n: {k: v for k, v in u.items() if k not in ("password", "scram")}
                for n, u in self._users.items()}

    def user(self, name: str) -> dict[str, Any] | None:
        return self.users().get(name)

    def scram(self, name: str) -> str | None:
        """The user's SCRAM-SHA-256 credentials (master/scram.py), None if it has none."""
        user = self._users.get(name)
        return None if user is None else user.get("scram")

    def password_hash(self, name: str) -> str | None:
        user = self._users.get(name)
        return None if user is None else user.get("password")

    def api_keys(self) -> dict[str, dict[str, Any]]:
        """key id -> {principal, description, created_ms} (no digests)."""
        return {i: {k: v for k, v in key.items() if k != "digest"}
                for i, key in self._keys.items()}

    def api_key(self, key_id: str) -> dict[str, Any] | None:
        """The full record of one key, digest included (for a login)."""
        key = self._keys.get(key_id)
        return None if key is None else dict(key)

    def keyring(self) -> dict[str, bytes]:
        """key id -> secret of every live signing key this master can unseal."""
        return {key_id: secret for key_id, secret, _ in self._unsealed()}

    def signer(self, now_ms: int | None = None, settle_ms: int = 0) -> tuple[str, bytes] | None:
        """The key to sign with (None before the first one is added, or when none can be
        unsealed): the newest one that is at least ``settle_ms`` old, so every broker has it
        (they get keys with their heartbeats) before a token it signed reaches them; the
        oldest if none is. Without ``now_ms``, the newest."""
        keys = self._unsealed()
        if not keys:
            return None
        settled = [k for k in keys if now_ms is None or k[2] <= now_ms - settle_ms]
        key_id, secret, _ = settled[-1] if settled else keys[0]
        return key_id, secret

    def seal(self, key_id: str, secret: bytes) -> str:
        """What an ``add_signing_key`` command carries for a new key (master/sealing.py)."""
        return self._sealer.seal(key_id, secret)

    def resealed(self) -> dict[str, str]:
        """key id -> sealed secret of the keys the state still holds in clear (written before
        keys were sealed), for a ``reseal_signing_keys`` command; {} when there are none or
        this master has no cluster secret to seal with."""
        if not self._sealer.can_seal:
            return {}
        return {key_id: self._sealer.seal(key_id, secret) for key_id, secret, _ in
                self._unsealed() if not is_sealed(self._stored(key_id))}

    def _stored(self, key_id: str) -> str:
        return next(k["secret"] for k in self._signing if k["key_id"] == key_id)

    def _unsealed(self) -> list[tuple[str, bytes, int]]:
        """(key id, secret, created_ms) oldest first, unsealed once per change of the keys
        (tokens are checked against them on every call)."""
        signing = self._signing
        if self._clear[0] is not signing:
            keys = []
            for k in signing:
                secret = self._sealer.unseal(k["key_id"], k["secret"])
                if secret is None:
                    event(log, "master.signing_key_unreadable", logging.ERROR, key_id=k["key_id"],
                          reason="sealed with another cluster secret: skipped (rotate it out)")
                else:
                    keys.append((k["key_id"], secret, k["created_ms"]))
            self._clear = (signing, keys)
        return self._clear[1]

    def signing_keys(self) -> list[dict[str, Any]]:
        """[{key_id, created_ms}] oldest first (no secrets)."""
        return [{"key_id": k["key_id"], "created_ms": k["created_ms"]} for k in self._signing]

    @property
    def acl_version(self) -> int:
        return self._lists["acls"]["version"]

    def acls(self) -> tuple[int, list[Acl]]:
        """(version, entries): the version grows with every change, the same on every master
        (brokers ask for the entries again when theirs differs)."""
        record = self._lists["acls"]
        return record["version"], [Acl(**e) for e in record["entries"]]

    @property
    def quota_version(self) -> int:
        return self._lists["quotas"]["version"]

    def quotas(self) -> tuple[int, list[Quota]]:
        """(version, entries), as :meth:`acls`."""
        record = self._lists["quotas"]
        return record["version"], [Quota(**e) for e in record["entries"]]

    @property
    def ip_version(self) -> int:
        return self._lists["ip_rules"]["version"]

    def ip_rules(self) -> tuple[int, list[IpRule]]:
        """(version, rules), as :meth:`acls`."""
        record = self._lists["ip_rules"]
        return record["version"], [IpRule(**e) for e in record["entries"]]

    # -- commands (applied inside MetaState's transaction) ----------------------------------

    def _add_user(self, ctx: Any, cmd: dict[str, Any]) -> dict[str, Any]:
        name = check_name(cmd["name"], "user")
        if name in self._users:
            raise PrincipalExists(f"user {name!r} already exists", principal=name)
        kind = cmd.get("kind", "user")
        if kind not in KINDS:
            raise InvalidArgument(f"user kind must be one of {', '.join(KINDS)}")
        if (kind == "user") != bool(cmd.get("password")):
            raise InvalidArgument("a user needs a password; a service account has none")
        record = {"kind": kind, "roles": check_roles(cmd.get("roles", [])),
                  "created_ms": cmd["time_ms"], "updated_ms": cmd["time_ms"]}
        if kind == "user":
            record["password"] = str(cmd["password"])
            if cmd.get("scram"):
                record["scram"] = str(cmd["scram"])
        return self._put_user(ctx, name, record)

    def _set_password(self, ctx: Any, cmd: dict[str, Any]) -> dict[str, Any]:
        name, old = self._existing(cmd["name"])
        if old["kind"] != "user":
            raise InvalidArgument(f"{name!r} is a service account: it logs in with API keys")
        new = {**old, "password": str(cmd["password"]), "updated_ms": cmd["time_ms"]}
        new.pop("scram", None)  # made from the old password
        if cmd.get("scram"):
            new["scram"] = str(cmd["scram"])
        return self._put_user(ctx, name, new)

    def _set_roles(self, ctx: Any, cmd: dict[str, Any]) -> dict[str, Any]:
        name, old = self._existing(cmd["name"])
        return self._put_user(ctx, name, {**old, "roles": check_roles(cmd["roles"]),
                                          "updated_ms": cmd["time_ms"]})

    def _delete_user(self, ctx: Any, cmd: dict[str, Any]) -> dict[str, Any]:
        """Delete a user and every API key it owns."""
        txn, staged = ctx
        name, old = self._existing(cmd["name"])
        txn.delete(name.encode(), db=self._users_db)
        owned = [i for i, k in self._keys.items() if k["principal"] == name]
        for key_id in owned:
            txn.delete(key_id.encode(), db=self._keys_db)
        staged.append(lambda: self._forget(name, owned))
        return {k: v for k, v in old.items() if k != "password"}

    def _create_api_key(self, ctx: Any, cmd: dict[str, Any]) -> dict[str, Any]:
        txn, staged = ctx
        owner, _ = self._existing(cmd["principal"])
        key_id = str(cmd["key_id"])
        if key_id in self._keys:
            raise PrincipalExists(f"API key {key_id} already exists", key_id=key_id)
        record = {"principal": owner, "digest": str(cmd["digest"]),
                  "description": str(cmd.get("description", ""))[:200],
                  "created_ms": cmd["time_ms"]}
        txn.put(key_id.encode(), _dump(record), db=self._keys_db)
        staged.append(lambda: self._keys.__setitem__(key_id, record))
        return {"key_id": key_id, **{k: v for k, v in record.items() if k != "digest"}}

    def _revoke_api_key(self, ctx: Any, cmd: dict[str, Any]) -> dict[str, Any]:
        txn, staged = ctx
        key_id = str(cmd["key_id"])
        old = self._keys.get(key_id)
        if old is None:
            raise UnknownPrincipal(f"unknown API key {key_id[:32]!r}", key_id=key_id[:32])
        txn.delete(key_id.encode(), db=self._keys_db)
        staged.append(lambda: self._keys.pop(key_id, None))
        return {"key_id": key_id, "principal": old["principal"]}

    def _add_signing_key(self, ctx: Any, cmd: dict[str, Any]) -> dict[str, Any]:
        """A new key signs from now on; the oldest beyond MAX_SIGNING_KEYS stops verifying."""
        key = {"key_id": str(cmd["key_id"]), "secret": str(cmd["secret"]),
               "created_ms": cmd["time_ms"]}
        if any(k["key_id"] == key["key_id"] for k in self._signing):
            raise InvalidArgument(f"signing key {key['key_id']} already exists")
        return self._put_signing(ctx, [*self._signing, key][-MAX_SIGNING_KEYS:], key)

    def _retire_signing_key(self, ctx: Any, cmd: dict[str, Any]) -> dict[str, Any]:
        """Stop accepting tokens signed with a key (never the one that signs now)."""
        key_id = str(cmd["key_id"])
        left = [k for k in self._signing if k["key_id"] != key_id]
        if len(left) == len(self._signing):
            raise InvalidArgument(f"no signing key {key_id[:32]!r}")
        if self._signing[-1]["key_id"] == key_id:
            raise InvalidArgument("the newest signing key cannot be retired: add a new one first")
        return self._put_signing(ctx, left, {"key_id": key_id})

    def _reseal_signing_keys(self, ctx: Any, cmd: dict[str, Any]) -> dict[str, Any]:
        """Replace keys stored in clear by their sealed form (keys retired meanwhile, or
        sealed already, are left alone)."""
        sealed = {str(k): str(v) for k, v in dict(cmd["keys"]).items() if is_sealed(str(v))}
        keys = [{**k, "secret": sealed[k["key_id"]]}
                if k["key_id"] in sealed and not is_sealed(k["secret"]) else k
                for k in self._signing]
        done = sorted(k["key_id"] for k, old in zip(keys, self._signing, strict=True)
                      if k is not old)
        return self._put_signing(ctx, keys, {"key_ids": done})

    def _add_acl(self, ctx: Any, cmd: dict[str, Any]) -> dict[str, Any]:
        """Add one entry (adding one that exists changes nothing)."""
        entry = _acl_of(cmd)
        version, entries = self.acls()
        if entry in entries:
            return {"added": False, **asdict(entry)}
        if len(entries) >= MAX_ACLS:
            raise InvalidArgument(f"at most {MAX_ACLS} ACL entries")
        self._put_list(ctx, "acls", version + 1, [*entries, entry])
        return {"added": True, **asdict(entry)}

    def _remove_acl(self, ctx: Any, cmd: dict[str, Any]) -> dict[str, Any]:
        entry = _acl_of(cmd)
        version, entries = self.acls()
        if entry not in entries:
            raise InvalidArgument(f"no ACL entry '{entry.describe()}'")
        self._put_list(ctx, "acls", version + 1, [e for e in entries if e != entry])
        return asdict(entry)

    def _set_quota(self, ctx: Any, cmd: dict[str, Any]) -> dict[str, Any]:
        """Set the quota of one entity (replacing the one it had)."""
        quota = _quota_of(cmd)
        version, entries = self.quotas()
        others = [q for q in entries if q.entity != quota.entity]
        if len(others) >= MAX_QUOTAS:
            raise InvalidArgument(f"at most {MAX_QUOTAS} quotas")
        self._put_list(ctx, "quotas", version + 1, [*others, quota])
        return asdict(quota)

    def _remove_quota(self, ctx: Any, cmd: dict[str, Any]) -> dict[str, Any]:
        entity = str(cmd.get("entity", ""))
        version, entries = self.quotas()
        gone = [q for q in entries if q.entity == entity]
        if not gone:
            raise InvalidArgument(f"no quota for {entity[:80]!r} (see tubeq quota list)")
        self._put_list(ctx, "quotas", version + 1, [q for q in entries if q.entity != entity])
        return asdict(gone[0])

    def _add_ip_rule(self, ctx: Any, cmd: dict[str, Any]) -> dict[str, Any]:
        """Add one rule (adding one that exists changes nothing)."""
        rule = _ip_rule_of(cmd)
        version, rules = self.ip_rules()
        if rule in rules:
            return {"added": False, **asdict(rule)}
        if len(rules) >= MAX_IP_RULES:
            raise InvalidArgument(f"at most {MAX_IP_RULES} IP rules")
        self._put_list(ctx, "ip_rules", version + 1, [*rules, rule])
        return {"added": True, **asdict(rule)}

    def _remove_ip_rule(self, ctx: Any, cmd: dict[str, Any]) -> dict[str, Any]:
        rule = _ip_rule_of(cmd)
        version, rules = self.ip_rules()
        if rule not in rules:
            raise InvalidArgument(f"no IP rule '{rule.describe()}' (see tubeq ip list)")
        self._put_list(ctx, "ip_rules", version + 1, [r for r in rules if r != rule])
        return asdict(rule)

    def _put_list(self, ctx: Any, key: str, version: int, entries: list[Any]) -> None:
        txn, staged = ctx
        record = {"version": version, "entries": [asdict(e) for e in sorted(entries)]}
        txn.put(key.encode(), _dump(record), db=self._meta_db)
        staged.append(lambda: self._lists.__setitem__(key, record))

    # -- helpers ---------------------------------------------------------------------------

    def _existing(self, name: str) -> tuple[str, dict[str, Any]]:
        name = check_name(name, "user")
        old = self._users.get(name)
        if old is None:
            raise UnknownPrincipal(f"unknown user {name!r}", principal=name)
        return name, old

    def _put_user(self, ctx: Any, name: str, record: dict[str, Any]) -> dict[str, Any]:
        txn, staged = ctx
        txn.put(name.encode(), _dump(record), db=self._users_db)
        staged.append(lambda: self._users.__setitem__(name, record))
        return {k: v for k, v in record.items() if k != "password"}

    def _forget(self, name: str, key_ids: list[str]) -> None:
        self._users.pop(name, None)
        for key_id in key_ids:
            self._keys.pop(key_id, None)

    def _put_signing(self, ctx: Any, keys: list[dict[str, Any]],
                     result: dict[str, Any]) -> dict[str, Any]:
        txn, staged = ctx
        txn.put(b"signing_keys", _dump(keys), db=self._meta_db)
        staged.append(lambda: setattr(self, "_signing", keys))
        return {k: v for k, v in result.items() if k != "secret"}
