"""The master's metadata state machine on LMDB (``<data_dir>/meta``).

Every change is a plain JSON-serialisable command dict applied by :meth:`MetaState.apply` in
one LMDB write transaction: the change and its audit entry land together or not at all. ``apply``
is deterministic (it never reads a clock: commands carry ``time_ms``; it never looks at live
state), so the "Master HA" issue can replicate the same commands through Raft and apply them in
the same order on every master.

Commands (``op``): ``lead`` (a new leadership: epoch + 1, the leader's node and address),
``register_broker``, ``set_draining`` (an admin drains or undrains a broker: placement skips a
draining one, and a drain reassigns its replicas; the flag survives its re-registrations),
``create_topic``, ``alter_topic``,
``delete_topic``, ``alter_isr`` (a partition's leader shrinks or expands its ISR, or finishes
its reassignment), ``elect_leaders`` (failover: new leaders under the next leader epoch,
master/election.py), ``reassign`` (partitions move to target replicas, master/reassign.py),
``record_group``, ``audit``, and the users, API keys and signing keys of
``master/principals.py``. Any command may carry an ``audit`` dict (principal, peer, action,
target, details) written with it.

Raft (``master/raft.py``) applies every committed command with its log index. The index is
written in the same transaction as the change, and an index at or below it is skipped, so
replaying the journal after a restart never applies a command twice. ``copy_to`` and
``restore_from`` move the whole state for Raft snapshots.

Thread-safety: one lock serialises ``apply``; readers get immutable snapshots (records are
replaced, never mutated).
"""
from __future__ import annotations

import json
import os
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb

from lib.errors import (
    Fenced,
    InvalidArgument,
    NotLeader,
    StorageError,
    TopicExists,
    TubeqError,
    UnknownBroker,
    UnknownTopic,
)
from master import reassign
from master.principals import Principals
from master.sealing import Sealer
from master.settings import SINGLE_COPY

_SEQ = struct.Struct(">Q")  # big-endian so keys sort by sequence
_DBS = (b"meta", b"topics", b"tombstones", b"groups", b"audit", b"brokers", b"users",
        b"api_keys")


