"""A storage instance: some partitions of one topic sharing a data log and a cache block pair.

Threading: one lock (``_cond``) guards the cache blocks and the per-partition counters;
appends and the tier choice of reads hold it briefly (a memcpy, no I/O). One background
flusher thread owns all file writes, fsyncs, checkpoints and retention, so files have a single
writer. Readers do their file I/O outside the lock; segment lists are replaced, never mutated,
so a reader's snapshot stays valid while the flusher works.

Ordering: a block's bytes are written to the data log before its index entries, and a
partition's ``flushed`` counter moves only after both, so a reader never sees an index entry
whose data is not yet in the file.

A full disk is a condition, not a failure. Appends are admitted by a shared
:class:`~storage.space.SpaceGuard` (free space minus what is cached but unwritten must stay
above a reserve), so an acknowledged append normally always fits. If a write or fsync still
fails with ENOSPC/EDQUOT (another process took the space), the flusher keeps the block, refuses
appends with DiskFull, and retries every ``DISK_FULL_RETRY_S``; the retry resumes at the data
log's and each index's end, so it is exact. ``close()`` retries for ``DISK_FULL_CLOSE_S`` and
then logs every offset range it could not write. Any other I/O error stops the store for good.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lib.errors import (
    CorruptRecord,
    DiskFull,
    OffsetOutOfRange,
    StorageError,
    StoreClosed,
    UnknownPartition,
)
from lib.logs import event
from lib.names import check_name
from lib.records import frame_starts, parse_batch, tag_hash
from storage.cache import CacheBlock
from storage.config import StoreConfig
from storage.datalog import CHUNK, DataLog, chunk_header
from storage.fsutil import inside
from storage.index import ENTRY, INDEX_DTYPE, IndexLog
from storage.recovery import Checkpoint, recover, write_checkpoint
from storage.select import assemble, plan
from storage.space import SpaceGuard, is_disk_full

log = logging.getLogger(__name__)
MAX_READ_ENTRIES = 65_536  # index entries examined per read (bounds filtered scans)
DISK_FULL_RETRY_S = 0.5  # a flusher on a full disk tries again this often
DISK_FULL_CLOSE_S = 3.0  # close() on a full disk retries this long, then logs what is lost


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
    __slots__ = ("index", "next", "flushed", "earliest")

    def __init__(self, index: IndexLog) -> None:
        self.index = index
        self.next = index.end  # next offset to assign
        self.flushed = index.end  # offsets below this are in the files
        self.earliest = index.start


class Store:
    """Storage instance ``<root>/<topic>/<store_id>``; see module docstring for threading."""

    def __init__(self, root: str | Path, topic: str, store_id: int, partitions: Iterable[int],
                 config: StoreConfig | None = None, space: SpaceGuard | None = None) -> None:
        """``space`` is shared by the stores of one data dir (a broker passes one); without
        it the store guards its own directory with ``config.disk_reserve_bytes``."""
        self.config = config or StoreConfig()
        self.topic = check_name(topic)
        self.store_id = store_id
        self.dir = inside(Path(root), topic, str(int(store_id)))
        self.dir.mkdir(parents=True, exist_ok=True)
        cfg = self.config
        self._data = DataLog(self.dir / "data", cfg.segment_bytes)
        self._parts: dict[int, _Partition] = {}
        indexes = {p: self._open_index(p) for p in sorted(set(partitions))}
        recover(self.dir, self._data, indexes)
        for p, index in indexes.items():
            self._parts[p] = _Partition(index)
        self._refresh_earliest()
        self._cond = threading.Condition()
        self._active = CacheBlock(self._data.end, cfg.cache_block_bytes)
        self._flushing: CacheBlock | None = None
        self._closing = False
        self._closed = False
        self._failed: StorageError | None = None
        self._disk_full: DiskFull | None = None  # the flusher cannot write: appends refused
        self._space = space or SpaceGuard(self.dir, cfg.disk_reserve_bytes)
        self._name = f"{self.topic}/{self.store_id}"
        self._unwritten = 0  # bytes admitted by the guard that the flusher has not written
        self._io_lock = threading.Lock()  # file structure changes: flusher and retention
        self._sync_target = 0  # data position that sync waiters need fsynced
        self._synced_pos = self._data.end
        self._unsynced_msgs = 0
        self._unsynced_bytes = 0
        self._last_sync = self._last_checkpoint = time.monotonic()
        self._last_retention = 0.0
        self._disk_full_since = self._close_started = 0.0
        self._written: CacheBlock | None = None  # the block being flushed, once in the files
        self._flusher = threading.Thread(target=self._flush_loop, daemon=True,
                                         name=f"flusher-{topic}-{store_id}")
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

    def append(self, partition: int, batch: bytes | memoryview) -> tuple[int, int]:
        """Append a record batch; returns (base_offset, last_offset).

        ``async`` topics return once the batch is in the cache block; ``sync`` topics return
        after the fsync that covers it (one fsync serves every waiting append).
        """
        cfg = self.config
        view = parse_batch(batch, max_message_bytes=cfg.max_message_bytes,
                           max_batch_bytes=cfg.max_batch_bytes)
        need = CHUNK.size + len(view.frames)
        with self._cond:
            part = self._writable_partition(partition)
            while not self._active.fits(need):
                self._make_room()
                part = self._writable_partition(partition)
            cost = need + view.count * ENTRY
            self._space.admit(cost)  # raises DiskFull before anything is acknowledged
            self._unwritten += cost
            base = part.next
            block = self._active
            header = chunk_header(partition, view.count, base, len(view.frames))
            entries = np.empty(view.count, INDEX_DTYPE)
            entries["pos"] = frame_starts(view.sizes) + (block.end_pos + CHUNK.size)
            entries["size"] = view.sizes
            entries["tag"] = view.tag_hashes
            entries["ts"] = view.timestamps
            block.add(partition, base, header, view.frames, entries)
            part.next = base + view.count
            end_pos = block.end_pos
            if block.messages >= cfg.cache_block_messages or not block.fits(CHUNK.size + 64):
                self._cond.notify_all()
            if cfg.durability == "sync":
                self._wait_synced(end_pos)
        return base, base + view.count - 1

    def read(self, partition: int, offset: int, max_bytes: int = 1 << 20,
             tags: Sequence[str] | None = None) -> ReadResult:
        """Frames from ``offset`` on, up to ``max_bytes`` (at least one frame if any is there).

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
            cached = None if on_disk else self._cached_entries(partition, offset, limit)
        # Without a filter ~max_bytes/100 entries cover max_bytes (frames under 100 B are rare);
        # with one, examine more so a sparse tag still makes progress per call.
        wanted = MAX_READ_ENTRIES if tags else max_bytes // 100 + 1
        count = min(limit - offset, MAX_READ_ENTRIES, wanted)
        try:
            if on_disk:
                entries, blocks = part.index.read(offset, offset + count), []
            else:
                entries, blocks = cached[0][:count], cached[1]
            p = plan(entries, max_bytes, hashes)
            fetch = self._data.read if on_disk else (lambda s, n: _block_slice(blocks, s, n))
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

    def offset_for_time(self, partition: int, timestamp_ms: int) -> int:
        """First offset whose timestamp is >= ``timestamp_ms`` (latest if none)."""
        with self._cond:
            part = self._readable_partition(partition)
            start, flushed, latest = part.earliest, part.flushed, part.next
            cached = self._cached_entries(partition, flushed, latest) if latest > flushed else None
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
            self._wait_synced(self._active.end_pos)

    def enforce_retention(self, now: float | None = None) -> int:
        """Delete whole data segments past the age or size limit; returns how many went."""
        with self._cond:
            self._check_open()
        with self._io_lock:
            return self._apply_retention(time.time() if now is None else now)

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
                "cached_bytes": self._active.fill + (self._flushing.fill if self._flushing else 0),
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
            self._close_started = time.monotonic()
            self._cond.notify_all()
        self._flusher.join()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for part in self._parts.values():
            part.index.close()
        self._data.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
        if self._flushing is None:
            self._swap()
        else:
            self._cond.wait()

    def _swap(self) -> None:
        self._flushing = self._active
        self._active = CacheBlock(self._flushing.end_pos, self.config.cache_block_bytes)
        self._cond.notify_all()

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

    def _cached_entries(self, partition: int, first: int, last: int
                        ) -> tuple[np.ndarray, list[CacheBlock]]:
        """Index entries [first, last) from the cache blocks, with the blocks holding them."""
        parts, blocks = [], []
        for block in (self._flushing, self._active):
            got = block.entries(partition) if block is not None else None
            if got is None:
                continue
            block_first, entries = got
            lo = max(first, block_first) - block_first
            hi = min(last, block_first + len(entries)) - block_first
            if hi > lo:
                parts.append(entries[lo:hi])
                blocks.append(block)
        entries = parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else \
            np.empty(0, INDEX_DTYPE)
        return entries[:MAX_READ_ENTRIES], blocks

    def _refresh_earliest(self) -> None:
        start = self._data.start
        for part in self._parts.values():
            part.earliest = min(part.index.first_at_or_after(start), part.index.end)

    # ------------------------------------------------------------------ flusher

    def _flush_loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(self._flush_due, timeout=self._next_deadline())
                closing = self._closing
                sync_needed = self._sync_target > self._synced_pos
                if self._active.fill and self._flushing is None and (
                        closing or self._sync_target > self._active.base_pos
                        or self._block_due(self._active)):
                    self._swap()
                block = self._flushing
            try:
                with self._io_lock:
                    self._write_block(block, sync_needed or closing)
                    self._maybe_checkpoint(closing)
                    self._maybe_retention()
            except Exception as exc:  # noqa: BLE001 - a dead flusher must never be silent
                if is_disk_full(exc) and self._wait_for_space(exc, closing):
                    continue
                self._fail(exc if isinstance(exc, StorageError) else
                           StorageError(f"store {self.topic}/{self.store_id} flusher: {exc!r}"))
                return
            if self._disk_full is not None:
                self._space_back()
            if closing and block is None:
                return

    def _flush_due(self) -> bool:
        return (self._closing or self._flushing is not None
                or self._sync_target > self._synced_pos or self._block_due(self._active))

    def _block_due(self, block: CacheBlock) -> bool:
        cfg = self.config
        if block.fill == 0:
            return False
        return (block.messages >= cfg.cache_block_messages
                or not block.fits(CHUNK.size + 64)
                or (time.monotonic() - block.created) * 1e3 >= cfg.cache_flush_interval_ms)

    def _next_deadline(self) -> float:
        cfg = self.config
        return min(cfg.cache_flush_interval_ms, cfg.unflush_interval_ms) / 1e3 / 2

    def _write_block(self, block: CacheBlock | None, want_sync: bool) -> None:
        """Write one block (data first, then index entries), then fsync if due.

        Resumes where a failed attempt stopped: the data log's and each index's end say what
        of this block is already in the files (they only count bytes fully written).
        """
        written = 0 if block is None else block.fill + block.messages * ENTRY
        if block is not None and block is not self._written:
            done = self._data.end - block.base_pos
            if done < block.fill:
                self._data.write(block.data()[done:])
            for p, entries in block.parts.items():
                index = self._parts[p].index
                done = index.end - entries.first_offset
                if done < entries.n:
                    index.append(entries.view()[done:])
            self._written = block  # an fsync failing now must not count the block twice
            self._unsynced_msgs += block.messages
            self._unsynced_bytes += block.fill
            self._space.written(written)
        cfg = self.config
        due = (self._unsynced_msgs >= cfg.unflush_threshold
               or self._unsynced_bytes >= cfg.unflush_data_hold
               or (time.monotonic() - self._last_sync) * 1e3 >= cfg.unflush_interval_ms)
        synced = None
        if (want_sync or due) and self._unsynced_bytes:
            self._data.sync()
            self._unsynced_msgs = self._unsynced_bytes = 0
            self._last_sync = time.monotonic()
            synced = self._data.end
        with self._cond:
            if block is not None:
                for p, entries in block.parts.items():
                    self._parts[p].flushed = entries.first_offset + entries.n
                self._flushing = self._written = None
                self._unwritten -= written
            if synced is not None:
                self._synced_pos = synced
            elif not self._unsynced_bytes:
                self._synced_pos = self._data.end
            self._cond.notify_all()

    def _maybe_retention(self) -> None:
        interval = self.config.retention_check_interval_ms / 1e3
        if time.monotonic() - self._last_retention >= interval:
            self._apply_retention(time.time())

    def _maybe_checkpoint(self, force: bool) -> None:
        elapsed = (time.monotonic() - self._last_checkpoint) * 1e3
        if not force and elapsed < self.config.checkpoint_interval_ms:
            return
        with self._cond:
            if self._unsynced_bytes or self._flushing is not None:
                return  # only a fully synced, fully indexed position may be checkpointed
            position = self._synced_pos
            next_offsets = {p: s.flushed for p, s in self._parts.items()}
            parts = list(self._parts.values())  # add_partition may insert while we sync
        for part in parts:
            part.index.sync()
        write_checkpoint(self.dir, Checkpoint(position, next_offsets))
        self._last_checkpoint = time.monotonic()

    def _apply_retention(self, now: float) -> int:
        cfg = self.config
        self._last_retention = time.monotonic()
        segments = self._data.segment_info()[:-1]  # the active segment always stays
        total = self._data.size_bytes()
        doomed = 0
        for _base, size, mtime in segments:
            too_old = cfg.retention_ms > 0 and (now - mtime) * 1e3 > cfg.retention_ms
            too_big = cfg.retention_bytes > 0 and total > cfg.retention_bytes
            if not (too_old or too_big):
                break
            doomed += 1
            total -= size
        if doomed:
            with self._cond:
                self._data.delete_oldest(doomed)
                self._refresh_earliest()
                parts = list(self._parts.values())  # add_partition may insert meanwhile
            for part in parts:
                part.index.delete_before(part.earliest)
        return doomed

    # ---------------------------------------------------------------- full disk

    def _wait_for_space(self, exc: BaseException, closing: bool) -> bool:
        """Enter (or stay in) the disk-full condition and back off; False: give up (close)."""
        with self._cond:
            first = self._disk_full is None
            if first:
                self._disk_full_since = time.monotonic()
                self._disk_full = self._space_error(exc)
                self._space.blocked(self._name, str(exc))
                self._cond.notify_all()  # appenders waiting for room get DiskFull now
            if closing and time.monotonic() - self._close_started >= DISK_FULL_CLOSE_S:
                return False
            if first:
                event(log, "store.disk_full", logging.ERROR, store=self._name, error=str(exc),
                      unwritten_bytes=self._unwritten)
            self._cond.wait_for(lambda: self._closing and not closing, DISK_FULL_RETRY_S)
        try:
            with self._io_lock:
                self._maybe_retention()  # deleting old segments may be what frees the space
        except Exception:  # noqa: BLE001 - the write retry reports what matters
            pass
        return True

    def _space_error(self, exc: BaseException) -> DiskFull:
        status = self._space.status()
        return DiskFull(
            f"disk full: store {self._name} cannot write to {self.dir} ({exc}); "
            f"{status.free_bytes} bytes free, reserve {status.reserve_bytes} bytes; "
            f"{self._unwritten} bytes wait in memory; appends resume when space is freed",
            path=str(self.dir), free_bytes=status.free_bytes,
            reserve_bytes=status.reserve_bytes, unwritten_bytes=self._unwritten)

    def _space_back(self) -> None:
        with self._cond:
            self._disk_full = None
            self._cond.notify_all()
        self._space.unblocked(self._name)
        event(log, "store.disk_space_back", store=self._name,
              seconds=round(time.monotonic() - self._disk_full_since, 3))

    def _unwritten_ranges(self) -> dict[int, list[int]]:
        """partition -> [first, last] offsets held in memory that are not in the files."""
        out: dict[int, list[int]] = {}
        for p, part in self._parts.items():
            if part.next > part.flushed:
                out[p] = [part.flushed, part.next - 1]
        return out

    def _fail(self, error: StorageError) -> None:
        with self._cond:
            self._failed = error
            lost, nbytes, self._unwritten = self._unwritten_ranges(), self._unwritten, 0
            self._cond.notify_all()
        self._space.forget(nbytes)
        self._space.unblocked(self._name)
        if lost:  # acknowledged async appends that will never reach the files: say which
            event(log, "store.unwritten_lost", logging.ERROR, store=self._name,
                  error=error.message, bytes=nbytes, offsets=lost)


def _block_slice(blocks: list[CacheBlock], position: int, length: int) -> memoryview:
    for block in blocks:
        if block.base_pos <= position and position + length <= block.end_pos:
            return block.slice(position, length)
    # A span can cross from the flushing block into the active one (they are adjacent).
    return memoryview(b"".join(_split_slices(blocks, position, length)))


def _split_slices(blocks: list[CacheBlock], position: int, length: int) -> list[bytes]:
    out = []
    for block in blocks:
        lo = max(position, block.base_pos)
        hi = min(position + length, block.end_pos)
        if hi > lo:
            out.append(bytes(block.slice(lo, hi - lo)))
    return out
