"""A storage instance: some partitions of one topic sharing a data log and a cache block pair.

The store is the coordinator; each concern has its own module:

- ``cache.py``: the cache block pair (active + being flushed) that appends land in;
- ``flusher.py``: the background writer (writes blocks, fsyncs, checkpoints, retention,
  the disk-full condition), the only writer of the files;
- ``sync_policy.py``: *when* a block is written and when the data log is fsynced;
- ``retention.py``: which old data segments go;
- ``datalog.py``, ``index.py`` over ``segments.py``: the files; ``recovery.py``: opening them;
- ``epochs.py``: each partition's leader-epoch cache, ``truncation.py``: cutting a
  partition's log back or forward, and ``removal.py``: deleting a partition's copy (and the
  origin that keeps an old copy from coming back), all for replication.

Replication (a later step builds the replica fetcher on these): appends carry the leader epoch
that assigned their offsets, and a follower appends the leader's batches ``at`` the leader's
offsets; :meth:`Store.truncate` and :meth:`Store.reset` cut a partition's log back (a follower
whose records diverged from the new leader's) or restart it further on (a follower behind the
leader's earliest offset). The data log is shared by the partitions of a store, so neither
removes bytes: each appends a zero-record *marker* chunk that recovery replays.

Threading: one lock (``_cond``) guards the cache blocks, the per-partition counters and the
state shared with the flusher (``_sync_target``, ``_synced_pos``, ``_unwritten``, ``_closing``,
``_disk_full``, ``_failed``); appends and the tier choice of reads hold it briefly (a memcpy, no
I/O). Readers do their file I/O outside the lock; segment lists are replaced, never mutated, so
a reader's snapshot stays valid while the flusher works.

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

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lib.closing import Closeable
from lib.errors import (
    CorruptRecord,
    DiskFull,
    InvalidArgument,
    OffsetOutOfRange,
    StorageError,
    StoreClosed,
    UnknownPartition,
)
from lib.logs import event
from lib.names import check_name
from lib.records import BatchView, frame_starts, parse_batch, tag_hash
from storage.cache import CachePair, read_span
from storage.checkpoints import CheckpointSlot, OwnCheckpoint
from storage.config import StoreConfig
from storage.datalog import CHUNK, DataLog, chunk_header
from storage.epochs import LeaderEpochs
from storage.flusher import Flusher
from storage.fsutil import inside
from storage.index import ENTRY, INDEX_DTYPE, IndexLog
from storage.recovery import recover
from storage.removal import create_dir, read_origin, remove, removed_at, sweep, write_origin
from storage.select import assemble, plan
from storage.space import SpaceGuard
from storage.sync_policy import SyncPolicy
from storage.truncation import cut

log = logging.getLogger(__name__)
MAX_READ_ENTRIES = 65_536  # index entries examined per read (bounds filtered scans)
MAX_EPOCH = (1 << 32) - 1  # a chunk header holds the leader epoch in a u32


@dataclass(frozen=True)
class ReadResult:
    """Frames (concatenated, each self-describing), the offset of each one and its size in
    bytes (``sizes``, uint32, from the index: callers split ``frames`` without walking the
    frames' length fields)."""

    frames: bytes
    offsets: np.ndarray
    next_offset: int
    earliest: int
    latest: int
    sizes: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets)


class _Partition:
    __slots__ = ("index", "epochs", "epoch", "next", "flushed", "earliest", "opened")

    def __init__(self, index: IndexLog) -> None:
        self.index = index
        self.epochs = LeaderEpochs(index.dir)
        self.epoch = 0  # the latest epoch in ``epochs`` (0: none); see refresh_epoch
        self.refresh_epoch()
        self.opened = index.end  # the log end recovery left: what a crashed process had stored
        self.next = index.end  # next offset to assign
        self.flushed = index.end  # offsets below this are in the files
        self.earliest = index.start

    def refresh_epoch(self) -> None:
        """Cache the latest epoch: an append whose epoch equals it costs one comparison."""
        latest = self.epochs.latest()
        self.epoch = latest[0] if latest is not None else 0


