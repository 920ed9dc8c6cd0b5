"""The one module that owns pysyncobj: Raft replication of the master's metadata commands.

Every master runs a :class:`RaftLog`. The leader's :meth:`RaftLog.submit` appends a command
(a JSON document, never a Python object) to the Raft log; once a majority holds it, every
master applies it in log order to its own LMDB :class:`~master.state.MetaState`. That is the
hot standby: a standby's state is the leader's, minus the last heartbeat of replication lag.

What this adapter adds to pysyncobj, and why:

* **Password always set.** pysyncobj pickles its peer messages; with a password they are
  encrypted and authenticated (Fernet), so an unauthenticated peer is never unpickled.
* **Exactly-once apply.** ``MetaState.apply`` stores the log index with each change and skips
  indexes it already has, so the journal replay at every start applies nothing twice.
* **LMDB snapshots.** pysyncobj compacts its log by pickling the replicated object. Our state
  lives in LMDB, so the snapshot file is a compact LMDB copy (``env.copyfd``) behind a small
  JSON header; a lagging master that receives it replaces its state with it. A failure to write
  one is logged as an error and retried, not swallowed.
* **A journal that reaches the disk.** pysyncobj writes its journal through mmap and never
  msyncs it (only at close), and writes the vote file without fsync. :class:`SyncedJournal`
  msyncs after every append/truncate and fsyncs the vote file, so an entry a master
  acknowledged survives its power loss (the README's "Master HA" section has the details).
"""
from __future__ import annotations

import base64
import json
import logging
import os
import secrets
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pysyncobj.syncobj as _syncobj
from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated
from pysyncobj.journal import FileJournal
from pysyncobj.node import TCPNode

from lib.errors import NotLeader, TubeqError, Unavailable
from lib.logs import event
from lib.wire_errors import error_class
from master.state import MetaState

log = logging.getLogger(__name__)
SNAPSHOT_MAGIC = b"TUBEQ-SNAPSHOT-1\n"
_LEN = struct.Struct("<I")
PASSWORD_ENV = "TUBEQ_RAFT_PASSWORD"


@dataclass(frozen=True)
class RaftSettings:
    """Raft node identity and timing (from ``MasterConfig``)."""

    node: str  # host:port this master's Raft listens on
    peers: tuple[str, ...] = ()  # the other masters' Raft host:port
    password: str = ""
    data_dir: str = ""
    election_min_s: float = 0.8
    election_max_s: float = 1.6
    append_period_s: float = 0.1
    leader_fallback_s: float = 3.0  # a leader without a majority this long steps down
    compaction_entries: int = 5000
    compaction_min_s: float = 300.0
    extra: dict[str, Any] = field(default_factory=dict)


class SyncedJournal(FileJournal):
    """pysyncobj's file journal, made durable: msync after each change, fsync of the votes."""

    def __init__(self, path: str) -> None:
        self._bulk = False
        self._meta_path = path + ".meta"
        super().__init__(path)

    def add(self, command: bytes, idx: int, term: int) -> None:
        super().add(command, idx, term)
        if not self._bulk:
            self.flush()

    def deleteEntriesFrom(self, entryFrom: int) -> None:  # noqa: N802 - pysyncobj's name
        super().deleteEntriesFrom(entryFrom)
        self.flush()

    def deleteEntriesTo(self, entryTo: int) -> None:  # noqa: N802
        self._bulk = True  # rewrites the journal entry by entry: one msync at the end
        try:
            super().deleteEntriesTo(entryTo)
        finally:
            self._bulk = False
        self.flush()

    def setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:  # noqa: N802, N803
        super().setCurrentTerm(term, votedForNodeId)
        _fsync_file(self._meta_path)


