"""Exactly-once sinks: batches staged by tasks, appended when the sink's driver commits.

A sink (a Spark streaming query writing to tubeq) writes each micro-batch in two steps, the way
Spark runs it: every task stages its record batches on the brokers that lead their partitions
(:meth:`SinkPlane.stage`: checked like a produce, held in memory, invisible to consumers), then
the driver commits the micro-batch on each of those brokers (:meth:`SinkPlane.commit`), naming
the tasks that succeeded. A commit appends the staged batches of those tasks, in task order, and
then records the batch id as the sink's last committed one in LMDB (synced). So:

- a micro-batch that Spark replays after a crash (same batch id) is skipped by every broker
  that already committed it: it never appears twice;
- a micro-batch that crashed before its commit never appears at all (its staging is dropped by
  the next commit or abort of the sink, or expires after ``sink_staging_ttl_s``), and the
  replay writes it whole;
- the batches of a failed task attempt are never applied: only the tasks the commit names are.

A batch id counts per partition: each commit records, per partition it appended to, the
sink's *mark* (the batch id, the log end after its appends, the leader epoch), in the same
transaction as the batch id. A stage or commit of a partition whose mark says it holds the
batch already is skipped there.

A commit that dies half way (the broker crashes, an append fails, or the leader dies and
another takes over) must not leave the replay to append its first batches twice. So before
appending, a commit writes its *intent* per partition to LMDB (synced): the log end before its
appends and a mark of each batch. The mark replaces the intent in one transaction. A replayed
commit that finds the intent of its own batch id asks broker/sink_landing.py how many of the
partition's records are already stored and appends only the rest.

Marks and intents travel to the followers with the partition (broker/replication.py): an
intent as soon as it is written, so a follower holding any record of the commit holds its
intent; a mark once the follower holds the records it covers. A commit is answered once
every in-sync replica holds its records and marks (broker/service.py). So a new leader
skips the partitions that hold the batch and completes the others, once.

Copies (a leader's death between stage and commit): a task also stages each batch as a *copy*
on the partition's in-sync followers (``SinkStageRequest.copy``; lib/sink.py), held like any
staging but appended only if this broker leads the partition when the driver commits it there.
A commit names its partitions (``SinkCommitRequest.partitions``): it appends only theirs
(PartitionNotHosted, before any append, for one led elsewhere: the driver asks the master and
goes to the new leader) and keeps the copies of the others, whose leader may still die. Copies
are dropped by the sink's next micro-batch: a stage of batch N drops the sink's staging of
older batches (Spark runs batch N once batch N-1 is committed), else by the TTL.

Limits (docs/spark.md, "Exactly-once streaming sink"): staging lives in memory, bounded by
``sink_staging_bytes``; a broker that restarts between stage and commit has lost it, and the
commit fails with SinkStagingLost (nothing applied) so that Spark replays the micro-batch. The
appends of one commit become visible one batch at a time (a consumer may see a micro-batch's
first batches a moment before its last), and on ``async`` topics a crash can lose appended
batches that were not flushed yet (the topic's own loss window).
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.offsets import OffsetsPlane
from broker.sink_landing import BatchMark, landed_records
from broker.topics import TopicManager
from lib.errors import (
    InvalidArgument,
    PartitionNotHosted,
    SinkStagingFull,
    SinkStagingLost,
    UnknownPartition,
    UnknownTopic,
)
from lib.names import check_name
from lib.proto import broker_pb2 as pb
from lib.records import BatchView, drop_records
from storage.offsets import SinkMark
from storage.store import Store

log = logging.getLogger(__name__)
# Fault injection for tests only: the broker exits after this many appends of a sink commit.
EXIT_AFTER_APPENDS_ENV = "TUBEQ_TEST_SINK_EXIT_AFTER_APPENDS"

MAX_TASK_CHARS = 200


@dataclass
class _Piece:
    topic: str
    partition: int
    view: BatchView
    nbytes: int


@dataclass
class _Staged:
    """What the tasks staged for one (sink, batch id)."""

    created: float
    # task -> piece number -> piece (None: a piece of a partition that holds the batch)
    tasks: dict[str, dict[int, _Piece | None]] = field(default_factory=dict)
    nbytes: int = 0


class SinkPlane:
    """SinkStage, SinkCommit and SinkAbort."""

    def __init__(self, topics: TopicManager, offsets: OffsetsPlane, limit_bytes: int,
                 ttl_s: float, on_appended: Callable[[str, int, int, int], None],
                 holding: Callable[[str, int, int], bool] = lambda topic, p, epoch: False
                 ) -> None:
        self.topics = topics
        self.offsets = offsets
        self.store = offsets.store
        self.limit_bytes = limit_bytes
        self.ttl_s = ttl_s
        self._on_appended = on_appended  # (topic, partition, bytes, records): metrics, wake-ups
        self._holding = holding  # writes held: the leadership is being handed over
        self._staged: dict[tuple[str, int], _Staged] = {}
        self._bytes = 0
        self._lock = threading.Lock()  # the staging map
        self._commit_locks: dict[str, threading.Lock] = {}  # one commit per sink at a time
        self._exit_after_appends = int(os.environ.get(EXIT_AFTER_APPENDS_ENV, "-1"))

    def stage(self, req: pb.SinkStageRequest) -> pb.SinkStageResponse:
        sink, batch_id = _sink_and_batch(req.sink, req.batch_id)
        if not req.task or len(req.task) > MAX_TASK_CHARS:
            raise InvalidArgument(f"sink task id must be 1 to {MAX_TASK_CHARS} characters")
        # A copy may sit on a follower: it is appended only if this broker leads the partition
        # when the commit comes (the leader died in between).
        store = (self.topics.replica_store if req.copy else self.topics.store_for)(
            req.topic, req.partition)
        mark = self.store.sink_marks(req.topic, req.partition).get(sink)
        self._drop(sink, batch_id - 1)  # Spark stages a batch once the one before committed
        if mark is not None and batch_id <= mark.batch_id:
            with self._lock:  # the partition holds the batch: the commit skips this piece
                staged = self._staged.setdefault((sink, batch_id), _Staged(time.monotonic()))
                staged.tasks.setdefault(req.task, {})[req.piece] = None
            return pb.SinkStageResponse(committed=True)
        if not req.batch:
            raise InvalidArgument(f"empty batch staged for {req.topic}/{req.partition}")
        piece = _Piece(req.topic, req.partition, store.parse(req.batch), len(req.batch))
        with self._lock:
            self._expire(time.monotonic())
            staged = self._staged.setdefault((sink, batch_id), _Staged(time.monotonic()))
            pieces = staged.tasks.setdefault(req.task, {})
            old = pieces.get(req.piece)
            grow = piece.nbytes - (old.nbytes if old is not None else 0)
            if self._bytes + grow > self.limit_bytes:
                raise SinkStagingFull(
                    f"sink staging on this broker is full ({self._bytes} of {self.limit_bytes} "
                    "bytes, sink_staging_bytes): commit or abort pending micro-batches, use "
                    "smaller micro-batches (maxOffsetsPerTrigger) or raise the limit",
                    used=self._bytes, limit=self.limit_bytes)
            pieces[req.piece] = piece  # a retried stage call replaces its own piece
            staged.nbytes += grow
            self._bytes += grow
        return pb.SinkStageResponse()

    def commit(self, req: pb.SinkCommitRequest,
               may_produce: Callable[[str], None] = lambda topic: None
               ) -> tuple[pb.SinkCommitResponse, dict[tuple[str, int], SinkMark]]:
        """Append the named tasks' batches; ``records`` counts the micro-batch's records on
        this broker, including any an interrupted earlier commit already stored.
        ``may_produce(topic)`` raises unless the caller may write every topic staged. Also
        returns the marks written (the caller waits for the replicas to hold them)."""
        sink, batch_id = _sink_and_batch(req.sink, req.batch_id)
        wanted = {(p.topic, p.partition) for p in req.partitions} or None
        with self._commit_lock(sink):
            last = self.store.sink_committed(sink)
            with self._lock:
                staged = (sink, batch_id) in self._staged
            if not staged and batch_id <= last:  # a retried commit this broker answered
                self._drop(sink, batch_id)
                return pb.SinkCommitResponse(already=True, last_committed=last), {}
            pieces = self._take(sink, batch_id, req.tasks)
            if wanted is not None:
                pieces = [p for p in pieces if (p.topic, p.partition) in wanted]
            for topic in sorted({p.topic for p in pieces}):
                may_produce(topic)
            # Every store first: a topic deleted since staging, or a partition led elsewhere
            # now, fails the commit before any append.
            stores = {key: self.topics.store_for(*key)
                      for key in sorted(wanted or {(p.topic, p.partition) for p in pieces})}
            epochs = {key: self._epoch(*key) for key in stores}
            marks = {key: self.store.sink_marks(*key).get(sink) for key in stores}
            done = {key for key, m in marks.items() if m is not None and m.batch_id >= batch_id}
            pieces = [p for p in pieces if (p.topic, p.partition) not in done]
            if not pieces:
                self._release(sink, batch_id, wanted)
                return pb.SinkCommitResponse(already=True, last_committed=max(last, batch_id)), {}
            keys = list(dict.fromkeys((p.topic, p.partition) for p in pieces))
            landed = {key: self._landed(sink, batch_id, stores[key], key) for key in keys}
            if any(landed.values()):
                log.warning("sink %s batch %d: an interrupted commit had stored %s records",
                            sink, batch_id, landed)
            todo = _after(pieces, landed)
            self.offsets.put_sink_intents(sink, {
                key: _intent(batch_id, landed[key], stores[key].latest(key[1]),
                             [p for p in todo if (p.topic, p.partition) == key])
                for key in keys})
            for n, piece in enumerate(todo, 1):
                self._check_writable(piece, epochs)
                stores[piece.topic, piece.partition].append(
                    piece.partition, piece.view, leader_epoch=self._append_epoch(piece))
                self._on_appended(piece.topic, piece.partition, piece.nbytes, piece.view.count)
                if n == self._exit_after_appends:
                    os._exit(70)  # tests: a broker dying in the middle of a commit
            new_marks = {key: SinkMark(batch_id, stores[key].latest(key[1]), epochs[key])
                         for key in keys}
            self.offsets.commit_sink(sink, max(last, batch_id), new_marks)  # drops the intents
            self._release(sink, batch_id, wanted)
        records = sum(p.view.count for p in todo) + sum(landed.values())
        return pb.SinkCommitResponse(records=records, last_committed=batch_id), new_marks

    def _landed(self, sink: str, batch_id: int, store: Store, key: tuple[str, int]) -> int:
        """Records of the batch an interrupted commit already stored on one partition, here
        or on the leader before (its intent came with the records it appended)."""
        intent = self.store.sink_intents(*key).get(sink)
        if intent is None or intent["batch"] != batch_id:  # none, or Spark moved on
            return 0
        topic, partition = key
        try:
            found = landed_records(store, partition, intent["from"], store.latest(partition),
                                   [BatchMark(*m) for m in intent["marks"]])
        except (UnknownTopic, UnknownPartition):
            found = 0
        return intent["landed"] + found

    def _epoch(self, topic: str, partition: int) -> int:
        role = self.topics.role(topic, partition)
        return 0 if role is None else role.leader_epoch

    def _append_epoch(self, piece: _Piece) -> int:
        """The leader epoch appends carry (0 on a partition with one copy), as a produce's."""
        role = self.topics.role(piece.topic, piece.partition)
        return role.leader_epoch if role is not None and role.replicated else 0

    def _check_writable(self, piece: _Piece, epochs: dict[tuple[str, int], int]) -> None:
        """Refuse (retriable, nothing more appended) while the partition's leadership is
        being handed over (broker/replication.py ``hold_writes``)."""
        key = (piece.topic, piece.partition)
        if self._holding(piece.topic, piece.partition, epochs[key]):
            raise PartitionNotHosted(
                f"partition {piece.topic}/{piece.partition} is moving to another broker: its "
                "leadership is being handed over; run the micro-batch again",
                topic=piece.topic, partition=piece.partition)

    def abort(self, req: pb.SinkAbortRequest,
              may_produce: Callable[[str], None] = lambda topic: None) -> pb.SinkAbortResponse:
        sink, batch_id = _sink_and_batch(req.sink, req.batch_id)
        with self._lock:
            staged = self._staged.get((sink, batch_id))
            for topic in sorted({p.topic for ps in (staged.tasks.values() if staged else ())
                                 for p in ps.values() if p is not None}):
                may_produce(topic)
            gone = self._staged.pop((sink, batch_id), None)
            if gone is not None:
                self._bytes -= gone.nbytes
        return pb.SinkAbortResponse()

    @property
    def staged_bytes(self) -> int:
        return self._bytes

    def _take(self, sink: str, batch_id: int, tasks: list[pb.SinkTask]) -> list[_Piece]:
        """The pieces of the named tasks in append order; SinkStagingLost unless all are
        here."""
        with self._lock:
            staged = self._staged.get((sink, batch_id))
            out: list[_Piece] = []
            for task in tasks:
                have = {} if staged is None else staged.tasks.get(task.task, {})
                missing = [i for i in range(task.pieces) if i not in have]
                if missing:
                    raise SinkStagingLost(
                        f"sink {sink} batch {batch_id}: task {task.task} staged {task.pieces} "
                        f"batch(es) on this broker, {task.pieces - len(missing)} are here (the "
                        "broker restarted or the staging expired); nothing was applied: run "
                        "the micro-batch again", sink=sink, batch_id=batch_id, task=task.task)
                out.extend(piece for i in range(task.pieces) if (piece := have[i]) is not None)
            return out

    def _release(self, sink: str, batch_id: int, done: set[tuple[str, int]] | None) -> None:
        """After a commit of the partitions ``done`` (None: all): forget their pieces and the
        sink's older batches, but keep the copies of other partitions (their leader may die
        before it commits them). A committed piece stays as None, so a retried commit still
        finds every piece the tasks named and is answered from the partitions' marks."""
        if done is None:
            self._drop(sink, batch_id)
            return
        self._drop(sink, batch_id - 1)
        with self._lock:
            staged = self._staged.get((sink, batch_id))
            for pieces in staged.tasks.values() if staged is not None else ():
                for n, piece in pieces.items():
                    if piece is not None and (piece.topic, piece.partition) in done:
                        pieces[n] = None
                        staged.nbytes -= piece.nbytes
                        self._bytes -= piece.nbytes

    def _drop(self, sink: str, upto: int) -> None:
        """Forget the sink's staging of every batch id <= ``upto`` (committed or replaced)."""
        with self._lock:
            for key in [k for k in self._staged if k[0] == sink and k[1] <= upto]:
                self._bytes -= self._staged.pop(key).nbytes

    def _expire(self, now: float) -> None:
        """Drop staging older than the TTL (a driver that died and never came back)."""
        for key in [k for k, s in self._staged.items() if now - s.created > self.ttl_s]:
            self._bytes -= self._staged.pop(key).nbytes

    def _commit_lock(self, sink: str) -> threading.Lock:
        with self._lock:
            return self._commit_locks.setdefault(sink, threading.Lock())


def _after(pieces: list[_Piece], landed: dict[tuple[str, int], int]) -> list[_Piece]:
    """``pieces`` without the first ``landed[topic, partition]`` records of each partition."""
    skip = dict(landed)
    out = []
    for piece in pieces:
        key = (piece.topic, piece.partition)
        k = skip.get(key, 0)
        if k >= piece.view.count:
            skip[key] = k - piece.view.count
            continue
        if k:
            view = drop_records(piece.view, k)
            piece = _Piece(piece.topic, piece.partition, view, len(view.frames))
            skip[key] = 0
        out.append(piece)
    return out


def _intent(batch_id: int, landed: int, log_end: int, todo: list[_Piece]) -> dict:
    """What a commit is about to append on one partition (see broker/sink_landing.py), as
    JSON-ready data: what earlier attempts stored, where the log ends, a mark per batch."""
    return {"batch": batch_id, "landed": landed, "from": log_end,
            "marks": [BatchMark.of(p.view).as_list() for p in todo]}


def _sink_and_batch(sink: str, batch_id: int) -> tuple[str, int]:
    check_name(sink, "sink")
    if batch_id < 0:
        raise InvalidArgument(f"sink batch id must be >= 0, got {batch_id}")
    return sink, batch_id