def _dump(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _load(raw: bytes) -> Any:
    return json.loads(bytes(raw))


# Leader epochs count from 1: the stores read 0 as "no epoch", what the records of a topic
# created before replication existed carry (storage/epochs.py).
FIRST_LEADER_EPOCH = 1


def with_replicas(record: dict[str, Any], replicas: list[list[int]],
                  first_epoch: int = FIRST_LEADER_EPOCH) -> dict[str, Any]:
    """``record`` with partitions ``replicas`` (preferred leader first): a partition it already
    had keeps its leader, epoch and ISR; a new one starts led by its first replica at
    ``first_epoch`` with every replica in sync (all are empty)."""
    leaders, isr, epochs = [], [], []
    for p, reps in enumerate(replicas):
        if p < len(record.get("replicas", ())):
            leaders.append(record["placement"][p])
            isr.append(list(record["isr"][p]))
            epochs.append(record["leader_epochs"][p])
        else:
            leaders.append(reps[0])
            isr.append(list(reps))
            epochs.append(first_epoch)
    return {**record, "replicas": [list(r) for r in replicas], "placement": leaders,
            "isr": isr, "leader_epochs": epochs}


def upgraded(record: dict[str, Any]) -> dict[str, Any]:
    """A topic record as every master reads it: one written before replication existed (a
    ``placement`` list only) becomes one copy per partition, led by that broker, epoch 0."""
    if "replicas" in record:
        return record
    settings = {**SINGLE_COPY, **record["settings"]}
    return with_replicas({**record, "settings": settings},
                         [[b] for b in record["placement"]], first_epoch=0)


def _put(items: list, i: int, value: Any) -> list:
    """A copy of ``items`` with ``items[i] = value`` (records are replaced, never mutated)."""
    return [*items[:i], value, *items[i + 1:]]


def _replicas_of(cmd: dict[str, Any]) -> list[list[int]]:
    """Replica lists of a create/alter command (one written before replication: ``placement``,
    one broker per partition)."""
    if "replicas" in cmd:
        replicas = [list(r) for r in cmd["replicas"]]
    else:
        replicas = [[b] for b in cmd["placement"]]
    for reps in replicas:
        if not reps or len(set(reps)) != len(reps):
            raise InvalidArgument(f"bad replica list {reps!r}: needs distinct brokers")
    return replicas


class MetaState:
    """Topics, placements, tombstones, groups, audit log, master epoch, brokers ever seen."""

    def __init__(self, path: str | Path, map_size: int = 1 << 30, tombstones_kept: int = 1000,
                 audit_kept: int = 100_000, sealer: Sealer | None = None) -> None:
        """``sealer``: how the signing keys are sealed in the state (master/sealing.py)."""
        self._path, self._map_size = Path(path), map_size
        self._sealer = sealer
        self._kept = {"tombstones": tombstones_kept, "audit": audit_kept}
        self._lock = threading.Lock()
        self._open()
        self._handlers: dict[str, Callable[[Any, dict[str, Any]], Any]] = {
            "lead": self._lead, "register_broker": self._register_broker,
            "set_draining": self._set_draining,
            "create_topic": self._create_topic, "alter_topic": self._alter_topic,
            "alter_isr": self._alter_isr, "elect_leaders": self._elect_leaders,
            "reassign": self._reassign,
            "delete_topic": self._delete_topic, "record_group": self._record_group,
            "audit": lambda txn, cmd: None,
        }
        for op in Principals.OPS:  # through self.principals: a snapshot restore replaces it
            self._handlers[op] = lambda ctx, cmd, op=op: getattr(self.principals, "_" + op)(
                ctx, cmd)

    def _open(self) -> None:
        self._path.mkdir(parents=True, exist_ok=True)
        try:
            self._env = lmdb.open(str(self._path), map_size=self._map_size, max_dbs=len(_DBS),
                                  sync=True)
        except lmdb.Error as exc:
            raise StorageError(f"cannot open master state at {self._path}: {exc}") from exc
        self._db = {name.decode(): self._env.open_db(name) for name in _DBS}
        self._topics: dict[str, dict[str, Any]] = {
            name: upgraded(record) for name, record in self._read_all("topics").items()}
        self._groups: dict[str, dict[str, Any]] = self._read_all("groups")
        brokers = self._read_all("brokers")
        self._brokers: dict[int, str] = {int(k): v["address"] for k, v in brokers.items()}
        self._incarnations: dict[int, str] = {int(k): v.get("incarnation", "")
                                              for k, v in brokers.items()}
        self._draining: frozenset[int] = frozenset(int(k) for k, v in brokers.items()
                                                   if v.get("draining"))
        self._applied: dict[str, int] = self._meta("applied") or {"index": 0, "term": 0}
        self._leader: dict[str, Any] = self._meta("leader") or {}
        self._epoch = int(self._meta("epoch") or 0)
        self.principals = Principals(self._env, self._db["users"], self._db["api_keys"],
                                     self._db["meta"], self._sealer)

    def _meta(self, key: str) -> Any:
        with self._env.begin(db=self._db["meta"]) as txn:
            raw = txn.get(key.encode())
        return None if raw is None else _load(raw)

    # -- reads ---------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """Leaderships so far: generations and broker terms of the current leader use it."""
        return self._epoch

    @property
    def applied_index(self) -> int:
        """Raft log index of the last command applied (0: none)."""
        return self._applied["index"]

    def leader(self) -> dict[str, Any]:
        """The latest leadership: {node (Raft address), address (gRPC), epoch} or {}."""
        return dict(self._leader)

    def topics(self) -> dict[str, dict[str, Any]]:
        """name -> {topic, topic_id, created_ms, settings, placement (leader per partition),
        replicas, isr, leader_epochs, targets (per partition; master/reassign.py)} (do not
        mutate)."""
        return dict(self._topics)

    def topic(self, name: str) -> dict[str, Any] | None:
        return self._topics.get(name)

    def groups(self) -> dict[str, dict[str, Any]]:
        """group -> {topics, created_ms, updated_ms} of every group ever recorded."""
        return dict(self._groups)

    def brokers(self) -> dict[int, str]:
        """broker id -> last registered address, for every broker ever registered."""
        return dict(self._brokers)

    def incarnation(self, broker_id: int) -> str:
        """The process incarnation the broker last registered with ("" unknown)."""
        return self._incarnations.get(broker_id, "")

    def draining(self) -> frozenset[int]:
        """Ids of the brokers an admin drained: no new partition goes there."""
        return self._draining

    def tombstones(self) -> list[dict[str, Any]]:
        """Deleted topic incarnations, oldest first: {topic, topic_id, time_ms}."""
        return list(self._read_all("tombstones").values())

    def audit(self, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` audit entries, oldest first."""
        out: list[dict[str, Any]] = []
        with self._env.begin(db=self._db["audit"]) as txn:
            cursor = txn.cursor()
            if cursor.last():
                for _key, raw in cursor.iterprev():
                    out.append(_load(raw))
                    if len(out) >= limit:
                        break
        return out[::-1]

    def _read_all(self, db: str) -> dict[str, Any]:
        with self._env.begin(db=self._db[db]) as txn:
            return {bytes(k).decode() if db != "tombstones" else str(_SEQ.unpack(k)[0]):
                    _load(v) for k, v in txn.cursor()}

    # -- the state machine ---------------------------------------------------------------

    def apply(self, cmd: dict[str, Any], index: int = 0, term: int = 0) -> Any:
        """Apply one command (and its audit entry) atomically; returns the command's result.

        ``index``/``term``: its Raft log position (0: not from Raft). A position at or below
        the last applied one is skipped (returns None): a replay after a restart.
        Raises a TubeqError (nothing written but the position) when the command is invalid
        against the state; every master raises the same, so they stay identical.
        """
        with self._lock:
            if index and index <= self._applied["index"]:
                return None
            handler = self._handlers.get(cmd.get("op", "")) if isinstance(cmd, dict) else None
            position = {"index": index, "term": term} if index else None
            try:
                if handler is None:
                    raise InvalidArgument(f"unknown state command {cmd!r:.80}")
                self._check_leadership(cmd)
                return self._write(handler, cmd, position)
            except TubeqError:
                if position:
                    self._write(lambda ctx, c: None, {}, position)
                raise

    def _check_leadership(self, cmd: dict[str, Any]) -> None:
        """Refuse a command built under a leadership that is no longer the current one.

        pysyncobj forwards a command submitted on a follower to the leader, so a deposed
        master's write could still reach the log. Commands carry the epoch they were built
        under (``lead`` commands: the epoch they follow); applying one from an older epoch
        would let a deposed master change state, so every master refuses it the same way.
        """
        if "after" in cmd and cmd["after"] != self._epoch:
            raise NotLeader(f"leadership claim after epoch {cmd['after']} is stale (epoch is "
                            f"{self._epoch})", leader="")
        if "epoch" in cmd and cmd["epoch"] != self._epoch:
            raise NotLeader(f"command of epoch {cmd['epoch']} from a deposed master refused "
                            f"(epoch is {self._epoch})", leader="")

    def _write(self, handler: Callable, cmd: dict[str, Any],
               position: dict[str, int] | None) -> Any:
        staged: list[Callable[[], None]] = []
        try:
            with self._env.begin(write=True) as txn:
                result = handler((txn, staged), cmd)
                if cmd.get("audit"):
                    self._append(txn, "audit", {**cmd["audit"], "time_ms": cmd["time_ms"]})
                if position:
                    txn.put(b"applied", _dump(position), db=self._db["meta"])
                    staged.append(lambda: self._applied.update(position))
        except lmdb.Error as exc:
            raise StorageError(f"master state write failed: {exc}") from exc
        for publish in staged:  # caches change only after the transaction committed
            publish()
        return result

    # -- snapshots (Raft log compaction and catch-up of a lagging master) ---------------

    def copy_to(self, fd: int) -> dict[str, int]:
        """Write a compact copy of the whole state to ``fd``; returns its applied position."""
        with self._lock:
            self._env.copyfd(fd, compact=True)
            return dict(self._applied)

    def restore_from(self, mdb_file: Path) -> None:
        """Replace the whole state by a copy made by :meth:`copy_to` (a leader's snapshot)."""
        with self._lock:
            self._env.close()
            target = self._path / "data.mdb"
            tmp = self._path / "data.mdb.restore"
            tmp.write_bytes(Path(mdb_file).read_bytes())
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            os.replace(tmp, target)
            (self._path / "lock.mdb").unlink(missing_ok=True)
            self._open()

    def _lead(self, ctx: Any, cmd: dict[str, Any]) -> int:
        txn, staged = ctx
        raw = txn.get(b"epoch", db=self._db["meta"])
        epoch = (0 if raw is None else int(_load(raw))) + 1
        leader = {"node": str(cmd.get("node", "")), "address": str(cmd.get("address", "")),
                  "epoch": epoch, "time_ms": cmd["time_ms"]}
        txn.put(b"epoch", _dump(epoch), db=self._db["meta"])
        txn.put(b"leader", _dump(leader), db=self._db["meta"])
        staged.append(lambda: self.__dict__.update(_leader=leader, _epoch=epoch))
        return epoch

    def _register_broker(self, ctx: Any, cmd: dict[str, Any]) -> None:
        txn, staged = ctx
        bid, address = int(cmd["broker_id"]), str(cmd["address"])
        key = str(bid).encode()
        raw = txn.get(key, db=self._db["brokers"])
        old = {} if raw is None else _load(raw)  # keeps "draining" across a new address
        incarnation = str(cmd.get("incarnation", old.get("incarnation", "")))
        txn.put(key, _dump({**old, "address": address, "time_ms": cmd["time_ms"],
                            "incarnation": incarnation}), db=self._db["brokers"])
        staged.append(lambda: (self._brokers.__setitem__(bid, address),
                               self._incarnations.__setitem__(bid, incarnation)))

    def _set_draining(self, ctx: Any, cmd: dict[str, Any]) -> dict[str, Any]:
        txn, staged = ctx
        bid, draining = int(cmd["broker_id"]), bool(cmd["draining"])
        key = str(bid).encode()
        raw = txn.get(key, db=self._db["brokers"])
        if raw is None:
            raise UnknownBroker(f"unknown broker {bid}: no broker with this id ever registered",
                                broker_id=bid)
        old = _load(raw)
        changed = bool(old.get("draining")) != draining
        txn.put(key, _dump({**old, "draining": draining}), db=self._db["brokers"])
        now = self._draining | {bid} if draining else self._draining - {bid}
        staged.append(lambda: setattr(self, "_draining", now))
        moved = self._reassign_all(txn, staged, cmd.get("reassign", []))
        return {"broker_id": bid, "draining": draining, "changed": changed, "moving": len(moved)}

    def _create_topic(self, ctx: Any, cmd: dict[str, Any]) -> dict[str, Any]:
        txn, staged = ctx
        name = cmd["topic"]
        if name in self._topics:
            if cmd.get("request_id") and self._topics[name].get("request_id") == \
                    cmd["request_id"]:
                return self._topics[name]  # the same create, retried (a lost answer)
            raise TopicExists(f"topic {name!r} already exists", topic=name)
        limit = int(cmd.get("max_topics", 0))
        if limit and len(self._topics) >= limit:
            raise InvalidArgument(f"cannot create topic {name!r}: the cluster already has "
                                  f"{len(self._topics)} topics (max_topics={limit})",
                                  limit=limit)
        raw = txn.get(b"next_topic_id", db=self._db["meta"])
        topic_id = 1 if raw is None else int(_load(raw))
        txn.put(b"next_topic_id", _dump(topic_id + 1), db=self._db["meta"])
        replicas = _replicas_of(cmd)
        if len(replicas) != cmd["settings"]["partitions"]:
            raise InvalidArgument("placement does not cover every partition")
        record = with_replicas(
            {"topic": name, "topic_id": topic_id, "created_ms": cmd["time_ms"],
             "settings": {**SINGLE_COPY, **cmd["settings"]}, "placement": [],
             "request_id": str(cmd.get("request_id", ""))}, replicas)
        self._put_topic(txn, staged, record)
        return record

    def _alter_topic(self, ctx: Any, cmd: dict[str, Any]) -> dict[str, Any]:
        txn, staged = ctx
        old = self._existing(cmd["topic"])
        replicas = _replicas_of(cmd)
        if replicas[:len(old["replicas"])] != old["replicas"]:
            raise InvalidArgument(f"alter of {cmd['topic']!r} would move existing partitions",
                                  topic=cmd["topic"])
        if len(replicas) != cmd["settings"]["partitions"]:
            raise InvalidArgument("placement does not cover every partition")
        record = with_replicas({**old, "settings": {**SINGLE_COPY, **cmd["settings"]}},
                               replicas)
        record = self._moved(record, cmd.get("reassign", ()))
        self._put_topic(txn, staged, record)
        return record

    def _alter_isr(self, ctx: Any, cmd: dict[str, Any]) -> dict[str, Any]:
        """A leader's new ISR for one partition; refused (Fenced) unless it comes from the
        partition's current leader at its current epoch, and it must hold the leader."""
        txn, staged = ctx
        old = self._existing(cmd["topic"])
        p, isr = int(cmd["partition"]), [int(b) for b in cmd["isr"]]
        if old["topic_id"] != cmd["topic_id"] or not 0 <= p < len(old["replicas"]):
            raise UnknownTopic(f"no partition {cmd['topic']}/{p} of topic id {cmd['topic_id']}",
                               topic=cmd["topic"])
        leader, epoch = old["placement"][p], old["leader_epochs"][p]
        if cmd["broker_id"] != leader or cmd["leader_epoch"] != epoch:
            raise Fenced(f"ISR change for {cmd['topic']}/{p} from broker {cmd['broker_id']} "
                         f"at leader epoch {cmd['leader_epoch']} refused: the leader is broker "
                         f"{leader} at epoch {epoch}", topic=cmd["topic"], partition=p)
        if leader not in isr or len(set(isr)) != len(isr) \
                or not set(isr) <= set(old["replicas"][p]):
            raise InvalidArgument(f"ISR {isr} of {cmd['topic']}/{p} must hold its leader "
                                  f"{leader} and only its replicas {old['replicas'][p]}")
        record = reassign.finish({**old, "isr": _put(old["isr"], p, isr)}, p,
                                 leader_may_leave=bool(cmd.get("complete")))
        self._put_topic(txn, staged, record)
        return record

    def _reassign(self, ctx: Any, cmd: dict[str, Any]) -> list[dict[str, Any]]:
        """Partitions to new target replicas (master/reassign.py); a change for a topic since
        re-created is skipped. Returns the changes applied."""
        txn, staged = ctx
        return self._reassign_all(txn, staged, cmd["changes"])

    def _reassign_all(self, txn: Any, staged: list,
                      changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        applied = []
        for name in dict.fromkeys(c["topic"] for c in changes):
            old = self._topics.get(name)
            mine = [c for c in changes if c["topic"] == name
                    and old is not None and c["topic_id"] == old["topic_id"]]
            if mine:
                self._put_topic(txn, staged, self._moved(old, mine))
                applied += mine
        return applied

    @staticmethod
    def _moved(record: dict[str, Any], changes) -> dict[str, Any]:
        for change in changes:
            p, target = int(change["partition"]), [int(b) for b in change["target"]]
            if not 0 <= p < len(record["replicas"]) or not target \
                    or len(set(target)) != len(target):
                raise InvalidArgument(f"bad reassignment of {record['topic']}/{p} to {target}: "
                                      "needs distinct brokers")
            record = reassign.start(record, p, target)
        return record

    def _elect_leaders(self, ctx: Any, cmd: dict[str, Any]) -> list[dict[str, Any]]:
        """New leaders (master/election.py); a change computed from an epoch that is no
        longer the partition's (or for a topic since re-created) is skipped, the same way on
        every master. Returns the changes applied."""
        txn, staged = ctx
        records, applied = {}, []
        for change in cmd["changes"]:
            name, p = change["topic"], int(change["partition"])
            old = records.get(name) or self._topics.get(name)
            if old is None or old["topic_id"] != change["topic_id"] \
                    or not 0 <= p < len(old["replicas"]) \
                    or old["leader_epochs"][p] != change["from_epoch"] \
                    or change["leader"] not in old["replicas"][p] \
                    or change["leader"] not in change["isr"]:
                continue
            records[name] = {
                **old, "placement": _put(old["placement"], p, int(change["leader"])),
                "leader_epochs": _put(old["leader_epochs"], p, int(change["leader_epoch"])),
                "isr": _put(old["isr"], p, [int(b) for b in change["isr"]])}
            applied.append(change)
        for record in records.values():
            self._put_topic(txn, staged, record)
        return applied

    def _delete_topic(self, ctx: Any, cmd: dict[str, Any]) -> dict[str, Any]:
        txn, staged = ctx
        old = self._existing(cmd["topic"])
        txn.delete(old["topic"].encode(), db=self._db["topics"])
        self._append(txn, "tombstones", {"topic": old["topic"], "topic_id": old["topic_id"],
                                         "time_ms": cmd["time_ms"]})
        staged.append(lambda: self._topics.pop(old["topic"], None))
        return old

    def _record_group(self, ctx: Any, cmd: dict[str, Any]) -> dict[str, Any]:
        txn, staged = ctx
        name = cmd["group"]
        old = self._groups.get(name, {"created_ms": cmd["time_ms"], "topics": []})
        record = {"created_ms": old["created_ms"], "updated_ms": cmd["time_ms"],
                  "topics": sorted(set(old["topics"]) | set(cmd["topics"]))}
        txn.put(name.encode(), _dump(record), db=self._db["groups"])
        staged.append(lambda: self._groups.__setitem__(name, record))
        return record

    def _existing(self, name: str) -> dict[str, Any]:
        old = self._topics.get(name)
        if old is None:
            raise UnknownTopic(f"unknown topic {name!r}", topic=name)
        return old

    def _put_topic(self, txn: Any, staged: list, record: dict[str, Any]) -> None:
        txn.put(record["topic"].encode(), _dump(record), db=self._db["topics"])
        staged.append(lambda: self._topics.__setitem__(record["topic"], record))

    def _append(self, txn: Any, db: str, value: dict[str, Any]) -> None:
        """Append to a sequence-keyed log, dropping the oldest entries beyond what is kept."""
        handle = self._db[db]
        cursor = txn.cursor(db=handle)
        seq = _SEQ.unpack(cursor.key())[0] + 1 if cursor.last() else 1
        txn.put(_SEQ.pack(seq), _dump(value), db=handle)
        oldest = seq - self._kept[db]
        if oldest > 0 and cursor.first():
            while cursor.key() and _SEQ.unpack(cursor.key())[0] <= oldest:
                if not cursor.delete():
                    break

    def close(self) -> None:
        self._env.close()