class Store(Closeable):
    """Storage instance ``<root>/<topic>/<store_id>``; see module docstring for threading."""

    def __init__(self, root: str | Path, topic: str, store_id: int, partitions: Iterable[int],
                 config: StoreConfig | None = None, space: SpaceGuard | None = None, *,
                 checkpoint: CheckpointSlot | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time) -> None:
        """``space`` and ``checkpoint`` are shared by the stores of one data dir (a broker
        passes them: one free-space guard, one checkpoint file); without them the store
        guards its own directory with ``config.disk_reserve_bytes`` and keeps its own
        ``checkpoint.json``."""
        self.config = cfg = config or StoreConfig()
        self.topic = check_name(topic)
        self.store_id = store_id
        self.dir = inside(Path(root), topic, str(int(store_id)))
        self.dir.mkdir(parents=True, exist_ok=True)
        self._data = DataLog(self.dir / "data", cfg.segment_bytes)
        self._checkpoint = checkpoint or OwnCheckpoint(self.dir)
        indexes = self._recover(partitions)
        self._retired: list[IndexLog] = []  # indexes of removed partitions (storage/removal.py)
        self._parts = {p: _Partition(index) for p, index in indexes.items()}
        for part in self._parts.values():
            part.index.keep_end()  # recovery may have reset it: keep where it continues
            # A crash can lose the log's tail after its epoch was recorded: no epoch may
            # point past the recovered log.
            part.epochs.truncate_from_end(part.next)
            part.refresh_epoch()
        self._refresh_earliest()
        self._name = f"{self.topic}/{self.store_id}"
        self._clock, self._wall_clock = clock, wall_clock
        self._policy = SyncPolicy.of(cfg, clock)
        self._space = space or SpaceGuard(self.dir, cfg.disk_reserve_bytes)
        self._cond = threading.Condition()
        self._cache = CachePair(self._data.end, cfg.cache_block_bytes, clock)
        self._closing = self._closed = False
        self._close_started = 0.0
        self._failed: StorageError | None = None
        self._disk_full: DiskFull | None = None  # the flusher cannot write: appends refused
        self._unwritten = 0  # bytes admitted by the guard that the flusher has not written
        self._sync_target = 0  # data position that sync waiters need fsynced
        self._synced_pos = self._data.end
        self._flusher = Flusher(self, self._policy, wall_clock)
        self._flusher.start()

    def _recover(self, partitions: Iterable[int]) -> dict[int, IndexLog]:
        """Open the partitions' indexes (one without a dir starts where its last removed copy
        ended, or at 0: rebuilt from the whole log) and make them agree with the data log,
        ignoring each one's chunks below its origin."""
        sweep(self.dir)
        removed = removed_at(self.dir)
        indexes = {p: self._open_index(p, removed.get(p, 0)) for p in sorted(set(partitions))}
        origins = {p: read_origin(index.dir) for p, index in indexes.items()}
        recover(self.dir, self._data, indexes, self._checkpoint.read(), origins)
        for p, origin in origins.items():
            if origin > self._data.end:
                # A crash lost the cached tail the copy was added at, or recovery cut a torn
                # tail: nothing lies past the end any more, and appends go on from there.
                write_origin(indexes[p].dir, self._data.end)
        return indexes

    def _open_index(self, partition: int, origin: int) -> IndexLog:
        """The partition's index; a dir created new records that its copy starts at data
        position ``origin`` (storage/removal.py)."""
        if not isinstance(partition, int) or partition < 0:
            raise UnknownPartition(f"partition must be an int >= 0, got {partition!r}")
        directory = self.dir / f"p{partition}"
        create_dir(directory, origin)
        return IndexLog(directory, self.config.index_segment_entries)

    # ----------------------------------------------------------------- public API

    @property
    def partitions(self) -> list[int]:
        return sorted(self._parts)

    def add_partition(self, partition: int) -> None:
        """Start hosting a new partition (topic grew, or a copy placed here); its offsets
        start at 0. Its copy starts at the next chunk's data position: chunks of a copy
        removed before never come back (storage/removal.py)."""
        with self._cond:
            self._check_open()
            if partition not in self._parts:
                index = self._open_index(partition, self._cache.active.end_pos)
                self._parts[partition] = _Partition(index)

    def remove_partition(self, partition: int) -> None:
        """Stop hosting ``partition`` and delete its files (index and leader epochs), durably;
        a partition not hosted here is a no-op. Raises StoreClosed on a closed store (a failed
        one removes it: its data is being discarded anyway).

        For a broker that no longer holds a copy (reassignment). Its chunks stay in the
        shared data log until retention ages them out; a later :meth:`add_partition` (or an
        open with it) starts a new, empty copy that never sees them. Afterwards appends and
        reads of it raise UnknownPartition, and the checkpoint no longer names it. Readers
        already under way may get its old records. A crash before it returns may leave the
        dir in place: the caller, which had not been told it was removed, repeats it.
        """
        remove(self, partition)

    def parse(self, batch: bytes | memoryview) -> BatchView:
        """Check a batch against this store's limits (``lib.records.parse_batch``): the broker
        parses once, looks at the producer ids for de-duplication, then appends the view."""
        return parse_batch(batch, max_message_bytes=self.config.max_message_bytes,
                           max_batch_bytes=self.config.max_batch_bytes)

    def append(self, partition: int, batch: bytes | memoryview | BatchView,
               wait: bool = True, *, leader_epoch: int = 0,
               at: int | None = None) -> tuple[int, int] | None:
        """Append a record batch (raw, or as :meth:`parse` returned it); returns
        (base_offset, last_offset).

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
        """
        cfg = self.config
        view = batch if isinstance(batch, BatchView) else self.parse(batch)
        if not wait and cfg.durability == "sync":
            return None
        need = CHUNK.size + len(view.frames)
        with self._cond:
            part = self._writable_partition(partition)
            while not self._cache.active.fits(need):
                if not wait and self._cache.flushing is not None:
                    return None
                self._make_room()
                part = self._writable_partition(partition)
            if at is not None and at != part.next:
                self._refuse_at(partition, at, part.next)
            if leader_epoch != part.epoch:  # rare: a new leader epoch (or a bad value)
                self._note_epoch(part, partition, leader_epoch)
            cost = need + view.count * ENTRY
            self._space.admit(cost)  # raises DiskFull before anything is acknowledged
            self._unwritten += cost
            base = part.next
            block = self._cache.active
            first_in_block = block.fill == 0
            header = chunk_header(partition, view.count, base, len(view.frames), leader_epoch)
            block.add(partition, base, header, view.frames,
                      index_entries(view, block.end_pos + CHUNK.size))
            part.next = base + view.count
            if first_in_block or self._policy.block_full(block):
                self._cond.notify_all()  # the flusher sleeps until a block needs it
            if cfg.durability == "sync":
                self._wait_synced(block.end_pos)
        return base, base + view.count - 1

    def _refuse_at(self, partition: int, at: int, next_offset: int) -> None:
        raise InvalidArgument(
            f"append to {self.topic}/{partition} at offset {at}, but its next offset is "
            f"{next_offset}", topic=self.topic, partition=partition, offset=at,
            latest=next_offset)

    def _note_epoch(self, part: _Partition, partition: int, epoch: int) -> None:
        """Check an append's leader epoch and record it when it is new (under the lock: the
        file write happens once per epoch). An older epoch goes into the header only."""
        if not isinstance(epoch, (int, np.integer)) or not 0 <= epoch <= MAX_EPOCH:
            raise InvalidArgument(f"leader epoch {epoch!r} of an append to {self.topic}/"
                                  f"{partition} must be an int in [0, {MAX_EPOCH}]",
                                  topic=self.topic, partition=partition, epoch=epoch)
        if epoch > part.epoch:
            part.epochs.assign(int(epoch), part.next)
            part.epoch = int(epoch)

    def read(self, partition: int, offset: int, max_bytes: int = 1 << 20,
             tags: Sequence[str] | None = None, max_records: int | None = None,
             stop: int | None = None) -> ReadResult:
        """Frames from ``offset`` on, up to ``max_bytes`` and ``max_records`` frames and below
        offset ``stop`` (at least one frame if any is there).

        With ``tags`` only frames whose tag is one of them are returned; ``next_offset`` then
        skips past the examined non-matching entries too. Raises OffsetOutOfRange (carrying
        earliest and latest) for an offset outside [earliest, latest].
        """
        tag_list = [t.encode() for t in tags] if tags else None
        hashes = np.array([tag_hash(t) for t in tag_list], np.uint32) if tag_list else None
        with self._cond:
            part = self._readable_partition(partition)
            earliest, latest = part.earliest, part.next
            if not isinstance(offset, int) or offset < earliest or offset > latest:
                raise OffsetOutOfRange(
                    f"offset {offset} is out of range for {self.topic}/{partition}: "
                    f"earliest {earliest}, latest {latest}",
                    topic=self.topic, partition=partition, offset=offset,
                    earliest=earliest, latest=latest)
            if offset == latest:
                return ReadResult(b"", np.empty(0, np.int64), offset, earliest, latest,
                                  np.empty(0, np.uint32))
            on_disk = offset < part.flushed
            limit = part.flushed if on_disk else part.next
            if stop is not None:
                limit = max(offset + 1, min(limit, stop))
            cached = None if on_disk else self._cache.entries(partition, offset, limit,
                                                               MAX_READ_ENTRIES)
        # Without a filter ~max_bytes/100 entries cover max_bytes (frames under 100 B are rare);
        # with one, examine more so a sparse tag still makes progress per call.
        wanted = MAX_READ_ENTRIES if tags else max_bytes // 100 + 1
        count = min(limit - offset, MAX_READ_ENTRIES, wanted)
        try:
            if on_disk:
                entries, blocks = part.index.read(offset, offset + count), []
            else:
                entries, blocks = cached[0][:count], cached[1]
            p = plan(entries, max_bytes, hashes, max_records)
            fetch = self._data.read if on_disk else (lambda s, n: read_span(blocks, s, n))
            spans = [fetch(int(s), int(n))
                     for s, n in zip(p.span_starts, p.span_lengths, strict=True)]
        except (CorruptRecord, OffsetOutOfRange):
            self._raise_if_deleted(partition, offset)  # retention or a truncation won the race
            raise
        frames, chosen = assemble(entries, p, spans, tag_list)
        return ReadResult(frames, chosen.astype(np.int64) + offset, offset + p.examined,
                          earliest, latest, entries["size"][chosen].astype(np.uint32, copy=False))

    def _raise_if_deleted(self, partition: int, offset: int) -> None:
        with self._cond:
            part = self._readable_partition(partition)
            if offset < part.earliest or offset > part.next:
                why = "deleted by retention" if offset < part.earliest else "truncated away"
                raise OffsetOutOfRange(
                    f"offset {offset} of {self.topic}/{partition} was {why}: "
                    f"earliest {part.earliest}, latest {part.next}",
                    topic=self.topic, partition=partition, offset=offset,
                    earliest=part.earliest, latest=part.next)

    def earliest(self, partition: int) -> int:
        with self._cond:
            return self._readable_partition(partition).earliest

    def latest(self, partition: int) -> int:
        """The next offset to be assigned (one past the last message)."""
        with self._cond:
            return self._readable_partition(partition).next

    def opened_end(self, partition: int) -> int:
        """The log end when this store opened (after recovery): offsets below it were
        written by an earlier process."""
        with self._cond:
            return self._readable_partition(partition).opened

    def disk_bytes(self, partition: int) -> int:
        """Bytes of this partition in the files: its flushed records in the shared data log
        plus its index (records still in the memory cache are not counted)."""
        with self._cond:
            part = self._readable_partition(partition)
            earliest, flushed = part.earliest, part.flushed
            index_bytes = (part.index.end - part.index.start) * ENTRY
        return part.index.record_bytes(earliest, flushed) + index_bytes

    def offset_for_time(self, partition: int, timestamp_ms: int) -> int:
        """First offset whose timestamp is >= ``timestamp_ms`` (latest if none)."""
        with self._cond:
            part = self._readable_partition(partition)
            start, flushed, latest = part.earliest, part.flushed, part.next
            cached = (self._cache.entries(partition, flushed, latest, MAX_READ_ENTRIES)
                      if latest > flushed else None)
        step = 1 << 20
        for first in range(start, flushed, step):
            ts = part.index.read(first, min(flushed, first + step))["ts"]
            hit = ts >= timestamp_ms
            if hit.any():
                return first + int(np.argmax(hit))
        if cached is not None:
            hit = cached[0]["ts"] >= timestamp_ms
            if hit.any():
                return flushed + int(np.argmax(hit))
        return latest

    def flush(self) -> None:
        """Write everything cached so far to the files and fsync it."""
        with self._cond:
            self._check_open()
            self._wait_synced(self._cache.active.end_pos)

    def truncate(self, partition: int, offset: int) -> None:
        """Drop the partition's offsets >= ``offset``; the next append gets ``offset``.

        For a follower whose records past ``offset`` diverged from its new leader's. Needs
        earliest <= offset <= latest (OffsetOutOfRange carrying both otherwise). The
        partition's leader epochs starting at or after ``offset`` go too. Durable when it
        returns (a marker chunk, storage/truncation.py); a crash before it returns may leave
        the partition untruncated, so the caller repeats it. Rare, so simple rather than
        fast: it flushes the cache twice and holds the store's lock over file I/O. Readers
        racing with it may still get the old records, or OffsetOutOfRange for offsets that
        are gone.
        """
        cut(self, partition, offset, reset=False)

    def reset(self, partition: int, offset: int) -> None:
        """Empty the partition and continue at ``offset`` (>= latest): earliest = latest =
        ``offset`` and its leader epochs are forgotten.

        For a follower that fell behind the leader's earliest offset. Durable as
        :meth:`truncate` is (a marker chunk past the end makes recovery restart the index
        there, and an empty index segment named by ``offset`` keeps it on a clean reopen).
        """
        cut(self, partition, offset, reset=True)

    def leader_epochs(self, partition: int) -> list[tuple[int, int]]:
        """The partition's leader-epoch cache: (epoch, start_offset), oldest first."""
        with self._cond:
            return self._readable_partition(partition).epochs.entries()

    def end_offset_for_epoch(self, partition: int, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch for this partition (:meth:`LeaderEpochs.end_offset_for`
        with its next offset as the log end): (epoch, end offset) or (-1, -1)."""
        with self._cond:
            part = self._readable_partition(partition)
            return part.epochs.end_offset_for(epoch, part.next)

    def enforce_retention(self, now: float | None = None) -> int:
        """Delete whole data segments past the age or size limit; returns how many went."""
        with self._cond:
            self._check_open()
        return self._flusher.enforce_retention(self._wall_clock() if now is None else now)

    @property
    def space(self) -> SpaceGuard:
        """The free-space guard this store admits appends with."""
        return self._space

    def stats(self) -> dict[str, object]:
        with self._cond:
            return {
                "disk_full": self._disk_full is not None,
                "data_bytes": self._data.size_bytes(),
                "segments": len(self._data.segment_info()),
                "cached_bytes": self._cache.cached_bytes,
                "partitions": {p: {"earliest": s.earliest, "latest": s.next, "flushed": s.flushed}
                               for p, s in self._parts.items()},
            }

    def close(self) -> None:
        """Flush, fsync, checkpoint and release the files; later calls raise StoreClosed.

        On a full disk it retries for ``DISK_FULL_CLOSE_S``, then logs (``store.unwritten_lost``)
        the offsets it could not write and closes anyway.
        """
        with self._cond:
            if self._closing:
                return
            self._closing = True
            self._close_started = self._clock()
            self._cond.notify_all()
        self._flusher.join()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for index in [*(part.index for part in self._parts.values()), *self._retired]:
            index.close()
        self._data.close()


    # -------------------------------------------------------------- lock helpers

    def _check_open(self) -> None:
        if self._closing:
            raise StoreClosed(f"store {self.topic}/{self.store_id} is closed")
        if self._failed is not None:
            raise self._failed

    def _stopped(self) -> bool:
        return self._closed or self._failed is not None

    def _readable_partition(self, partition: int) -> _Partition:
        if self._closed:
            raise StoreClosed(f"store {self.topic}/{self.store_id} is closed")
        part = self._parts.get(partition)
        if part is None:
            raise UnknownPartition(
                f"partition {partition!r} of {self.topic} is not in store {self.store_id} "
                f"(hosts {self.partitions})", topic=self.topic, partition=partition)
        return part

    def _writable_partition(self, partition: int) -> _Partition:
        self._check_open()
        if self._disk_full is not None:
            raise self._disk_full
        return self._readable_partition(partition)

    def _make_room(self) -> None:
        """Swap a full active block out, or wait for the flusher to free the other one."""
        if self._cache.flushing is None:
            self._cache.swap()
            self._cond.notify_all()
        else:
            self._cond.wait()

    def _wait_synced(self, end_pos: int) -> None:
        self._sync_target = max(self._sync_target, end_pos)
        self._cond.notify_all()
        # On a full disk a waiter gets DiskFull at once: its batch stays cached and is written
        # when space returns, but it was not acknowledged, so a retry may store it twice.
        self._cond.wait_for(lambda: self._synced_pos >= end_pos or self._stopped()
                            or self._disk_full is not None)
        if self._synced_pos < end_pos:
            raise (self._failed or self._disk_full
                   or StoreClosed(f"store {self.topic}/{self.store_id} closed"))

    def _refresh_earliest(self) -> None:
        start = self._data.start
        for part in self._parts.values():
            part.earliest = min(part.index.first_at_or_after(start), part.index.end)
            try:
                part.epochs.truncate_from_start(part.earliest)
            except StorageError as exc:  # stale entries below earliest mislead no one: retried
                event(log, "store.leader_epochs_write_failed", logging.ERROR,  # on reopen
                      store=str(self.dir), error=exc.message)


def index_entries(view: BatchView, first_pos: int) -> np.ndarray | tuple[int, int, int, int]:
    """The index entries of a checked batch whose first frame lands at ``first_pos``. One
    record (a ``send_sync``) is one entry as a tuple, which the cache block assigns as a row
    (:meth:`storage.cache._Entries.extend`): an array costs several numpy calls on the path
    whose latency counts."""
    if view.count == 1:
        return (first_pos, int(view.sizes[0]), int(view.tag_hashes[0]),
                int(view.timestamps[0]))
    entries = np.empty(view.count, INDEX_DTYPE)
    entries["pos"] = frame_starts(view.sizes) + first_pos
    entries["size"] = view.sizes
    entries["tag"] = view.tag_hashes
    entries["ts"] = view.timestamps
    return entries
