"""The master's metadata state machine on LMDB (``<data_dir>/meta``).

Every change is a plain JSON-serialisable command dict applied by :meth:`MetaState.apply` in
one LMDB write transaction: the change and its audit entry land together or not at all. ``apply``
is deterministic (it never reads a clock: commands carry ``time_ms``; it never looks at live
state), so the "Master HA" issue can replicate the same commands through Raft and apply them in
the same order on every master.

Commands (``op``): ``start`` (epoch + 1), ``register_broker``, ``create_topic``,
``alter_topic``, ``delete_topic``, ``record_group``, ``audit``. Any command may carry an
``audit`` dict (principal, peer, action, target, details) written with it.

Thread-safety: one lock serialises ``apply``; readers get immutable snapshots (records are
replaced, never mutated).
"""
from __future__ import annotations

import json
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb

from lib.errors import InvalidArgument, StorageError, TopicExists, UnknownTopic

_SEQ = struct.Struct(">Q")  # big-endian so keys sort by sequence
_DBS = (b"meta", b"topics", b"tombstones", b"groups", b"audit", b"brokers")


def _dump(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _load(raw: bytes) -> Any:
    return json.loads(bytes(raw))


class MetaState:
    """Topics, placements, tombstones, groups, audit log, master epoch, brokers ever seen."""

    def __init__(self, path: str | Path, map_size: int = 1 << 30, tombstones_kept: int = 1000,
                 audit_kept: int = 100_000) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        try:
            self._env = lmdb.open(str(path), map_size=map_size, max_dbs=len(_DBS), sync=True)
        except lmdb.Error as exc:
            raise StorageError(f"cannot open master state at {path}: {exc}") from exc
        self._db = {name.decode(): self._env.open_db(name) for name in _DBS}
        self._kept = {"tombstones": tombstones_kept, "audit": audit_kept}
        self._lock = threading.Lock()
        self._topics: dict[str, dict[str, Any]] = self._read_all("topics")
        self._groups: dict[str, dict[str, Any]] = self._read_all("groups")
        self._brokers: dict[int, str] = {int(k): v["address"]
                                         for k, v in self._read_all("brokers").items()}
        self._handlers: dict[str, Callable[[Any, dict[str, Any]], Any]] = {
            "start": self._start, "register_broker": self._register_broker,
            "create_topic": self._create_topic, "alter_topic": self._alter_topic,
            "delete_topic": self._delete_topic, "record_group": self._record_group,
            "audit": lambda txn, cmd: None,
        }

    # -- reads ---------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        with self._env.begin(db=self._db["meta"]) as txn:
            raw = txn.get(b"epoch")
        return 0 if raw is None else int(_load(raw))

    def topics(self) -> dict[str, dict[str, Any]]:
        """name -> {topic, topic_id, created_ms, settings, placement} (do not mutate)."""
        return dict(self._topics)

    def topic(self, name: str) -> dict[str, Any] | None:
        return self._topics.get(name)

    def groups(self) -> dict[str, dict[str, Any]]:
        """group -> {topics, created_ms, updated_ms} of every group ever recorded."""
        return dict(self._groups)

    def brokers(self) -> dict[int, str]:
        """broker id -> last registered address, for every broker ever registered."""
        return dict(self._brokers)

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

    def apply(self, cmd: dict[str, Any]) -> Any:
        """Apply one command (and its audit entry) atomically; returns the command's result.

        Raises a TubeqError (nothing written) when the command is invalid against the state.
        """
        handler = self._handlers.get(cmd.get("op", ""))
        if handler is None:
            raise InvalidArgument(f"unknown state command {cmd.get('op')!r}")
        with self._lock:
            staged: list[Callable[[], None]] = []
            try:
                with self._env.begin(write=True) as txn:
                    result = handler((txn, staged), cmd)
                    if cmd.get("audit"):
                        self._append(txn, "audit", {**cmd["audit"], "time_ms": cmd["time_ms"]})
            except lmdb.Error as exc:
                raise StorageError(f"master state write failed: {exc}") from exc
            for publish in staged:  # caches change only after the transaction committed
                publish()
            return result

    def _start(self, ctx: Any, cmd: dict[str, Any]) -> int:
        txn, _ = ctx
        raw = txn.get(b"epoch", db=self._db["meta"])
        epoch = (0 if raw is None else int(_load(raw))) + 1
        txn.put(b"epoch", _dump(epoch), db=self._db["meta"])
        return epoch

    def _register_broker(self, ctx: Any, cmd: dict[str, Any]) -> None:
        txn, staged = ctx
        bid, address = int(cmd["broker_id"]), str(cmd["address"])
        txn.put(str(bid).encode(), _dump({"address": address, "time_ms": cmd["time_ms"]}),
                db=self._db["brokers"])
        staged.append(lambda: self._brokers.__setitem__(bid, address))

    def _create_topic(self, ctx: Any, cmd: dict[str, Any]) -> dict[str, Any]:
        txn, staged = ctx
        name = cmd["topic"]
        if name in self._topics:
            raise TopicExists(f"topic {name!r} already exists", topic=name)
        limit = int(cmd.get("max_topics", 0))
        if limit and len(self._topics) >= limit:
            raise InvalidArgument(f"cannot create topic {name!r}: the cluster already has "
                                  f"{len(self._topics)} topics (max_topics={limit})",
                                  limit=limit)
        raw = txn.get(b"next_topic_id", db=self._db["meta"])
        topic_id = 1 if raw is None else int(_load(raw))
        txn.put(b"next_topic_id", _dump(topic_id + 1), db=self._db["meta"])
        record = {"topic": name, "topic_id": topic_id, "created_ms": cmd["time_ms"],
                  "settings": dict(cmd["settings"]), "placement": list(cmd["placement"])}
        self._put_topic(txn, staged, record)
        return record

    def _alter_topic(self, ctx: Any, cmd: dict[str, Any]) -> dict[str, Any]:
        txn, staged = ctx
        old = self._existing(cmd["topic"])
        placement = list(cmd["placement"])
        if placement[:len(old["placement"])] != old["placement"]:
            raise InvalidArgument(f"alter of {cmd['topic']!r} would move existing partitions",
                                  topic=cmd["topic"])
        if len(placement) != cmd["settings"]["partitions"]:
            raise InvalidArgument("placement does not cover every partition")
        record = {**old, "settings": dict(cmd["settings"]), "placement": placement}
        self._put_topic(txn, staged, record)
        return record

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
