"""Consumer-offset handlers: CommitOffsets, FetchOffsets (claims), ResetOffsets (master only).

Committed offsets live in the broker's LMDB :class:`storage.offsets.OffsetStore`; fencing is
the in-memory :class:`broker.claims.ClaimTable`. One lock covers a claim check together with
the offset read or write it guards, so "claim, then read" and "check, then write" are atomic
with respect to each other: once a new owner has read the offsets, no older commit lands.

Replication: a partition's leader numbers the commits (and resets) of its partitions in memory
(a version per partition, under an incarnation drawn per process), and each ReplicaFetch answer
carries the groups' offsets committed since the version the follower names
(:meth:`OffsetsPlane.changes`; every group's when it names another incarnation). The follower
stores them as they are, so a new leader serves the groups' offsets. The exactly-once sinks'
marks of a partition (broker/sinks.py) are numbered the same way and sent whole when one
changed: a new leader knows which micro-batches its partitions hold.

Transactions (docs/transactions.md, send_offsets): a CommitOffsets carrying a producer id is a
transactional producer's (Kafka's TxnOffsetCommit): fenced by the claims like any commit, then
held *pending* in memory, not committed, until the coordinator's marker
(:meth:`OffsetsPlane.end_txn`) commits the offsets it carries or drops them. While one is
pending, FetchOffsets of that group and partition claims as usual but answers
UnstableOffsetCommit (retriable), so a member taking the partition over starts from what the
transaction decides, never from an offset about to move. Pending entries live in this
process only, as the claims do: a leader change or restart forgets them (the marker still
commits the offsets; only that guard is lost, see docs/transactions.md).
"""
from __future__ import annotations

import logging
import random
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from broker.claims import ClaimTable
from broker.term import TermWatermark
from broker.topics import TopicManager
from lib.errors import Fenced, OffsetOutOfRange, TubeqError, UnstableOffsetCommit
from lib.logs import event
from lib.names import INSTANCE_SEP, check_name, offsets_owner
from lib.proto import broker_pb2 as pb
from storage.offsets import CommittedOffset, OffsetStore, SinkMark
from storage.store import Store

log = logging.getLogger(__name__)

MAX_REPORTED = 500  # (group, topic) pairs per heartbeat: bounds its size after a restart


@dataclass
class _Versions:
    """One partition's commit numbering: its latest version and each group's last change."""

    version: int = 0
    groups: dict[str, int] = field(default_factory=dict)
    marks_at: int = 0  # the version of the last change of a sink mark


@dataclass(frozen=True)
class OffsetChanges:
    """What a follower lacks of a partition's committed offsets, and the version it is at."""

    offsets: dict[str, CommittedOffset]
    incarnation: int
    version: int
    marks: dict[str, SinkMark] | None = None  # every sink's mark, when one changed
    intents: dict[str, dict] | None = None  # and every sink's intent (broker/sinks.py)


