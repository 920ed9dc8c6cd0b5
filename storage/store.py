"""A storage instance: some partitions of one topic sharing a data log and a cache block pair.

The store is the coordinator; each concern has its own module:

- ``cache.py``: the cache block pair (active + being flushed) that appends land in;
- ``flusher.py``: the background writer (writes blocks, fsyncs, checkpoints, retention,
  the disk-full condition), the only writer of the files;
- ``sync_policy.py``: *when* a block is written and when the data log is fsynced;
- ``retention.py``: which old data segments go;
- ``datalog.py``, ``index.py`` over ``segments.py``: the files; ``recovery.py``: opening them.

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
    OffsetOutOfRange,
    StorageError,
    StoreClosed,
    UnknownPartition,
)
from lib.names import check_name
from lib.records import BatchView, frame_starts, parse_batch, tag_hash
from storage.cache import CachePair, read_span
from storage.checkpoints import CheckpointSlot, OwnCheckpoint
from storage.config import StoreConfig
from storage.datalog import CHUNK, DataLog, chunk_header
from storage.flusher import Flusher
from storage.fsutil import inside
from storage.index import ENTRY, INDEX_DTYPE, IndexLog
from storage.recovery import recover
from storage.select import assemble, plan
from storage.space import SpaceGuard
from storage.sync_policy import SyncPolicy

MAX_READ_ENTRIES = 65_536  # index entries examined per read (bounds filtered scans)


@dataclass(frozen=True)
class ReadResult:
    """Frames (concatenated, each self-describing) and the offset of each one."""

    frames: bytes
    offsets: np.ndarray
    next_offset: int
    earliest: int
    latest: int

    def __len__(self) -> int:
        return len(self.offsets)


class _Partition:
    __slots__ = ("index", "next", "flushed", "earliest", "opened")

    def __init__(self, index: IndexLog) -> None:
        self.index = index
        self.opened = index.end  # the log end recovery left: what a crashed process had stored
        self.next = index.end  # next offset to assign
        self.flushed = index.end  # offsets below this are in the files
        self.earliest = index.start


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
        indexes = {p: self._open_index(p) for p in sorted(set(partitions))}
        self._checkpoint = checkpoint or OwnCheckpoint(self.dir)
        recover(self.dir, self._data, indexes, self._checkpoint.read())
        self._parts = {p: _Partition(index) for p, index in indexes.items()}
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

    def _open_index(self, partition: int) -> IndexLog:
        if not isinstance(partition, int) or partition < 0:
            raise UnknownPartition(f"partition must be an int >= 0, got {partition!r}")
        return IndexLog(self.dir / f"p{partition}", self.config.index_segment_entries)

    # ----------------------------------------------------------------- public API

    @property
    def partitions(self) -> list[int]:
        return sorted(self._parts)

    def add_partition(self, partition: int) -> None:
        """Start hosting a new partition (topic grew); its offsets start at 0."""
        with self._cond:
            self._check_open()
            if partition not in self._parts:
                self._parts[partition] = _Partition(self._open_index(partition))

    def parse(self, batch: bytes | memoryview) -> BatchView:
        """Check a batch against this store's limits (``lib.records.parse_batch``): the broker
        parses once, looks at the producer ids for de-duplication, then appends the view."""
        return parse_batch(batch, max_message_bytes=self.config.max_message_bytes,
                           max_batch_bytes=self.config.max_batch_bytes)

    def append(self, partition: int, batch: bytes | memoryview | BatchView,
               wait: bool = True) -> tuple[int, int] | None:
        """Append a record batch (raw, or as :meth:`parse` returned it); returns
        (base_offset, last_offset).

        ``async`` topics return once the batch is in the cache block; ``sync`` topics return
        after the fsync that covers it (one fsync serves every waiting append). With
        ``wait=False`` it returns None, having changed nothing, where it would have to wait
        (a ``sync`` topic, or both cache blocks full): the broker's event loop appends
        without a thread hop when it can and hands the rest to its executor.
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
            cost = need + view.count * ENTRY
            self._space.admit(cost)  # raises DiskFull before anything is acknowledged
            self._unwritten += cost
            base = part.next
            block = self._cache.active
            first_in_block = block.fill == 0
            header = chunk_header(partition, view.count, base, len(view.frames))
            entries = np.empty(view.count, INDEX_DTYPE)
            entries["pos"] = frame_starts(view.sizes) + (block.end_pos + CHUNK.size)
            entries["size"] = view.sizes
            entries["tag"] = view.tag_hashes
            entries["ts"] = view.timestamps
            block.add(partition, base, header, view.frames, entries)
            part.next = base + view.count
            if first_in_block or self._policy.block_full(block):
                self._cond.notify_all()  # the flusher sleeps until a block needs it
            if cfg.durability == "sync":
                self._wait_synced(block.end_pos)
        return base, base + view.count - 1

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
                return ReadResult(b"", np.empty(0, np.int64), offset, earliest, latest)
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
            self._raise_if_deleted(partition, offset)  # retention won the race: say so
            raise
        frames, chosen = assemble(entries, p, spans, tag_list)
        return ReadResult(frames, chosen.astype(np.int64) + offset, offset + p.examined,
                          earliest, latest)

    def _raise_if_deleted(self, partition: int, offset: int) -> None:
        with self._cond:
            part = self._readable_partition(partition)
            if offset < part.earliest:
                raise OffsetOutOfRange(
                    f"offset {offset} of {self.topic}/{partition} was deleted by retention: "
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
        for part in self._parts.values():
            part.index.close()
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
