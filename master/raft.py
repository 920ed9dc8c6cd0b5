"""The module that owns pysyncobj (with master/raft_journal.py): Raft replication of the
master's metadata commands.

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
  msyncs it (only at close), and writes the vote file without fsync. ``SyncedJournal``
  (master/raft_journal.py) msyncs after every append/truncate and fsyncs the vote file, so an
  entry a master acknowledged survives its power loss (docs/replication.md, "Master HA", has
  the details).
* **Pre-vote and leader stickiness** (Raft thesis §9.6, master/prevote.py): a master stands
  for election, raising its term, only once a majority would vote for it, and a master that
  hears from a live leader ignores vote requests of a higher term. So a master cut off from
  the others keeps its term, and when the network heals it follows the leader it finds
  instead of deposing it (one more election, master epoch and rebalance of every group).
"""
from __future__ import annotations

import base64
import json
import logging
import os
import secrets
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated
from pysyncobj.node import TCPNode
from pysyncobj.syncobj import _RAFT_STATE

from lib.errors import NotLeader, TubeqError, Unavailable
from lib.logs import event
from lib.wire_errors import error_class
from master import raft_journal  # noqa: F401 - installs the durable journal in pysyncobj
from master.prevote import Campaign, Position, disruptive, would_vote
from master.state import MetaState

log = logging.getLogger(__name__)
SNAPSHOT_MAGIC = b"TUBEQ-SNAPSHOT-1\n"
_LEN = struct.Struct("<I")
PASSWORD_ENV = "TUBEQ_RAFT_PASSWORD"


@dataclass(frozen=True)
class RaftSettings:
    """Raft node identity and timing (from ``MasterConfig``)."""

    node: str  # host:port the other masters know this master's Raft by (its name)
    bind: str = ""  # host:port it listens on; "": pysyncobj's default (every interface)
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


# pysyncobj internals the pre-vote below relies on (name-mangled, so a subclass can override
# the methods): checked when a replica is built, so a pysyncobj that renamed one fails loudly.
_INTERNALS = ("_SyncObj__connectedToAnyone", "_SyncObj__onMessageReceived",
              "_SyncObj__setCurrentTerm", "_SyncObj__setState", "_SyncObj__getCurrentLogIndex",
              "_SyncObj__getCurrentLogTerm", "_SyncObj__onLeaderChanged")
_STATE = ("_SyncObj__raftElectionDeadline", "_SyncObj__transport", "_SyncObj__raftLeader",
          "_SyncObj__pipeNotifier")
PRE_VOTE, PRE_VOTE_ANSWER = "tubeq_pre_vote", "tubeq_pre_vote_answer"