class OffsetsPlane:
    def __init__(self, topics: TopicManager, store: OffsetStore, term: TermWatermark) -> None:
        self.topics = topics
        self.store = store
        self.term = term
        self.claims = ClaimTable()
        self._lock = threading.Lock()
        # (group, topic) pairs to report to the master: all at start (a new master process
        # may not have them yet: recording is idempotent), then each new one.
        self._unreported: set[tuple[str, str]] = {(_group_of(g), t)
                                                   for g, t in store.group_topics()}
        self._reported: set[tuple[str, str]] = set()
        self.incarnation = random.randrange(1, 1 << 62)  # versions of another process differ
        self._versions: dict[tuple[str, int], _Versions] = {}
        # (group, topic, partition) -> producer id of the transaction holding offsets there
        self._pending: dict[tuple[str, str, int], int] = {}
        # Offsets committed before this process started, checked against each partition's
        # recovered log end when its store opens (then forgotten).
        self._unchecked = store.by_partition()
        topics.on_store_opened(self._clamp_past_end)

    def _clamp_past_end(self, topic: str, store: Store) -> None:
        """Bring committed offsets past a partition's recovered log end back to it.

        A power cut can take the unsynced tail of an ``async`` partition while a group's
        commit past those records (in LMDB, synced) survives. Left there, the offsets the
        lost records had are taken again by new records, and the group would skip them once
        the log grows past its commit. The store is not serving yet, so the group resumes
        exactly at the log end: the loss is the lost records, logged here, nothing more."""
        with self._lock:
            for p in store.partitions:
                end = store.latest(p)
                for group, c in self._unchecked.pop((topic, p), {}).items():
                    if c.offset > end:
                        self.store.commit(group, topic, {p: (end, c.metadata)})
                        event(log, "offsets.past_log_end", logging.WARNING, group=group,
                              topic=topic, partition=p, committed=c.offset, log_end=end)

    def commit(self, req: pb.CommitOffsetsRequest) -> pb.CommitOffsetsResponse:
        # A broadcast instance's offsets are its own (group@instance): no other member reads
        # or commits them, so no claim guards them (docs/broadcast.md).
        group = offsets_owner(req.group, req.instance_id)
        rows = self._checked(req.topic, req.offsets)
        with self._lock:
            if not req.instance_id:
                self.claims.check_commit(group, req.topic, rows, req.member_id, req.generation)
            if req.producer_id > 0:  # a transaction's: pending until its marker
                for p in rows:
                    self._pending[(group, req.topic, p)] = req.producer_id
                return pb.CommitOffsetsResponse()
            if rows:
                self.store.commit(group, req.topic, rows)
                self._changed(group, req.topic, rows)
                self._to_report(group, req.topic)
        self._tell_followers(req.topic, rows)
        return pb.CommitOffsetsResponse()

    def _to_report(self, owner: str, topic: str) -> None:
        """Note (group, topic) for the master, unless reported (the lock held); an instance's
        offsets are reported as its group's."""
        pair = (_group_of(owner), topic)
        if pair not in self._reported:
            self._unreported.add(pair)

    def _changed(self, group: str, topic: str, partitions: Iterable[int]) -> None:
        """Number a commit (the lock held)."""
        for p in partitions:
            v = self._versions.setdefault((topic, p), _Versions())
            v.version += 1
            v.groups[group] = v.version

    def _tell_followers(self, topic: str, partitions: Iterable[int]) -> None:
        """Wake the followers' waiting fetches of a replicated partition."""
        roles = (self.topics.role(topic, p) for p in partitions)
        if any(r is not None and r.replicated for r in roles):
            self.topics.notify(topic)

    def version(self, topic: str, partition: int) -> int:
        """How many commits this process numbered on the partition so far."""
        with self._lock:
            v = self._versions.get((topic, partition))
            return 0 if v is None else v.version

    def changes(self, topic: str, partition: int, incarnation: int, version: int
                ) -> OffsetChanges:
        """The groups' offsets of a partition committed here after ``version`` of this
        process (``incarnation``); every group's when the follower names another process."""
        with self._lock:
            v = self._versions.get((topic, partition), _Versions())
            if incarnation == self.incarnation and version >= v.version:
                return OffsetChanges({}, self.incarnation, v.version)
            if incarnation == self.incarnation:
                groups = [g for g, at in v.groups.items() if at > version]
                got = {g: c for g in groups
                       if (c := self.store.fetch(g, topic, [partition]).get(partition))}
                whole = v.marks_at > version
            else:
                got = self.store.partition_offsets(topic, partition)
                whole = True
            if not whole:
                return OffsetChanges(got, self.incarnation, v.version)
            return OffsetChanges(got, self.incarnation, v.version,
                                 self.store.sink_marks(topic, partition),
                                 self.store.sink_intents(topic, partition))

    def commit_sink(self, sink: str, batch_id: int,
                    marks: dict[tuple[str, int], SinkMark]) -> None:
        """Record a sink's committed batch and its marks per partition (broker/sinks.py),
        numbered for the followers of those partitions."""
        with self._lock:
            self.store.commit_sink(sink, batch_id, marks)
            self._marks_changed(marks)
        for topic in {t for t, _ in marks}:
            self._tell_followers(topic, [p for t, p in marks if t == topic])

    def put_sink_intents(self, sink: str, intents: dict[tuple[str, int], dict]) -> None:
        """Note what a sink commit is about to append per partition (broker/sinks.py),
        numbered for the followers: one that holds any of those records holds the intent."""
        with self._lock:
            self.store.put_sink_intents(sink, intents)
            self._marks_changed(intents)

    def store_sink_copies(self, topic: str, partition: int, marks: dict[str, SinkMark],
                          intents: dict[str, dict], drop_from: int | None = None) -> None:
        """A follower: store the sink marks and intents its leader sent
        (:meth:`OffsetStore.put_sink_copies`); numbered too, should it lead next."""
        with self._lock:
            self.store.put_sink_copies(topic, partition, marks, intents, drop_from)
            self._marks_changed({(topic, partition): None})

    def _marks_changed(self, keys) -> None:
        """Number a change of sink marks (the lock held)."""
        for topic, p in keys:
            v = self._versions.setdefault((topic, p), _Versions())
            v.version += 1
            v.marks_at = v.version

    def store_copies(self, topic: str, partition: int,
                     offsets: dict[str, CommittedOffset]) -> None:
        """A follower: store the offsets its leader's groups committed."""
        if not offsets:
            return
        with self._lock:
            self.store.store_copies(topic, partition, offsets)
            for group in offsets:  # numbered too: should this broker lead next
                self._changed(group, topic, [partition])
                self._to_report(group, topic)

    def unreported(self, limit: int = MAX_REPORTED) -> list[tuple[str, str]]:
        """Up to ``limit`` (group, topic) pairs the master has not acknowledged yet."""
        with self._lock:
            return sorted(self._unreported)[:limit]

    def reported(self, pairs: Iterable[tuple[str, str]]) -> None:
        """The master recorded ``pairs`` (a heartbeat carrying them succeeded)."""
        with self._lock:
            for pair in pairs:
                self._unreported.discard(pair)
                self._reported.add(pair)

    def fetch(self, req: pb.FetchOffsetsRequest) -> pb.FetchOffsetsResponse:
        group = offsets_owner(req.group, req.instance_id)
        partitions = list(dict.fromkeys(req.partitions)) or self.topics.led(req.topic)
        for p in partitions:
            self.topics.store_for(req.topic, p)  # unknown / not hosted here: say so
        if req.all_instances:
            return self._instances(req.group, req.topic, partitions)
        with self._lock:
            if not req.instance_id:
                self.claims.claim(group, req.topic, partitions, req.member_id, req.generation)
            unstable = [p for p in partitions if (group, req.topic, p) in self._pending]
            if unstable:
                raise UnstableOffsetCommit(
                    f"a transaction holds offsets of group {group} for {req.topic} partition(s) "
                    f"{unstable[:10]} pending: retry once it commits or aborts",
                    group=group, topic=req.topic, partition=unstable[0])
            got = self.store.fetch(group, req.topic, partitions)
        return pb.FetchOffsetsResponse(offsets=[
            pb.CommittedOffset(partition=p, offset=c.offset, metadata=c.metadata,
                               commit_time_ms=c.commit_time_ms)
            for p, c in sorted(got.items())])

    def _instances(self, group: str, topic: str, partitions: list[int]
                   ) -> pb.FetchOffsetsResponse:
        """Every broadcast instance's offsets of ``group`` (group describe; claims nothing)."""
        got = self.store.instance_offsets(group, topic, partitions)
        return pb.FetchOffsetsResponse(offsets=[
            pb.CommittedOffset(partition=p, offset=c.offset, metadata=c.metadata,
                               commit_time_ms=c.commit_time_ms, instance_id=instance)
            for instance, parts in sorted(got.items()) for p, c in sorted(parts.items())])

    def end_txn(self, producer_id: int, commit: bool,
                entries: Iterable[pb.TxnMarkerOffset]) -> list[pb.TxnMarkerResult]:
        """The coordinator's marker for a transaction's consumer offsets on partitions this
        broker leads: commit carries them into the committed offsets, abort drops them;
        either way the producer's pending entry goes. A partition not led here answers its
        error (the coordinator tries its leader again later)."""
        results, committed = [], set()
        for e in entries:
            result = pb.TxnMarkerResult(topic=e.topic, partition=e.partition, offset=-1,
                                        group=e.group)
            results.append(result)
            try:
                group = check_name(e.group, "group")
                self.topics.store_for(e.topic, e.partition)
            except TubeqError as err:
                result.error_code, result.error_message = err.code, err.message
                continue
            key = (group, e.topic, e.partition)
            with self._lock:
                if self._pending.get(key) == producer_id:
                    del self._pending[key]
                if commit:
                    self.store.commit(group, e.topic, {e.partition: (e.offset, b"")})
                    self._changed(group, e.topic, [e.partition])
                    self._to_report(group, e.topic)
                    committed.add((e.topic, e.partition))
        for topic in {t for t, _ in committed}:
            self._tell_followers(topic, [p for t, p in committed if t == topic])
        return results

    def reset(self, req: pb.ResetOffsetsRequest) -> pb.ResetOffsetsResponse:
        """Overwrite offsets as the master says, unless that master has been replaced."""
        if not self.term.admits(req.term):
            raise Fenced(f"ResetOffsets from master term {req.term} refused: this broker has "
                         f"seen term {self.term.highest}", term=req.term,
                         highest=self.term.highest)
        group = offsets_owner(req.group, req.instance_id)
        rows = self._checked(req.topic, req.offsets)
        with self._lock:
            if rows:
                self.store.commit(group, req.topic, rows)
                self._changed(group, req.topic, rows)
            if not req.instance_id:
                self.claims.clear(group, req.topic, rows)
        self._tell_followers(req.topic, rows)
        return pb.ResetOffsetsResponse()

    def report_again(self) -> None:
        """Report every pair again (after registering with a master that may not know them)."""
        with self._lock:
            self._unreported |= self._reported
            self._reported.clear()

    def forget_topic(self, topic: str) -> None:
        """Drop every group's offsets of a deleted topic (a re-created one starts clean)."""
        with self._lock:
            for group in self.store.groups():
                self.store.delete(group, topic)
            self.store.drop_sink_marks(topic)
            self._reported = {p for p in self._reported if p[1] != topic}
            self._unreported = {p for p in self._unreported if p[1] != topic}

    def _checked(self, topic: str, offsets: Iterable[pb.OffsetCommit]
                 ) -> dict[int, tuple[int, bytes]]:
        """partition -> (offset, metadata), each hosted here and within [earliest, latest]."""
        rows: dict[int, tuple[int, bytes]] = {}
        for oc in offsets:
            store = self.topics.store_for(topic, oc.partition)
            earliest, latest = store.earliest(oc.partition), store.latest(oc.partition)
            if not earliest <= oc.offset <= latest:
                raise OffsetOutOfRange(
                    f"cannot commit offset {oc.offset} for {topic}/{oc.partition}: it must be "
                    f"within [earliest {earliest}, latest {latest}]", topic=topic,
                    partition=oc.partition, offset=oc.offset, earliest=earliest, latest=latest)
            rows[oc.partition] = (oc.offset, bytes(oc.metadata))
        return rows


def _group_of(owner: str) -> str:
    """The group of an offsets owner (``group`` or a broadcast instance's ``group@instance``)."""
    return owner.split(INSTANCE_SEP, 1)[0]