def _fsync_file(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as exc:
        event(log, "raft.fsync_failed", logging.ERROR, path=path, error=str(exc))


def _create_journal(path: str | None = None) -> Any:
    return _syncobj.MemoryJournal() if path is None else SyncedJournal(path)


_syncobj.createJournal = _create_journal  # SyncObj looks it up here at construction


class _Replica(SyncObj):
    """The replicated object: one method that hands a committed command to ``apply``."""

    def __init__(self, settings: RaftSettings, conf: SyncObjConf,
                 apply: Callable[[bytes, int], Any]) -> None:
        self._apply_committed = apply
        super().__init__(settings.node, list(settings.peers), conf)

    @replicated
    def apply_command(self, payload: bytes) -> Any:
        # pysyncobj increments raftLastApplied after the apply: this entry's index is one more.
        return self._apply_committed(payload, self.raftLastApplied + 1)


class RaftLog:
    """A master's Raft node: submit commands (leader), apply committed ones (everyone)."""

    def __init__(self, settings: RaftSettings, state: MetaState,
                 on_role_change: Callable[[], None] | None = None) -> None:
        if not settings.password:
            raise TubeqError("the Raft password is required (TUBEQ_RAFT_PASSWORD or "
                             "raft_password): pysyncobj peers must authenticate")
        self.settings, self.state = settings, state
        self._on_role_change = on_role_change
        raft_dir = Path(settings.data_dir) / "raft"
        raft_dir.mkdir(parents=True, exist_ok=True)
        self._snapshot_tmp = raft_dir / "snapshot.mdb.tmp"
        conf = SyncObjConf(
            password=settings.password, journalFile=str(raft_dir / "journal"),
            fullDumpFile=str(raft_dir / "snapshot"), serializer=self._write_snapshot,
            deserializer=self._read_snapshot, raftMinTimeout=settings.election_min_s,
            raftMaxTimeout=settings.election_max_s,
            appendEntriesPeriod=settings.append_period_s,
            connectionTimeout=max(3.5, settings.election_max_s * 2),
            connectionRetryTime=0.5,  # default 5 s: a master started late stays cut off that long
            leaderFallbackTimeout=settings.leader_fallback_s,
            logCompactionMinEntries=settings.compaction_entries,
            logCompactionMinTime=settings.compaction_min_s, onStateChanged=self._state_changed,
            dynamicMembershipChange=False, **settings.extra)
        self._replica = _Replica(settings, conf, self._apply)

    # -- writes ------------------------------------------------------------------------

    def submit(self, cmd: dict[str, Any], timeout: float = 5.0) -> Any:
        """Replicate ``cmd`` and return its result once applied here (raise its error).

        Only the leader may submit. NotLeader when this master is not (or stops being) the
        leader before the command commits; Unavailable when no majority commits it within
        ``timeout`` (the command may still commit later: writes are not blindly retried).
        """
        if not self.is_leader():
            raise NotLeader("this master is not the leader", leader="")
        done = threading.Event()
        box: list[Any] = []

        def finished(result: Any, reason: int) -> None:
            box.append((result, reason))
            done.set()

        payload = json.dumps(cmd, sort_keys=True, separators=(",", ":")).encode()
        self._replica.apply_command(payload, callback=finished)
        if not done.wait(timeout):
            raise Unavailable(f"no majority of masters committed {cmd.get('op')!r} within "
                              f"{timeout} s (lost quorum?)")
        result, reason = box[0]
        if reason != FAIL_REASON.SUCCESS:
            raise NotLeader(f"leadership changed before {cmd.get('op')!r} committed "
                            f"(reason {reason})", leader="")
        return _unwrap(result)

    def force_compaction(self) -> None:
        """Write a snapshot and drop the log before it at the next tick (tests, operators)."""
        self._replica.forceLogCompaction()

    # -- reads -------------------------------------------------------------------------

    def is_leader(self) -> bool:
        return bool(self._replica._isLeader())

    def leader_node(self) -> str:
        """Raft address of the leader this node follows ("" during an election)."""
        leader = self._replica._getLeader()
        return "" if leader is None else str(leader.id)  # a TCPNode's id is its host:port

    def status(self) -> dict[str, Any]:
        s = self._replica.getStatus()
        return {"node": self.settings.node, "leader": self.leader_node(),
                "is_leader": self.is_leader(), "term": int(s.get("raft_term") or 0),
                "commit_index": int(s.get("commit_idx") or 0),
                "last_applied": int(s.get("last_applied") or 0),
                "applied_index": self.state.applied_index,
                "log_entries": int(s.get("log_len") or 0), "has_quorum": bool(s["has_quorum"]),
                "peers": list(self.settings.peers)}

    def close(self) -> None:
        self._replica.destroy_synchronous()

    # -- called by pysyncobj on its thread ---------------------------------------------

    def _state_changed(self, old: int, new: int) -> None:
        event(log, "raft.role", node=self.settings.node, old=_ROLES.get(old, old),
              new=_ROLES.get(new, new))
        if self._on_role_change is not None:
            self._on_role_change()

    def _apply(self, payload: bytes, index: int) -> Any:
        """Apply one committed command; errors are results (every master gets the same)."""
        try:
            cmd = json.loads(payload)
            return {"ok": self.state.apply(cmd, index=index)}
        except TubeqError as err:
            return {"error": err.code, "message": err.message,
                    "details": {k: v for k, v in err.details.items()
                                if isinstance(v, str | int | float | bool)}}
        except (ValueError, TypeError) as exc:  # a malformed command: apply nothing, go on
            event(log, "raft.bad_command", logging.ERROR, index=index, error=str(exc))
            return {"error": "INVALID_ARGUMENT", "message": f"malformed command: {exc}",
                    "details": {}}

    def _write_snapshot(self, path: str, raft_data: tuple) -> None:
        """pysyncobj's serializer: header (log position, last entries) + LMDB copy."""
        try:
            with open(self._snapshot_tmp, "wb") as mdb:
                applied = self.state.copy_to(mdb.fileno())
            entries = [[base64.b64encode(bytes(c)).decode(), int(i), int(t)]
                       for c, i, t in raft_data[:2]]
            header = json.dumps({"applied": applied, "entries": entries,
                                 "cluster": sorted(str(n.address) for n in raft_data[2])})
            with open(path, "wb") as out, open(self._snapshot_tmp, "rb") as mdb:
                out.write(SNAPSHOT_MAGIC + _LEN.pack(len(header)) + header.encode())
                while chunk := mdb.read(1 << 20):
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            self._snapshot_tmp.unlink(missing_ok=True)
            event(log, "raft.snapshot_written", index=applied["index"],
                  bytes=os.path.getsize(path))
        except Exception as exc:
            event(log, "raft.snapshot_failed", logging.ERROR, error=repr(exc))
            raise

    def _read_snapshot(self, path: str) -> tuple:
        """pysyncobj's deserializer: adopt the snapshot's state if it is ahead of ours."""
        with open(path, "rb") as f:
            if f.read(len(SNAPSHOT_MAGIC)) != SNAPSHOT_MAGIC:
                raise TubeqError(f"{path} is not a tubeq Raft snapshot")
            (size,) = _LEN.unpack(f.read(_LEN.size))
            header = json.loads(f.read(size))
            if header["applied"]["index"] > self.state.applied_index:
                with open(self._snapshot_tmp, "wb") as mdb:
                    while chunk := f.read(1 << 20):
                        mdb.write(chunk)
                self.state.restore_from(self._snapshot_tmp)
                self._snapshot_tmp.unlink(missing_ok=True)
                event(log, "raft.snapshot_installed", index=header["applied"]["index"])
        e1, e0 = ((base64.b64decode(c), i, t) for c, i, t in header["entries"])
        return e1, e0, {TCPNode(a) for a in header["cluster"]}


_ROLES = {0: "follower", 1: "candidate", 2: "leader"}


def _unwrap(result: Any) -> Any:
    if isinstance(result, dict) and "error" in result:
        raise error_class(result["error"])(result["message"], **result.get("details", {}))
    return None if result is None else result.get("ok")


def resolve_password(configured: str, peers: tuple[str, ...]) -> str:
    """The configured password, else $TUBEQ_RAFT_PASSWORD; a lone master may make one up."""
    password = configured or os.environ.get(PASSWORD_ENV, "")
    if not password and not peers:
        password = secrets.token_urlsafe(24)  # nobody else ever needs to join this one
    return password