class _Replica(SyncObj):
    """The replicated object: one method that hands a committed command to ``apply``; and
    pre-vote with leader stickiness (master/prevote.py has the why and the decisions).

    pysyncobj has neither, and its election step is inline in its tick, so the hooks are the
    two private methods that step goes through (a subclass overrides a name-mangled method by
    its mangled name): ``__connectedToAnyone``, asked only once the election timer has fired
    and right before the term is raised, says yes only when a majority answered a pre-vote
    round yes; ``__onMessageReceived`` answers and counts pre-vote questions, ignores vote
    requests that would depose a live leader, and notes when the leader was last heard. A tick
    callback asks the questions. Everything runs on pysyncobj's one tick thread.

    pysyncobj's leadership transfer (``timeout_now``) is ignored: with leader stickiness its
    forced election cannot win while the old leader is heard, and tubeq never asks for one.
    """

    def __init__(self, settings: RaftSettings, conf: SyncObjConf,
                 apply: Callable[[bytes, int], Any]) -> None:
        missing = [name for name in _INTERNALS if not hasattr(SyncObj, name)]
        if missing:
            raise TubeqError(f"this pysyncobj lacks {missing}: master/raft.py's pre-vote needs "
                             "them (pin the pysyncobj version it was written for)")
        self._apply_committed = apply
        # Set before SyncObj.__init__, which starts the tick thread that uses them.
        self._lease_s = settings.election_min_s
        self._leader_heard: float | None = None
        self._campaign = Campaign(len(settings.peers) + 1,
                                  (settings.election_min_s / 4, settings.election_min_s / 2))
        super().__init__(settings.node, list(settings.peers), conf)
        if not all(hasattr(self, name) for name in _STATE):
            self.destroy()
            raise TubeqError(f"this pysyncobj lacks one of {_STATE}: master/raft.py's pre-vote "
                             "needs them (pin the pysyncobj version it was written for)")
        self.addOnTickCallback(self._canvass)
        if not settings.peers:
            self.addOnTickCallback(self._commit_soon)

    @replicated
    def apply_command(self, payload: bytes) -> Any:
        # pysyncobj increments raftLastApplied after the apply: this entry's index is one more.
        return self._apply_committed(payload, self.raftLastApplied + 1)

    # -- pre-vote (pysyncobj's tick thread) ---------------------------------------------

    def _SyncObj__connectedToAnyone(self) -> bool:  # noqa: N802 - the name pysyncobj calls
        if not SyncObj._SyncObj__connectedToAnyone(self):
            return False
        if not self.otherNodes:
            return True  # a lone master is its own majority
        return self._campaign.take(time.monotonic(), self._lease_s)

    def _SyncObj__onMessageReceived(self, node: Any, message: Any) -> None:  # noqa: N802
        kind = message.get("type") if isinstance(message, dict) else None
        if kind == PRE_VOTE:
            self._answer_pre_vote(node, message)
        elif kind == PRE_VOTE_ANSWER:
            self._count_pre_vote(node, message)
        elif kind == "timeout_now":
            pass  # see the class docstring
        elif kind == "request_vote" and disruptive(
                int(message["term"]), self.raftCurrentTerm, self._heard_s_ago(),
                self._lease_s, self._isLeader()):
            log.debug("raft.vote_request_ignored", extra={"fields": {
                "node": str(node.id), "term": message["term"]}})
        else:
            if kind == "append_entries" and message["term"] >= self.raftCurrentTerm:
                self._leader_heard = time.monotonic()
                self._campaign.reset()
            SyncObj._SyncObj__onMessageReceived(self, node, message)

    def _position(self) -> Position:
        return Position(self.raftCurrentTerm, self._SyncObj__getCurrentLogIndex(),
                        self._SyncObj__getCurrentLogTerm())

    def _heard_s_ago(self) -> float | None:
        return None if self._leader_heard is None else time.monotonic() - self._leader_heard

    def _canvass(self) -> None:
        """Tick callback: once the election timer has fired, ask the peers whether they
        would vote for this master (again, when a round expires without a majority)."""
        now = time.monotonic()
        if self._isLeader():
            self._campaign.reset()
            return
        if self._SyncObj__raftElectionDeadline > now or not self._campaign.due(now):
            return
        if self._campaign.failed_rounds == 1:
            event(log, "raft.no_majority_for_election", logging.WARNING,
                  node=self.selfNode.id, term=self.raftCurrentTerm,
                  detail="no majority of masters would vote for this one: it keeps its term "
                         "and asks again (cut off from the others?)")
        if self._SyncObj__raftLeader is not None:  # as pysyncobj's election step would
            self._SyncObj__raftLeader = None
            self._SyncObj__onLeaderChanged()  # fails commands waiting on the lost leader
        mine = self._position()
        r = self._campaign.start(mine.term, now)
        for node in self.otherNodes:
            self._SyncObj__transport.send(node, {
                "type": PRE_VOTE, "round": r.number, "term": mine.term,
                "last_log_index": mine.last_index, "last_log_term": mine.last_term})

    def _commit_soon(self) -> None:
        """Tick callback of a lone master: a tick appends new commands after it has counted
        what is committed, and no peer's answer comes to wake the next one, so a command
        would wait a whole tick period (50 ms) to commit. Wake the next tick at once while
        the log holds an entry not committed yet (nothing to do when idle)."""
        if self._isLeader() and self._SyncObj__getCurrentLogIndex() > self.raftCommitIndex:
            self._SyncObj__pipeNotifier.notify()

    def _answer_pre_vote(self, node: Any, m: dict[str, Any]) -> None:
        mine = self._position()
        granted = would_vote(
            Position(int(m["term"]), int(m["last_log_index"]), int(m["last_log_term"])),
            mine, self._heard_s_ago(), self._lease_s, self._isLeader())
        self._SyncObj__transport.send(node, {
            "type": PRE_VOTE_ANSWER, "round": m["round"], "term": m["term"],
            "granted": granted, "voter_term": mine.term})

    def _count_pre_vote(self, node: Any, m: dict[str, Any]) -> None:
        voter_term = int(m["voter_term"])
        if voter_term > self.raftCurrentTerm and not self._isLeader():
            # Raft's rule for any message of a higher term: follow it (no leader known yet).
            self._SyncObj__setCurrentTerm(voter_term, None)
            self._SyncObj__setState(_RAFT_STATE.FOLLOWER)
            self._SyncObj__raftLeader = None
            self._campaign.reset()
            return
        if self._campaign.answer(int(m["round"]), int(m["term"]), str(node.id),
                                 bool(m["granted"]), time.monotonic()):
            event(log, "raft.pre_vote_won", node=self.selfNode.id,
                  term=self.raftCurrentTerm + 1)


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
            # A command goes out at once (pysyncobj wakes its tick thread through a pipe)
            # instead of waiting for the next tick and append period: a metadata write takes
            # a few ms, not ~100 (every transaction makes three). Heartbeats keep their period.
            appendEntriesUseBatch=False,
            connectionTimeout=max(3.5, settings.election_max_s * 2),
            connectionRetryTime=0.5,  # default 5 s: a master started late stays cut off that long
            leaderFallbackTimeout=settings.leader_fallback_s,
            logCompactionMinEntries=settings.compaction_entries,
            logCompactionMinTime=settings.compaction_min_s, onStateChanged=self._state_changed,
            dynamicMembershipChange=False, bindAddress=settings.bind or None, **settings.extra)
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

    def forward(self, cmd: dict[str, Any], on_done: Callable[[str | None], None]) -> None:
        """Replicate ``cmd`` from any master, standbys too, without waiting: pysyncobj hands a
        command submitted on a follower to its leader (queued while no leader is known).

        For commands that are true whoever leads (a standby's refusal summaries): they carry
        no epoch, so nothing refuses one that arrives after a failover. ``on_done`` runs on
        pysyncobj's thread with None once the command is applied here, else why it was not.
        """
        payload = json.dumps(cmd, sort_keys=True, separators=(",", ":")).encode()

        def finished(result: Any, reason: int) -> None:
            if reason != FAIL_REASON.SUCCESS:
                on_done(f"not committed (pysyncobj reason {reason})")
                return
            try:
                _unwrap(result)
            except TubeqError as err:
                on_done(err.message)
                return
            on_done(None)

        self._replica.apply_command(payload, callback=finished)

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
