"""One partition's log in a store: its index files, its leader epochs and its offsets.

The partitions of a store share one data log and its cache blocks (the store owns those);
what belongs to one partition is its index dir ``p<N>`` (index segments, leader-epoch cache,
the origin of storage/removal.py) and four offsets: ``next`` (the next to assign),
``flushed`` (below it, in the files), ``earliest`` (retention or a reset moved it up) and
``opened`` (the end recovery left). Its methods are the operations on that log: append
bookkeeping (the ``at`` offset of a follower's append, a new leader epoch), reads (where an
offset is, files or cache, decided under the store's lock; the frames gathered outside it),
cutting the log back or restarting it further on, and removing the copy.

Cuts, for replication: a follower whose records past some offset diverged from its new
leader's truncates them (KIP-101), and one that fell behind the leader's earliest offset
restarts there (reset). The data log is shared, so the old frames stay in it; the partition
cuts its epochs, its index files (fsynced) and its offsets, and the store appends a
zero-record *marker* chunk (storage/datalog.py) with the new end as its base offset, which
recovery replays like any chunk (storage/recovery.py ``_place``): the cut records never come
back, whether the next open starts at the checkpoint or scans the whole data log. The store's
side of the sequence is :meth:`storage.store.Store.truncate`.

Threading: a PartitionLog has no lock of its own. Its offsets are read and changed under the
store's lock; its file changes (epochs, cuts, removal) are made holding the store's lock and
the flusher's ``io_lock``, so no block write, checkpoint or retention runs beside them.
Readers read its index outside the lock: segment lists are replaced, never mutated, and a cut
keeps the fds of dropped segments open (``keep_fds``) for readers that still hold them.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lib.errors import InvalidArgument, OffsetOutOfRange, StorageError, UnknownPartition
from lib.logs import event
from lib.records import tag_hash
from storage.aborted import AbortedIndex
from storage.cache import CacheBlock, CachePair, read_span
from storage.datalog import (
    ATTR_COMMIT,
    ATTR_CONTROL,
    ATTR_TXN,
    DataLog,
    ProducerFields,
    ScannedChunk,
)
from storage.epochs import LeaderEpochs
from storage.fsutil import fsync_dir
from storage.index import IndexLog
from storage.keys import KeyLog
from storage.producers import ProducerBatch, ProducerLimits, ProducerWindows, Snapshot
from storage.recovery import Checkpoint, recover
from storage.removal import (
    create_dir,
    read_origin,
    record_removal,
    removed_at,
    set_aside,
    sweep,
    write_origin,
)
from storage.select import ReadResult, assemble, plan

log = logging.getLogger(__name__)
TRANSACTIONAL = "transactional"  # in a partition's dir: transactions have written here
MAX_EPOCH = (1 << 32) - 1  # a chunk header holds the leader epoch in a u32
MAX_READ_ENTRIES = 65_536  # index entries examined per read (bounds filtered scans)
TIME_SCAN_ENTRIES = 1 << 20  # index entries read per step of a search by timestamp


@dataclass(frozen=True)
class ReadRun:
    """Where a read from ``first`` finds its entries, as the store's lock saw it: offsets
    [first, limit) in the files (``cached`` None) or in the cache blocks (``cached``: their
    entries from ``first`` on, and the blocks holding the bytes)."""

    first: int
    limit: int
    earliest: int
    latest: int
    cached: tuple[np.ndarray, list[CacheBlock]] | None


class PartitionLog:
    """Partition ``partition`` of ``topic`` in one store (module docstring)."""

    __slots__ = ("topic", "partition", "index", "keys", "epochs", "epoch", "next", "flushed",
                 "earliest", "opened", "producers", "aborted", "transactional")

    def __init__(self, topic: str, partition: int, index: IndexLog,
                 limits: ProducerLimits = ProducerLimits()) -> None:
        self.topic, self.partition, self.index = topic, partition, index
        self.keys = KeyLog(index)  # key hashes beside the index (storage/keys.py)
        self.producers = ProducerWindows(topic, partition, limits)
        self.aborted = AbortedIndex(index.dir)  # aborted transactions' ranges (aborted.py)
        # Once a transaction wrote here, reads leave control records out (broker/isolation.py)
        self.transactional = (index.dir / TRANSACTIONAL).exists()
        self.epochs = LeaderEpochs(index.dir)
        self.epoch = 0  # the latest epoch in ``epochs`` (0: none); see refresh_epoch
        self.refresh_epoch()
        self.opened = index.end  # the log end recovery left: what a crashed process had stored
        self.next = index.end  # next offset to assign
        self.flushed = index.end  # offsets below this are in the files
        self.earliest = index.start

    @classmethod
    def create(cls, store_dir: Path, topic: str, partition: int, origin: int,
               index_segment_entries: int, limits: ProducerLimits = ProducerLimits()
               ) -> PartitionLog:
        """The partition's log in ``store_dir``; a dir created new records that its copy
        starts at data position ``origin`` (storage/removal.py)."""
        return cls(topic, partition, _open_index(store_dir, partition, origin,
                                                 index_segment_entries), limits)

    def refresh_epoch(self) -> None:
        """Cache the latest epoch: an append whose epoch equals it costs one comparison."""
        latest = self.epochs.latest()
        self.epoch = latest[0] if latest is not None else 0

    # ------------------------------------------------------------------ appends

    def check_append(self, leader_epoch: int, at: int | None) -> None:
        """Refuse an append ``at`` another offset than the next one (InvalidArgument); record
        ``leader_epoch`` when it is new (a durable file write, once per epoch). An older
        epoch goes into the chunk header only."""
        if at is not None and at != self.next:
            raise InvalidArgument(
                f"append to {self.topic}/{self.partition} at offset {at}, but its next offset "
                f"is {self.next}", topic=self.topic, partition=self.partition, offset=at,
                latest=self.next)
        if leader_epoch == self.epoch:
            return
        if not isinstance(leader_epoch, (int, np.integer)) or not 0 <= leader_epoch <= MAX_EPOCH:
            raise InvalidArgument(
                f"leader epoch {leader_epoch!r} of an append to {self.topic}/{self.partition} "
                f"must be an int in [0, {MAX_EPOCH}]", topic=self.topic,
                partition=self.partition, epoch=leader_epoch)
        if leader_epoch > self.epoch:
            self.epochs.assign(int(leader_epoch), self.next)
            self.epoch = int(leader_epoch)

    # -------------------------------------------------------------------- reads

    def check_readable(self, offset: int) -> None:
        """OffsetOutOfRange (carrying earliest and latest) unless earliest <= offset <= latest."""
        if not isinstance(offset, int) or offset < self.earliest or offset > self.next:
            raise OffsetOutOfRange(
                f"offset {offset} is out of range for {self.topic}/{self.partition}: "
                f"earliest {self.earliest}, latest {self.next}", topic=self.topic,
                partition=self.partition, offset=offset, earliest=self.earliest,
                latest=self.next)

    def check_still_there(self, offset: int) -> None:
        """After a read failed: OffsetOutOfRange naming what took ``offset`` away, if
        retention or a truncation did (the read raced with it)."""
        if offset < self.earliest or offset > self.next:
            why = "deleted by retention" if offset < self.earliest else "truncated away"
            raise OffsetOutOfRange(
                f"offset {offset} of {self.topic}/{self.partition} was {why}: "
                f"earliest {self.earliest}, latest {self.next}", topic=self.topic,
                partition=self.partition, offset=offset, earliest=self.earliest,
                latest=self.next)

    def locate(self, offset: int, stop: int | None, cache: CachePair) -> ReadRun:
        """Under the store's lock: the run a read from ``offset`` (below ``stop``) covers;
        offsets below ``flushed`` come from the files, the rest from the cache blocks.
        OffsetOutOfRange (carrying earliest and latest) outside [earliest, latest]."""
        self.check_readable(offset)
        on_disk = offset < self.flushed
        limit = self.flushed if on_disk else self.next
        if stop is not None:
            limit = max(offset + 1, min(limit, stop))
        cached = (None if on_disk or offset == self.next
                  else cache.entries(self.partition, offset, limit, MAX_READ_ENTRIES))
        return ReadRun(offset, limit, self.earliest, self.next, cached)

    def read(self, run: ReadRun, data: DataLog, max_bytes: int, tags: Sequence[str] | None,
             max_records: int | None) -> ReadResult:
        """Outside the store's lock: the frames of ``run`` (see :meth:`Store.read
        <storage.store.Store.read>`), from the index and the data log or from the cache
        blocks. Retention or a cut racing with it may raise CorruptRecord or
        OffsetOutOfRange (the store then says which, :meth:`check_still_there`)."""
        offset = run.first
        tag_list = [t.encode() for t in tags] if tags else None
        hashes = np.array([tag_hash(t) for t in tag_list], np.uint32) if tag_list else None
        if offset == run.latest:
            return ReadResult((), np.empty(0, np.int64), offset, run.earliest, run.latest,
                              np.empty(0, np.uint32))
        # Without a filter ~max_bytes/100 entries cover max_bytes (frames under 100 B are rare);
        # with one, examine more so a sparse tag still makes progress per call.
        wanted = MAX_READ_ENTRIES if tags else max_bytes // 100 + 1
        count = min(run.limit - offset, MAX_READ_ENTRIES, wanted)
        if run.cached is None:
            entries, fetch = self.index.read(offset, offset + count), data.read
        else:
            entries, blocks = run.cached[0][:count], run.cached[1]
            fetch = lambda s, n: read_span(blocks, s, n)  # noqa: E731
        p = plan(entries, max_bytes, hashes, max_records)
        spans = [fetch(int(s), int(n)) for s, n in zip(p.span_starts, p.span_lengths, strict=True)]
        pieces, chosen = assemble(entries, p, spans, tag_list)
        return ReadResult(pieces, chosen.astype(np.int64) + offset, offset + p.examined,
                          run.earliest, run.latest,
                          entries["size"][chosen].astype(np.uint32, copy=False))

    def offset_for_time(self, timestamp_ms: int, start: int, flushed: int, latest: int,
                        cached: np.ndarray | None) -> int:
        """Outside the store's lock: the first offset whose timestamp is >= ``timestamp_ms``
        (``latest`` if none), from the files' [start, flushed) and then the ``cached`` entries
        of [flushed, latest) the store took under its lock."""
        for first in range(start, flushed, TIME_SCAN_ENTRIES):
            ts = self.index.read(first, min(flushed, first + TIME_SCAN_ENTRIES))["ts"]
            hit = ts >= timestamp_ms
            if hit.any():
                return first + int(np.argmax(hit))
        if cached is not None:
            hit = cached["ts"] >= timestamp_ms
            if hit.any():
                return flushed + int(np.argmax(hit))
        return latest

    def move_earliest(self, data_start: int) -> None:
        """Retention deleted the data log below ``data_start``: earliest moves up to the first
        offset still in it, and leader epochs below earliest go."""
        self.earliest = min(self.index.first_at_or_after(data_start), self.index.end)
        try:
            self.epochs.truncate_from_start(self.earliest)
        except StorageError as exc:  # stale entries below earliest mislead no one: retried
            event(log, "store.leader_epochs_write_failed", logging.ERROR,  # on reopen
                  store=str(self.index.dir.parent), error=exc.message)

    # ------------------------------------------------------------- producers

    def before_producer_chunk(self, producer: ProducerFields, base: int) -> None:
        """An abort marker about to take offset ``base``: its transaction's ranges go into
        the aborted index first, durably (storage/aborted.py: why in that order)."""
        if producer.attrs & ATTR_CONTROL and not producer.attrs & ATTR_COMMIT:
            txn = self.producers.open_txn(producer.producer_id)
            if txn is not None:
                self.aborted.append(txn.offsets(), producer.producer_id, base)

    def after_producer_chunk(self, producer: ProducerFields, count: int, base: int,
                             end_pos: int, now_ms: int) -> None:
        """Remember an idempotent producer's batch, or end its transaction (a marker)."""
        if producer.attrs & (ATTR_TXN | ATTR_CONTROL) and not self.transactional:
            self.mark_transactional()
        if producer.attrs & ATTR_CONTROL:
            self.producers.end_txn(producer.producer_id, producer.producer_epoch, now_ms,
                                   base, end_pos)
        else:
            self.producers.record(ProducerBatch(
                producer.producer_id, producer.producer_epoch, producer.base_sequence, count,
                base, end_pos, producer.attrs), now_ms)

    def mark_transactional(self) -> None:
        """Record, once and durably, that transactions write here (``p<N>/transactional``)."""
        path = self.index.dir / TRANSACTIONAL
        try:
            path.touch(mode=0o600)
            fsync_dir(self.index.dir)
        except OSError as exc:
            raise StorageError(f"cannot write {path}: {exc}", path=str(path)) from exc
        self.transactional = True

    # --------------------------------------------------------------------- cuts

    def check_cut(self, offset: int, reset: bool) -> None:
        """OffsetOutOfRange (carrying earliest and latest) unless earliest <= offset <= latest
        for a truncation, or offset >= latest for a reset."""
        low, high = (self.next, None) if reset else (self.earliest, self.next)
        if isinstance(offset, int) and low <= offset and (high is None or offset <= high):
            return
        want = f">= latest {low}" if reset else f"in [earliest {low}, latest {high}]"
        raise OffsetOutOfRange(
            f"cannot {'reset' if reset else 'truncate'} {self.topic}/{self.partition} at "
            f"offset {offset}: it must be {want}", topic=self.topic, partition=self.partition,
            offset=offset, earliest=self.earliest, latest=self.next)

    def cut_epochs(self, offset: int, reset: bool) -> None:
        """First step of a cut: forget the leader epochs starting at or after ``offset``
        (all of them on a reset: the log keeps no record to carry an old epoch). A failure
        leaves nothing a retry would not redo."""
        if reset:
            self.epochs.clear()
        else:
            self.epochs.truncate_from_end(offset)
        self.refresh_epoch()

    def cut_index(self, offset: int, reset: bool) -> None:
        """Cut the index files durably and move the offsets: the log now ends (and, on a
        reset, starts) at ``offset``. Everything of the partition must be flushed. Raises
        StorageError on an I/O error, after which the index files and the offsets no longer
        agree: the store must stop."""
        index = self.index
        try:
            if reset:
                index.reset(offset, keep_fds=True)
            else:
                index.truncate(offset, keep_fds=True)
            index.sync()
            fsync_dir(index.dir)
            index.keep_end()  # an emptied index still says where the partition continues
            self.keys.truncate(index.start, index.end)
        except (OSError, StorageError) as exc:
            raise StorageError(f"cutting the index in {index.dir} failed: {exc}",
                               path=str(index.dir)) from exc
        self.next = self.flushed = offset
        self.opened = min(self.opened, offset)
        if reset:
            self.earliest = offset
            self.producers.clear()
            self.aborted.clear()
        else:
            self.producers.truncate(offset)
            self.aborted.truncate(offset)

    # ------------------------------------------------------------------ removal

    def remove(self, end_pos: int) -> Path:
        """Take this copy's files away in one atomic step (storage/removal.py): record that
        the copy ended at data position ``end_pos``, then rename the index dir aside. Returns
        the renamed dir, for the caller to delete outside the locks."""
        record_removal(self.index.dir.parent, self.partition, end_pos)
        return set_aside(self.index.dir)

    def stats(self) -> dict[str, int]:
        return {"earliest": self.earliest, "latest": self.next, "flushed": self.flushed}


def open_logs(store_dir: Path, topic: str, partitions: Iterable[int], data: DataLog,
              checkpoint: Checkpoint | None, snapshot: Snapshot | None,
              index_segment_entries: int,
              limits: ProducerLimits = ProducerLimits(), now_ms: int = 0
              ) -> dict[int, PartitionLog]:
    """Open the partitions' logs of a store and make them agree with its data log.

    A partition without a dir starts where its last removed copy ended, or at 0 (rebuilt from
    the whole data log); recovery ignores each partition's chunks below its origin. A crash
    can lose the log's tail after its epoch was recorded: no epoch may point past the
    recovered log. The producers' windows are ``snapshot``'s (the checkpoint's
    ``read_snapshot``), with the chunks after its position replayed over them
    (storage/producers.py); recovery scans from there at the latest.
    """
    sweep(store_dir)
    removed = removed_at(store_dir)
    indexes = {p: _open_index(store_dir, p, removed.get(p, 0), index_segment_entries)
               for p in sorted(set(partitions))}
    origins = {p: read_origin(index.dir) for p, index in indexes.items()}
    since = snapshot[0] if snapshot is not None else None
    placed = recover(store_dir, data, indexes, checkpoint, origins, scan_from=since)
    for p, origin in origins.items():
        if origin > data.end:
            # A crash lost the cached tail the copy was added at, or recovery cut a torn
            # tail: nothing lies past the end any more, and appends go on from there.
            write_origin(indexes[p].dir, data.end)
    logs = {p: PartitionLog(topic, p, index, limits) for p, index in indexes.items()}
    for p, part in logs.items():
        part.index.keep_end()  # recovery may have reset it: keep where it continues
        # Key hashes past the checkpoint may not have reached the disk: rebuilt from the data
        covered = checkpoint.next_offsets.get(p, 0) if checkpoint is not None else 0
        part.keys.truncate(part.index.start, min(part.keys.end, part.index.end, covered))
        part.keys.catch_up(part.index, data.read, data.start)
        part.epochs.truncate_from_end(part.next)
        part.refresh_epoch()
    _open_first_files(data, logs.values())
    if snapshot is not None:
        _, rows, txns = snapshot
        for p, part in logs.items():  # not the rows of an earlier copy (storage/removal.py)
            part.producers.load(rows[_mine(rows, p, origins[p])])
            part.producers.load_txns(txns[_mine(txns, p, origins[p])])
    replay_producers(logs, [c for c in placed if since is None or c.position >= since],
                     now_ms)
    return logs


def _mine(rows: np.ndarray, partition: int, origin: int) -> np.ndarray:
    return (rows["partition"] == partition) & ((rows["end_pos"] < 0)
                                               | (rows["end_pos"] > origin))


def replay_producers(logs: dict[int, PartitionLog], chunks: Iterable[ScannedChunk],
                     now_ms: int) -> None:
    """Bring the windows up to the recovered log: the producer batches of ``chunks`` (in log
    order) are remembered, a marker cuts the windows as it cut the log; then nothing past a
    partition's recovered end is remembered."""
    for chunk in chunks:
        part = logs.get(chunk.partition)
        if part is None:
            continue
        if not len(chunk.entries):  # a marker: the log was cut back (or reset) to its base
            part.producers.truncate(chunk.base_offset)
        elif chunk.producer is not None and chunk.producer.attrs & ATTR_CONTROL:
            if not part.transactional:
                part.mark_transactional()
            part.producers.end_txn(chunk.producer.producer_id, chunk.producer.producer_epoch,
                                   now_ms, chunk.base_offset, chunk.end)
        elif chunk.producer is not None:
            f = chunk.producer
            part.producers.record(ProducerBatch(f.producer_id, f.producer_epoch,
                                                f.base_sequence, len(chunk.entries),
                                                chunk.base_offset, chunk.end, f.attrs), now_ms)
    for part in logs.values():
        part.producers.truncate(part.next)
        part.aborted.truncate(part.next)  # rows whose abort marker a crash lost


def _open_index(store_dir: Path, partition: int, origin: int, entries: int) -> IndexLog:
    if not isinstance(partition, int) or partition < 0:
        raise UnknownPartition(f"partition must be an int >= 0, got {partition!r}")
    directory = store_dir / f"p{partition}"
    create_dir(directory, origin)
    return IndexLog(directory, entries)


def _open_first_files(data: DataLog, parts: Iterable[PartitionLog]) -> None:
    """Make a new store's first data, index and key files when it opens, not at its first
    flush: creating a file (an inode, a directory fsync) was the largest cost of a first small
    burst into a new topic, paid by the flusher while producers wait for memory and the
    broker's other stores for a flusher (10,000 topics written once each: about a third of
    the broker's kernel time). Creating a topic can afford it; an existing store has its
    files already and nothing changes."""
    data.open_first_segment()
    for part in parts:
        part.index.open_first_segment()
        part.keys.open_first_segment(part.index)
