"""A storage instance: some partitions of one topic sharing a data log and a cache block pair.

The store coordinates the partitions and the data log they share; each concern has its own
module:

- ``partition_log.py``: one partition's log (index, leader epochs in ``epochs.py``, offsets)
  and the operations on it: append bookkeeping, reads, cutting it back or restarting it
  further on for replication, removing the copy (``removal.py``: its dir on disk);
- ``cache.py``: the cache block pair (active + being flushed) that appends land in;
- ``core.py``: what the store shares with its flusher (the lock, the cache pair, the data
  log, the partitions, the space guard, the checkpoint and the flags), the one seam between
  them;
- ``flusher.py``: the background writer (blocks, fsyncs, checkpoints, retention, the
  disk-full condition), the only writer of the files;
- ``store_producers.py``: idempotent producers' windows and transactions (markers, the last
  stable offset, aborted ranges); ``cuts.py``: truncating or resetting a partition's log;
- ``sync_policy.py``: *when* a block is written and the data log fsynced; ``retention.py``:
  which old data segments go;
- ``datalog.py``, ``index.py`` over ``segments.py``: the files; ``recovery.py``: opening them.

Threading: one lock (``core.cond``) guards the cache blocks, the per-partition counters and
the state shared with the flusher (``unwritten``, ``closing``, ``disk_full``, ``failed`` of
the core, the flusher's ``sync_target`` and ``synced_pos``); appends and the tier choice of
reads hold it briefly (a memcpy, no I/O). Readers do their file I/O outside the lock; segment
lists are replaced, never mutated, so a reader's snapshot stays valid while the flusher works.

Ordering: a block's bytes are written to the data log before its index entries, and a
partition's ``flushed`` counter moves only after both, so a reader never sees an index entry
whose data is not yet in the file.

A full disk is a condition, not a failure: appends are admitted by a shared
:class:`~storage.space.SpaceGuard`, and a write that still fails with ENOSPC/EDQUOT makes the
flusher keep its block and retry while appends get DiskFull (see storage/flusher.py).

Clocks are injected: ``clock`` (monotonic seconds) times blocks, fsyncs, checkpoints and the
disk-full waits; ``wall_clock`` (epoch seconds) ages segments for retention.
"""
from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from lib.closing import Closeable
from lib.errors import (
    CorruptRecord,
    OffsetOutOfRange,
    StoreClosed,
    UnknownPartition,
)
from lib.names import check_name
from lib.records import BatchView, parse_batch
from storage.cache import CachePair
from storage.checkpoints import CheckpointSlot, OwnCheckpoint
from storage.config import StoreConfig
from storage.core import StoreCore
from storage.cuts import LogCuts
from storage.datalog import (
    ATTR_TXN,
    DataLog,
    ProducerFields,
    chunk_header,
    header_size,
)
from storage.flusher import Flusher
from storage.flusher_pool import FlusherPool
from storage.fsutil import inside
from storage.index import ENTRY, IndexLog, index_entries
from storage.key_lookup import DEFAULT_LIMIT, KeyMatches, Window, check_lookup, search
from storage.keys import KeyLog
from storage.partition_log import MAX_READ_ENTRIES, PartitionLog, open_logs
from storage.producers import ProducerLimits
from storage.removal import settle
from storage.select import ReadResult
from storage.space import SpaceGuard
from storage.store_producers import StoreProducers
from storage.sync_policy import SyncPolicy


