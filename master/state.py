"""The master's metadata state machine on LMDB (``<data_dir>/meta``): it applies replicated
commands, each exactly once and atomically with its audit entry, and copies or restores the
whole state for Raft snapshots.

Every change is a plain JSON-serialisable command dict applied by :meth:`MetaState.apply` in
one LMDB write transaction: the change and its audit entry land together or not at all. ``apply``
is deterministic (it never reads a clock: commands carry ``time_ms``; it never looks at live
state), so Raft (``master/raft.py``) replicates the same commands and every master applies them
in the same order.

The state is in parts, each owning some LMDB databases, a cache of them and its commands
(``op``):

* here: ``lead`` (a new leadership: epoch + 1, the leader's node and address) and ``audit``;
* topics (master/state_topics.py): ``create_topic``, ``alter_topic``, ``delete_topic``,
  ``alter_isr``, ``elect_leaders``, ``reassign``;
* brokers (master/state_brokers.py): ``register_broker``, ``set_draining``;
* groups (master/state_groups.py): ``record_group``;
* producer ids (master/state_producers.py): ``reserve_producer_ids``;
* transactions (master/state_txns.py): ``txn_write``, ``txn_expire``;
* users, API keys, signing keys, ACLs, quotas and IP rules (master/principals.py).

Any command may carry an ``audit`` dict (principal, peer, action, target, details) written with
it. Commands built by a leadership carry its ``epoch`` (``lead``: the epoch it follows,
``after``), and one from a deposed leadership is refused the same way on every master.

Raft applies every committed command with its log index. The index is written in the same
transaction as the change, and an index at or below it is skipped, so replaying the journal
after a restart never applies a command twice. ``copy_to`` and ``restore_from`` move the whole
state (every part: one LMDB file) for Raft snapshots.

Thread-safety: one lock serialises ``apply`` and snapshots; readers get immutable snapshots
(records are replaced, never mutated), and a part's cache changes only after its command's
transaction committed.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import lmdb

from lib.errors import InvalidArgument, NotLeader, StorageError, TubeqError
from master.principals import Principals
from master.sealing import Sealer
from master.state_brokers import BrokerRecords
from master.state_groups import GroupRecords
from master.state_producers import ProducerIdCounter
from master.state_tables import Context, Handler, SeqLog, dump, load
from master.state_topics import TopicRecords
from master.state_txns import TxnRecords

# The LMDB's named databases: the on-disk and snapshot layout (an existing data dir must open).
_DBS = (b"meta", b"topics", b"tombstones", b"groups", b"audit", b"brokers", b"users",
        b"api_keys", b"txns")


class MetaState:
    """Topics, placements, tombstones, groups, audit log, master epoch, brokers ever seen,
    principals; the one object Raft applies commands to."""

    def __init__(self, path: str | Path, map_size: int = 1 << 30, tombstones_kept: int = 1000,
                 audit_kept: int = 100_000, sealer: Sealer | None = None) -> None:
        """``sealer``: how the signing keys are sealed in the state (master/sealing.py)."""
        self._path, self._map_size = Path(path), map_size
        self._sealer = sealer
        self._kept = {"tombstones": tombstones_kept, "audit": audit_kept}
        self._lock = threading.Lock()
        self._open()

    def _open(self) -> None:
        """Open the LMDB and build every part from it (again after a snapshot restore: the
        handlers then belong to the new parts)."""
        self._path.mkdir(parents=True, exist_ok=True)
        try:
            self._env = lmdb.open(str(self._path), map_size=self._map_size, max_dbs=len(_DBS),
                                  sync=True)
        except lmdb.Error as exc:
            raise StorageError(f"cannot open master state at {self._path}: {exc}") from exc
        db = {name.decode(): self._env.open_db(name) for name in _DBS}
        self._meta_db = db["meta"]
        self._audit = SeqLog(self._env, db["audit"], self._kept["audit"])
        self._topics = TopicRecords(self._env, db["topics"], db["meta"],
                                    SeqLog(self._env, db["tombstones"], self._kept["tombstones"]))
        self._brokers = BrokerRecords(self._env, db["brokers"], self._topics)
        self._groups = GroupRecords(self._env, db["groups"])
        self._producer_ids = ProducerIdCounter(self._env, db["meta"])
        self._txns = TxnRecords(self._env, db["txns"])
        self.principals = Principals(self._env, db["users"], db["api_keys"], db["meta"],
                                     self._sealer)
        self._applied: dict[str, int] = self._meta("applied") or {"index": 0, "term": 0}
        self._leader: dict[str, Any] = self._meta("leader") or {}
        self._epoch = int(self._meta("epoch") or 0)
        self._handlers: dict[str, Handler] = {
            "lead": self._lead, "audit": lambda ctx, cmd: None,
            **self._topics.handlers(), **self._brokers.handlers(), **self._groups.handlers(),
            **self._producer_ids.handlers(), **self._txns.handlers(),
            **self.principals.handlers()}

    def _meta(self, key: str) -> Any:
        with self._env.begin(db=self._meta_db) as txn:
            raw = txn.get(key.encode())
        return None if raw is None else load(raw)

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
        return self._topics.all()

    def topic(self, name: str) -> dict[str, Any] | None:
        return self._topics.get(name)

    def topics_version(self) -> int:
        """Moves on whenever a topic record or tombstone changes (on this master: never
        compare it with another's)."""
        return self._topics.version

    def tombstones(self) -> list[dict[str, Any]]:
        """Deleted topic incarnations, oldest first: {topic, topic_id, time_ms}."""
        return self._topics.tombstones()

    def groups(self) -> dict[str, dict[str, Any]]:
        """group -> {topics, created_ms, updated_ms} of every group ever recorded."""
        return self._groups.all()

    def brokers(self) -> dict[int, str]:
        """broker id -> last registered address, for every broker ever registered."""
        return self._brokers.addresses()

    def incarnation(self, broker_id: int) -> str:
        """The process incarnation the broker last registered with ("" unknown)."""
        return self._brokers.incarnation(broker_id)

    def draining(self) -> frozenset[int]:
        """Ids of the brokers an admin drained: no new partition goes there."""
        return self._brokers.draining()

    def next_producer_id(self) -> int:
        """The first producer id no block has reserved yet (``reserve_producer_ids``)."""
        return self._producer_ids.next_id

    def txns(self) -> dict[str, dict[str, Any]]:
        """transactional_id -> its record (master/state_txns.py; do not mutate)."""
        return self._txns.all()

    def txn(self, transactional_id: str) -> dict[str, Any] | None:
        return self._txns.get(transactional_id)

    def audit(self, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` audit entries, oldest first."""
        return self._audit.newest(limit)

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

    def _write(self, handler: Handler, cmd: dict[str, Any],
               position: dict[str, int] | None) -> Any:
        staged: list = []
        try:
            with self._env.begin(write=True) as txn:
                result = handler((txn, staged), cmd)
                if cmd.get("audit"):
                    self._audit.append(txn, {**cmd["audit"], "time_ms": cmd["time_ms"]})
                if position:
                    txn.put(b"applied", dump(position), db=self._meta_db)
                    staged.append(lambda: self._applied.update(position))
        except lmdb.Error as exc:
            raise StorageError(f"master state write failed: {exc}") from exc
        for publish in staged:  # caches change only after the transaction committed
            publish()
        return result

    def _lead(self, ctx: Context, cmd: dict[str, Any]) -> int:
        txn, staged = ctx
        raw = txn.get(b"epoch", db=self._meta_db)
        epoch = (0 if raw is None else int(load(raw))) + 1
        leader = {"node": str(cmd.get("node", "")), "address": str(cmd.get("address", "")),
                  "epoch": epoch, "time_ms": cmd["time_ms"]}
        txn.put(b"epoch", dump(epoch), db=self._meta_db)
        txn.put(b"leader", dump(leader), db=self._meta_db)

        def publish() -> None:
            self._leader, self._epoch = leader, epoch
        staged.append(publish)
        return epoch

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

    def close(self) -> None:
        self._env.close()