class Store(Closeable):
    """Storage instance ``<root>/<topic>/<store_id>``; see module docstring for threading."""

    def __init__(self, root: str | Path, topic: str, store_id: int, partitions: Iterable[int],
                 config: StoreConfig | None = None, space: SpaceGuard | None = None, *,
                 checkpoint: CheckpointSlot | None = None, pool: FlusherPool | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time) -> None:
        """``space`` and ``checkpoint`` are shared by the stores of one data dir (a broker
        passes them: one free-space guard, one checkpoint file); without them the store
        guards its own directory with ``config.disk_reserve_bytes`` and keeps its own
        ``checkpoint.json``. ``pool`` runs its flusher (default: the process's shared
        pool, storage/flusher_pool.py)."""
        self.config = cfg = config or StoreConfig()
        self.topic = check_name(topic)
        self.store_id = store_id
        self.dir = inside(Path(root), topic, str(int(store_id)))
        self.dir.mkdir(parents=True, exist_ok=True)
        data = DataLog(self.dir / "data", cfg.segment_bytes)
        checkpoint = checkpoint or OwnCheckpoint(self.dir)
        self._limits = ProducerLimits(cfg.producer_state_max, cfg.producer_state_expiry_ms)
        parts = open_logs(self.dir, self.topic, partitions, data, checkpoint.read(),
                          checkpoint.read_snapshot(), cfg.index_segment_entries, self._limits,
                          int(wall_clock() * 1e3))
        self._core = StoreCore(
            self.topic, store_id, self.dir, cfg, data, checkpoint, parts,
            space or SpaceGuard(self.dir, cfg.disk_reserve_bytes),
            CachePair(data.end, cfg.cache_block_bytes, clock))
        self._core.refresh_earliest()
        self._retired: list[IndexLog | KeyLog] = []  # files of removed partitions
        self._clock, self._wall_clock = clock, wall_clock
        self._policy = SyncPolicy.of(cfg, clock)
        self._flusher = Flusher(self._core, self._policy, wall_clock, pool)
        self._flusher.start()
        # Windows and transactions: broker/replica_*.py, broker/txn_markers.py, isolation.py
        self._cuts = LogCuts(self._core, self._flusher, self.flush, self._writable_partition,
                             self._make_room)
        self.producers = StoreProducers(self._core, self._readable_partition,
                                        self._writable_partition, self._add,
                                        self._flusher.wait_synced, wall_clock)

    # ----------------------------------------------------------------- public API

    @property
    def partitions(self) -> list[int]:
        return sorted(self._core.parts)

    def add_partition(self, partition: int) -> None:
        """Start hosting a new partition (topic grew, or a copy placed here); its offsets
        start at 0. Its copy starts at the next chunk's data position: chunks of a copy
        removed before never come back (storage/removal.py)."""
        with self._core.cond:
            self._check_open()
            if partition not in self._core.parts:
                self._core.parts[partition] = PartitionLog.create(
                    self.dir, self.topic, partition, self._core.cache.active.end_pos,
                    self.config.index_segment_entries, self._limits)

    def remove_partition(self, partition: int) -> None:
        """Stop hosting ``partition`` and delete its files (index and leader epochs), durably;
        a partition not hosted here is a no-op. Raises StoreClosed on a closed store (a failed
        one removes it: its data is being discarded anyway).

        For a broker that no longer holds a copy (reassignment); the sequence and why it is
        safe are in storage/removal.py. Its chunks stay in the data log until retention ages
        them out; a later :meth:`add_partition` (or an open with it) starts a new, empty copy
        that never sees them. Afterwards appends and reads of it raise UnknownPartition, and
        the checkpoint no longer names it; readers already under way may get its old records.
        A crash before it returns may leave the dir: the caller, not told it was done,
        repeats it."""
        with self._flusher.io_lock:
            with self._core.cond:
                if self._core.closing:  # close() is about to close the indexes: leave them to it
                    raise StoreClosed(f"store {self._core.name} is closed: cannot remove partition "
                                      f"{partition}", topic=self.topic, partition=partition)
                part = self._core.parts.get(partition)  # a failed store (no flusher left) may too
                if part is None:
                    return
                trash = part.remove(self._core.cache.active.end_pos)
                del self._core.parts[partition]
                self._core.cache.forget(partition)
                for index in self._retired:
                    index.close()  # a reader of the previous removal has long finished
                self._retired = [part.index, part.keys]
            try:
                settle(self.dir, self._core.checkpoint, partition)
            finally:
                shutil.rmtree(trash, ignore_errors=True)  # a crash leaves it to removal.sweep

    def parse(self, batch: bytes | memoryview) -> BatchView:
        """Check a batch against this store's limits (``lib.records.parse_batch``): the broker
        parses once, looks at the producer ids for de-duplication, then appends the view."""
        return parse_batch(batch, max_message_bytes=self.config.max_message_bytes,
                           max_batch_bytes=self.config.max_batch_bytes)

    def append(self, partition: int, batch: bytes | memoryview | BatchView,
               wait: bool = True, *, leader_epoch: int = 0, at: int | None = None,
               producer: ProducerFields | None = None) -> tuple[int, int] | None:
        """Append a record batch (raw, or as :meth:`parse` returned it); returns
        (base_offset, last_offset). :meth:`append_batch` says whether it was stored now.

        ``async`` topics return once the batch is in the cache block; ``sync`` topics return
        after the fsync that covers it (one fsync serves every waiting append). With
        ``wait=False`` it returns None, having changed nothing, where it would have to wait
        (a ``sync`` topic, or both cache blocks full): the broker's event loop appends
        without a thread hop when it can and hands the rest to its executor.

        ``leader_epoch`` (0: none) goes into the chunk header; one above the partition's
        latest known epoch is recorded in its leader-epoch cache as starting at the batch's
        base offset (a durable file write, once per new epoch). ``at`` is for a follower
        appending the leader's batch at the leader's offsets: it must be the partition's next
        offset (InvalidArgument otherwise, nothing changed).

        An idempotent producer's batch (``producer_id`` >= 0) is stored once: a retry of one
        the partition remembers gets the stored batch's offsets, after the fsync that covers
        it on a ``sync`` topic (storage/producers.py; ProducerFenced, OutOfOrderSequence).
        A follower passes the leader's ``producer`` fields of a copied batch with ``at``.
        """
        got = self.append_batch(partition, batch, wait, leader_epoch=leader_epoch, at=at,
                                producer=producer)
        return None if got is None else (got[0], got[1])

    def append_batch(self, partition: int, batch: bytes | memoryview | BatchView,
                     wait: bool = True, *, leader_epoch: int = 0, at: int | None = None,
                     producer: ProducerFields | None = None) -> tuple[int, int, bool] | None:
        """:meth:`append`, saying whether the batch was stored now: (base, last, True), or
        (base, last, False) for a retry of an idempotent batch stored before."""
        cfg = self.config
        view = batch if isinstance(batch, BatchView) else self.parse(batch)
        if not wait and cfg.durability == "sync":
            return None
        if not self._core.space.room(wait):  # the data dir's cache bound (storage/space.py)
            return None
        if producer is None and view.producer_id >= 0:
            producer = ProducerFields(view.producer_id, view.producer_epoch,
                                      view.base_sequence)
        if view.transactional and producer is not None:
            producer = dataclasses.replace(producer, attrs=producer.attrs | ATTR_TXN)
        with self._core.cond:
            part = self._writable_partition(partition)
            if producer is not None and at is None:
                stored = part.producers.check(producer.producer_id, producer.producer_epoch,
                                              producer.base_sequence, view.count)
                if stored is not None:
                    if cfg.durability == "sync":
                        self._flusher.wait_synced(stored.end_pos)
                    return stored.base_offset, stored.last_offset, False
            got = self._add(partition, view, wait, leader_epoch, at, producer)
            if got is None:
                return None
            base, end_pos = got
            if cfg.durability == "sync":
                self._flusher.wait_synced(end_pos)
        return base, base + view.count - 1, True

    def _add(self, partition: int, view: BatchView, wait: bool, leader_epoch: int,
             at: int | None, producer: ProducerFields | None) -> tuple[int, int] | None:
        """Put the batch into the active block (the store's lock held); (base offset, data
        position after its chunk), or None where ``wait`` is False and it would wait."""
        need = header_size(producer) + len(view.frames)
        part = self._writable_partition(partition)
        while not self._core.cache.active.fits(need):
            if not wait and self._core.cache.flushing is not None:
                return None
            self._make_room()
            part = self._writable_partition(partition)
        part.check_append(leader_epoch, at)
        cost = need + view.count * ENTRY
        self._core.space.admit(cost)  # raises DiskFull before anything is acknowledged
        base = part.next
        if producer is not None:
            part.before_producer_chunk(producer, base)  # an abort's ranges, fsynced
        self._core.unwritten += cost
        block = self._core.cache.active
        first_in_block = block.fill == 0
        header = chunk_header(partition, view.count, base, len(view.frames), leader_epoch,
                              producer)
        block.add(partition, base, header, view.frames,
                  index_entries(view, block.end_pos + len(header)), view.keyed)
        part.next = base + view.count
        if producer is not None:
            part.after_producer_chunk(producer, view.count, base, block.end_pos,
                                      int(self._wall_clock() * 1e3))
        if first_in_block or self._policy.block_full(block):
            self._core.notify()  # the flusher sleeps until a block needs it
        return base, block.end_pos

    def read(self, partition: int, offset: int, max_bytes: int = 1 << 20,
             tags: Sequence[str] | None = None, max_records: int | None = None,
             stop: int | None = None) -> ReadResult:
        """Frames from ``offset`` on, up to ``max_bytes`` and ``max_records`` frames and below
        offset ``stop`` (at least one frame if any is there).

        With ``tags`` only frames whose tag is one of them are returned; ``next_offset`` then
        skips past the examined non-matching entries too. Raises OffsetOutOfRange (carrying
        earliest and latest) for an offset outside [earliest, latest].
        """
        with self._core.cond:
            part = self._readable_partition(partition)
            run = part.locate(offset, stop, self._core.cache)
        try:
            return part.read(run, self._core.data, max_bytes, tags, max_records)
        except (CorruptRecord, OffsetOutOfRange):
            with self._core.cond:  # retention or a truncation won the race: say so
                self._readable_partition(partition).check_still_there(offset)
            raise

    def find_by_key(self, partition: int, key: bytes | str, since_ms: int | None = None,
                    until_ms: int | None = None, limit: int = DEFAULT_LIMIT,
                    from_offset: int | None = None, stop: int | None = None) -> KeyMatches:
        """Records whose key is ``key``, oldest first, at most ``limit``, in offsets
        [``from_offset`` (default earliest), ``stop`` (default latest)) and timestamps
        [``since_ms``, ``until_ms``]; from the key index, no scan (storage/key_lookup.py;
        InvalidArgument names a bad key, time window or limit)."""
        key = check_lookup(key, since_ms, until_ms, limit)

        def take() -> tuple[PartitionLog, Window]:
            with self._core.cond:
                part = self._readable_partition(partition)
                return part, Window.of(part, self._core.cache, from_offset, stop)
        return search(take, self._core.data, key, since_ms, until_ms, limit)

    def earliest(self, partition: int) -> int:
        with self._core.cond:
            return self._readable_partition(partition).earliest

    def latest(self, partition: int) -> int:
        """The next offset to be assigned (one past the last message)."""
        with self._core.cond:
            return self._readable_partition(partition).next

    def opened_end(self, partition: int) -> int:
        """The log end when this store opened (after recovery): offsets below it were
        written by an earlier process."""
        with self._core.cond:
            return self._readable_partition(partition).opened

    def progress(self, partition: int) -> tuple[int, int, int] | None:
        """(earliest, next, flushed) read without the lock, or None when the partition is not
        here: whatever a partition's stats are made of moves one of them, so a heartbeat
        recomputes only the partitions whose progress moved (a torn read only costs a
        recomputation at the next one)."""
        part = self._core.parts.get(partition)
        return None if part is None else (part.earliest, part.next, part.flushed)

    def disk_bytes(self, partition: int) -> int:
        """Bytes of this partition in the files: its flushed records in the shared data log
        plus its index (records still in the memory cache are not counted)."""
        with self._core.cond:
            part = self._readable_partition(partition)
            earliest, flushed = part.earliest, part.flushed
            index_bytes = (part.index.end - part.index.start) * ENTRY
        return part.index.record_bytes(earliest, flushed) + index_bytes

    def offset_for_time(self, partition: int, timestamp_ms: int) -> int:
        """First offset whose timestamp is >= ``timestamp_ms`` (latest if none)."""
        with self._core.cond:
            part = self._readable_partition(partition)
            start, flushed, latest = part.earliest, part.flushed, part.next
            cached = (self._core.cache.entries(partition, flushed, latest, MAX_READ_ENTRIES)[0]
                      if latest > flushed else None)
        return part.offset_for_time(timestamp_ms, start, flushed, latest, cached)

    def flush(self) -> None:
        """Write everything cached so far to the files and fsync it."""
        with self._core.cond:
            self._check_open()
            self._flusher.wait_synced(self._core.cache.active.end_pos)

    def truncate(self, partition: int, offset: int) -> None:
        """Drop the partition's offsets >= ``offset``; the next append gets ``offset``.

        For a follower whose records past ``offset`` diverged from its new leader's. Needs
        earliest <= offset <= latest (OffsetOutOfRange carrying both otherwise). The
        partition's leader epochs starting at or after ``offset`` go too. Durable when it
        returns (a marker chunk, storage/partition_log.py); a crash before it returns may leave
        the partition untruncated, so the caller repeats it. Rare, so simple rather than
        fast: it flushes the cache twice and holds the store's lock over file I/O. Readers
        racing with it may still get the old records, or OffsetOutOfRange for offsets that
        are gone.
        """
        self._cuts.cut(partition, offset, reset=False)

    def reset(self, partition: int, offset: int) -> None:
        """Empty the partition and continue at ``offset`` (>= latest): earliest = latest =
        ``offset`` and its leader epochs are forgotten.

        For a follower that fell behind the leader's earliest offset. Durable as
        :meth:`truncate` is (a marker chunk past the end makes recovery restart the index
        there, and an empty index segment named by ``offset`` keeps it on a clean reopen).
        """
        self._cuts.cut(partition, offset, reset=True)

    def leader_epochs(self, partition: int) -> list[tuple[int, int]]:
        """The partition's leader-epoch cache: (epoch, start_offset), oldest first."""
        with self._core.cond:
            return self._readable_partition(partition).epochs.entries()

    def end_offset_for_epoch(self, partition: int, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch for this partition (:meth:`LeaderEpochs.end_offset_for`
        with its next offset as the log end): (epoch, end offset) or (-1, -1)."""
        with self._core.cond:
            part = self._readable_partition(partition)
            return part.epochs.end_offset_for(epoch, part.next)

    def enforce_retention(self, now: float | None = None) -> int:
        """Delete whole data segments past the age or size limit; returns how many went."""
        with self._core.cond:
            self._check_open()
        return self._flusher.enforce_retention(self._wall_clock() if now is None else now)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has stopped the flusher: calls raise StoreClosed."""
        return self._core.closed

    @property
    def space(self) -> SpaceGuard:
        """The free-space guard this store admits appends with."""
        return self._core.space

    def stats(self) -> dict[str, object]:
        with self._core.cond:
            return {
                "disk_full": self._core.disk_full is not None,
                "data_bytes": self._core.data.size_bytes(),
                "segments": len(self._core.data.segment_info()),
                "cached_bytes": self._core.cache.cached_bytes,
                "partitions": {p: part.stats() for p, part in self._core.parts.items()},
            }

    def close(self) -> None:
        """Flush, fsync, checkpoint and release the files; later calls raise StoreClosed.

        On a full disk it retries for ``DISK_FULL_CLOSE_S``, then logs (``store.unwritten_lost``)
        the offsets it could not write and closes anyway.
        """
        with self._core.cond:
            if self._core.closing:
                return
            self._core.closing = True
            self._core.close_started = self._clock()
            self._core.notify()
        self._flusher.join()
        with self._core.cond:
            self._core.closed = True
            self._core.cond.notify_all()
        for files in [*(f for p in self._core.parts.values() for f in (p.index, p.keys)),
                      *self._retired]:
            files.close()
        self._core.data.close()

    # -------------------------------------------------------------- lock helpers

    def _check_open(self) -> None:
        if self._core.closing:
            raise StoreClosed(f"store {self.topic}/{self.store_id} is closed")
        if self._core.failed is not None:
            raise self._core.failed

    def _readable_partition(self, partition: int) -> PartitionLog:
        if self._core.closed:
            raise StoreClosed(f"store {self.topic}/{self.store_id} is closed")
        part = self._core.parts.get(partition)
        if part is None:
            raise UnknownPartition(
                f"partition {partition!r} of {self.topic} is not in store {self.store_id} "
                f"(hosts {self.partitions})", topic=self.topic, partition=partition)
        return part

    def _writable_partition(self, partition: int) -> PartitionLog:
        self._check_open()
        if self._core.disk_full is not None:
            raise self._core.disk_full
        return self._readable_partition(partition)

    def _make_room(self) -> None:
        """Swap a full active block out, or wait for the flusher to free the other one."""
        if self._core.cache.flushing is None:
            self._core.cache.swap()
            self._core.notify()
        else:
            self._core.cond.wait()
