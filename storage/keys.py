"""Per-partition key index: which offsets hold a record with a given key, without a scan.

RocketMQ keeps an IndexFile of hash slots beside its commit log; tubeq keeps, beside each index
segment ``p<N>/<base>.idx``, two files (design (b) of issue 52):

- ``<base>.kh``: the key hash (CRC-32 of the key bytes, u32 little-endian) of entry n at byte
  4n, parallel to the ``.idx`` segment (the same base, the same entry count). Appended by the
  flusher right after the index entries, from the block it is writing (the frames are still in
  memory), so it costs one C-level ``map(crc32, key slices)`` per block and no Python loop per
  record; a block whose chunks the append's check saw without keys (most bulk sends) gets
  its zeros without reading anything back, as a hole: the file is extended by its path, so
  a store whose records carry no key never holds a descriptor on it. Lookups scan it with
  numpy only while its segment is the active one (at most ``index_segment_entries`` x 4
  bytes: 4 MiB by default).
- ``<base>.ks``: once the index segment has rolled (sealed), the same hashes sorted (stable
  ``np.argsort``) with the entry numbers beside them, so a lookup is two ``np.searchsorted`` on a
  memory map: O(log n) pages touched, whatever the partition's size. Header (32 bytes): magic
  ``TQKS``, version u16, reserved u16, count u32, min and max record timestamp i64 (a lookup
  with ``since``/``until`` skips segments outside them), CRC-32 of the two arrays; then
  hashes u32[count] and entry numbers u32[count]. Written temp file + fsync + rename.

Why a sorted file per sealed segment rather than RocketMQ's slot table with chained entries:
the chain walk is a pointer chase (one read per entry of the chain, in Python here), where a
sorted array answers with numpy's binary search and is built with one ``argsort``; and a
segment's key files come and go with its index segment (retention, truncation) with no shared
slot table to rewrite. Cost: 12 bytes per record on disk (4 + 8).

Hashes are only candidates: the caller reads each candidate's frame and compares the key bytes
(storage/key_lookup.py), so a CRC collision, a damaged key file or a hole never yields a wrong
record. A record without a key, or with an empty one, hashes to 0 (``crc32(b"") == 0``).

Recovery: :meth:`KeyLog.open` keeps the longest prefix of ``.kh`` segments that mirrors the
index's segments (cutting one longer than its index segment, dropping what follows a mismatch
and what lies below the index's start), rewrites a missing or damaged ``.ks`` of a sealed
segment from its ``.kh``, and :meth:`KeyLog.catch_up` rebuilds the missing hashes from the data
log (the index says where each frame is). So a crash anywhere, a deleted key file or an index
rebuilt by recovery all end with key files that agree with the index.

Threading: as the index (storage/index.py): one writer (the flusher, or recovery before
anything else runs; cuts hold the flusher's ``io_lock``), readers without a lock on a snapshot
of the segment list, which is replaced, never mutated.
"""
from __future__ import annotations

import logging
import mmap
import os
import struct
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

from lib.errors import CorruptRecord, StorageError
from lib.logs import event
from lib.records.layout import FRAME_HEADER_SIZE, FRAME_TAG_LEN_AT, crc32
from storage.fsutil import fsync_dir, segment_name
from storage.handles import handles
from storage.index import IndexLog
from storage.segments import Segment, SegmentList, pwrite_all

log = logging.getLogger(__name__)
KH_SUFFIX = ".kh"
KS_SUFFIX = ".ks"
HASH = np.dtype("<u4")
KS_MAGIC, KS_VERSION = b"TQKS", 1
KS_HEADER = struct.Struct("<4sHHIqqI")  # magic, version, reserved, count, min ts, max ts, crc
KEY_LEN_AT = FRAME_TAG_LEN_AT + 2  # i32 after the u16 tag length
CATCH_UP_ENTRIES = 1 << 18  # entries hashed per step when rebuilding from the data log
CATCH_UP_BYTES = 64 << 20  # data-log bytes read per step (bounds the rebuild's memory)

Fetch = Callable[[int, int], "bytes | memoryview"]  # data-log bytes [pos, pos + n)


def key_hash(key: bytes) -> int:
    """The stable hash the key files hold: CRC-32 of the key bytes (never Python's ``hash``)."""
    return crc32(key)


def frame_keys(buf: bytes | memoryview, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(key start, key end) in ``buf`` of the frames starting at ``starts`` (numpy gathers of
    the tag and key length fields; a record without a key gets an empty range)."""
    arr = np.frombuffer(buf, np.uint8)
    at = starts.astype(np.int64)
    tag_len = arr[at + FRAME_TAG_LEN_AT].astype(np.int64) | \
        (arr[at + FRAME_TAG_LEN_AT + 1].astype(np.int64) << 8)
    raw = arr[at[:, None] + (KEY_LEN_AT + np.arange(4))]
    key_len = np.ascontiguousarray(raw).view("<i4").ravel().astype(np.int64)
    first = at + FRAME_HEADER_SIZE + tag_len
    return first, first + np.maximum(key_len, 0)


def hash_keys(buf: bytes | memoryview, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Key hashes of the frames at ``starts`` (``sizes`` from the index: a hole, size 0, gets
    hash 0 and is not read). One C-level ``map(crc32, slices)``: no Python loop per record."""
    out = np.zeros(len(starts), HASH)
    real = sizes >= FRAME_HEADER_SIZE
    if not real.any():
        return out
    first, end = frame_keys(buf, starts[real])
    keyed = end > first  # a record without a key (most bulk sends) keeps hash 0, no call
    if keyed.any():
        mv = memoryview(buf)
        out[np.flatnonzero(real)[keyed]] = list(map(crc32, map(
            mv.__getitem__, map(slice, first[keyed].tolist(), end[keyed].tolist()))))
    return out


class KeyLog:
    """The key files of one partition, beside its index (module docstring)."""

    def __init__(self, index: IndexLog) -> None:
        self.dir = index.dir
        self._list = SegmentList(index.dir, KH_SUFFIX, _hashes_in)
        self._maps: dict[int, _Sorted] = {}  # sealed segments' mapped .ks, opened on demand
        self._maps_lock = threading.Lock()
        self._align(index)

    @property
    def start(self) -> int:
        return self._list.start

    @property
    def end(self) -> int:
        return self._list.end

    # ---------------------------------------------------------------- writing

    def catch_up(self, index: IndexLog, fetch: Fetch, data_start: int = 0,
                 unkeyed: tuple[int, int] = (0, 0)) -> None:
        """Hash the index entries past this log's end (reading their frames with ``fetch``),
        following the index's segments: a key segment is sealed (its ``.ks`` written) when
        the index's next segment gets its first hashes. Entries whose data lies below
        ``data_start`` (deleted by retention, unreadable) get hash 0. Resumable: after a
        failure the next call starts where the written hashes end.

        ``unkeyed``: offsets [lo, hi) known to hold no record with a key (the append's check
        saw every key length, ``BatchView.keyed``): their hashes are zeros, written without
        reading the index or the frames back (at 10,000 topics that read-back and hashing
        was an eighth of the flushers' time)."""
        lo, hi = unkeyed
        while self.end < index.end:
            first = self.end
            seg_base, seg_end = index.segment_of(first)
            last = min(index.end, seg_end, first + CATCH_UP_ENTRIES)
            if lo <= first < hi:
                last = min(last, hi)
                hashes = last - first  # zeros
            else:
                if first < lo:
                    last = min(last, lo)
                hashes = _hashes_from(index.read(first, last), fetch, data_start)
            self._append(hashes, seg_base, index)

    def open_first_segment(self, index: IndexLog) -> None:
        """The key file mirroring an index's one empty segment, made now
        (storage/partition_log.py, ``_open_first_files``)."""
        if not self._list.segs and index.segment_bases() == {self.end: 0}:
            self._roll()

    def _roll(self) -> Segment:
        """A new key segment, its descriptor and the full one's closed: only a keyed write
        opens the new one again (:meth:`_append`), a lookup never reads the full one's
        (:meth:`_seal` sorted it)."""
        full = self._list.active
        seg = self._list.roll()  # fsyncs ``full``: opens it again
        for done in (full, seg):
            if done is not None:
                handles().release(done)
        return seg

    def _append(self, hashes: np.ndarray | int, seg_base: int, index: IndexLog) -> None:
        """Append ``hashes`` (an int: that many zeros) to the segment mirroring ``seg_base``.

        Zeros extend the file by its path (``truncate``: a hole reads as zeros) and need no
        descriptor: a store whose records carry no key then keeps its ``.kh`` closed, so at
        10,000 topics the descriptors in use are the data and index files (20,000), not
        30,000, and far fewer are closed and opened again under the cap (storage/handles.py:
        that churn was a fifth of the broker's samples). Bytes a failed write left past the
        end are cut or kept as they are: they hold the same offsets' hashes, zeros here."""
        seg = self._list.active
        if seg is None or seg.base != seg_base:
            if seg is not None:
                self._seal(seg, index)
            if not self._list.segs:
                self._list.empty_end = seg_base
            seg = self._roll()
            if seg.base != seg_base:  # cannot happen while the log mirrors the index
                raise StorageError(f"key index {self.dir}: segment {seg.base} where the index "
                                   f"has {seg_base}", path=str(self.dir))
        if isinstance(hashes, int):
            try:
                os.truncate(seg.path, (seg.length + hashes) * HASH.itemsize)
            except OSError as exc:
                raise StorageError(f"key index write failed in {seg.path}: {exc}",
                                   path=str(seg.path)) from exc
            seg.length += hashes
            return
        pwrite_all(seg, memoryview(np.ascontiguousarray(hashes, HASH)).cast("B"),
                   seg.length * HASH.itemsize, "key index")
        seg.length += len(hashes)

    def _seal(self, seg: Segment, index: IndexLog) -> None:
        """Write ``seg``'s sorted file (temp file, fsync, rename, directory fsync)."""
        hashes = _read_hashes(seg, seg.length)
        ts = index.read(seg.base, seg.end)["ts"] if seg.length else np.zeros(1, np.int64)
        order = np.argsort(hashes, kind="stable").astype(HASH)
        body = np.ascontiguousarray(hashes[order]).tobytes() + order.tobytes()
        head = KS_HEADER.pack(KS_MAGIC, KS_VERSION, 0, seg.length, int(ts.min()),
                              int(ts.max()), crc32(body))
        path = self.dir / segment_name(seg.base, KS_SUFFIX)
        tmp = path.with_suffix(".ks.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, head)
                view = memoryview(body)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            fsync_dir(self.dir)
        except OSError as exc:
            raise StorageError(f"key index write failed in {path}: {exc}",
                               path=str(path)) from exc

    def truncate(self, start: int, end: int) -> None:
        """Keep only the hashes of [start, end): follow a cut of the index (truncation or
        reset, storage/cuts.py), or, on open, drop hashes the last checkpoint did not cover
        (they may not have reached the disk: rebuilt from the data log). A segment that
        becomes the last one loses its sorted file."""
        segs = self._list
        while segs.segs and (segs.segs[-1].base >= end or segs.segs[-1].base < start):
            self._drop_sorted(segs.segs[-1].base)
            segs.drop_newest(keep_fd=True)
        if not segs.segs:
            segs.empty_end = start
            return
        seg = segs.segs[-1]
        self._drop_sorted(seg.base)
        if seg.end > end:
            with seg.use() as fd:
                os.ftruncate(fd, (end - seg.base) * HASH.itemsize)
                seg.length = end - seg.base
                os.fsync(fd)

    def delete_before(self, start: int) -> None:
        """Retention removed the index segments below ``start``: their key files go too."""
        segs = self._list.segs
        doomed = sum(1 for s in segs[:-1] if s.base < start)
        gone = [s.base for s in segs[:doomed]]
        self._list.drop_oldest(doomed)
        for base in gone:
            self._drop_sorted(base)

    def sync(self) -> None:
        for seg in self._list.segs[-2:]:
            with seg.use() as fd:
                os.fsync(fd)

    def close(self) -> None:
        self._list.close()
        with self._maps_lock:
            self._maps = {}

    # ---------------------------------------------------------------- reading

    def candidates(self, h: int, first: int, last: int, since_ms: int | None,
                   until_ms: int | None) -> np.ndarray:
        """Offsets in [first, last) whose key hash is ``h`` (ascending), skipping sealed
        segments whose records all lie outside [since_ms, until_ms]."""
        segs = self._list.segs
        out = []
        for i, seg in enumerate(segs):
            length = seg.length
            if seg.base + length <= first or seg.base >= last:
                continue
            if i < len(segs) - 1:
                found = self._sealed(seg, h, since_ms, until_ms)
            else:
                found = np.flatnonzero(_read_hashes(seg, length) == HASH.type(h)) + seg.base
            if found is not None and len(found):
                out.append(found[(found >= first) & (found < last)])
        return np.concatenate(out) if out else np.empty(0, np.int64)

    def _sealed(self, seg: Segment, h: int, since_ms: int | None,
                until_ms: int | None) -> np.ndarray | None:
        sorted_ = self._sorted(seg)
        if sorted_ is None:  # retention deleted it while we looked: below earliest now
            return None
        if (since_ms is not None and sorted_.max_ts < since_ms) or \
                (until_ms is not None and sorted_.min_ts > until_ms):
            return None
        # The needle as a uint32: a Python int makes numpy cast the whole haystack first
        # (1.7 ms against 5 us per search of a million hashes, numpy 2.4).
        needle = np.array([h], HASH)
        lo = int(np.searchsorted(sorted_.hashes, needle, "left")[0])
        hi = int(np.searchsorted(sorted_.hashes, needle, "right")[0])
        return sorted_.entry[lo:hi].astype(np.int64) + seg.base

    def _sorted(self, seg: Segment) -> _Sorted | None:
        got = self._maps.get(seg.base)
        if got is not None:
            return got
        path = self.dir / segment_name(seg.base, KS_SUFFIX)
        try:
            got = _Sorted.open(path, seg.length)
        except FileNotFoundError:
            return None
        with self._maps_lock:
            self._maps = {**self._maps, seg.base: got}
        return got

    # --------------------------------------------------------------- recovery

    def _align(self, index: IndexLog) -> None:
        """Keep the longest prefix of key segments that mirrors the index (module docstring);
        check every sealed segment's sorted file; remove files of no segment."""
        idx = index.segment_bases()
        segs = self._list
        below = sum(1 for s in segs.segs if s.base < index.start)  # retention's leftovers
        if below == len(segs.segs):
            while segs.segs:
                segs.drop_newest()
        else:
            segs.drop_oldest(below)
        keep = 0
        for i, seg in enumerate(segs.segs):
            full = i == 0 or segs.segs[i - 1].length == idx.get(segs.segs[i - 1].base, -1)
            if seg.base not in idx or not full or (i == 0 and seg.base != index.start):
                break
            keep = i + 1
        while len(segs.segs) > keep:
            segs.drop_newest()
        if not segs.segs:
            segs.empty_end = index.start
        else:
            last = segs.segs[-1]
            if last.length > idx[last.base]:
                with last.use() as fd:
                    os.ftruncate(fd, idx[last.base] * HASH.itemsize)
                last.length = idx[last.base]
        live = {s.base for s in segs.segs[:-1]}
        for path in self.dir.glob(f"*{KS_SUFFIX}*"):
            base = path.name.split(".")[0]
            if not base.isdigit() or int(base) not in live or path.name.endswith(".tmp"):
                path.unlink(missing_ok=True)
        for seg in segs.segs[:-1]:
            try:
                _Sorted.open(self.dir / segment_name(seg.base, KS_SUFFIX), seg.length,
                             check=True)
            except (FileNotFoundError, CorruptRecord):
                self._seal(seg, index)

    def _drop_sorted(self, base: int) -> None:
        with self._maps_lock:
            self._maps = {b: m for b, m in self._maps.items() if b != base}
        (self.dir / segment_name(base, KS_SUFFIX)).unlink(missing_ok=True)


class _Sorted:
    """A sealed segment's ``.ks``, memory-mapped (read-only; the mapping outlives an unlink)."""

    __slots__ = ("hashes", "entry", "min_ts", "max_ts", "_mm")

    def __init__(self, mm: mmap.mmap, count: int, min_ts: int, max_ts: int) -> None:
        self._mm = mm
        self.hashes = np.frombuffer(mm, HASH, count, KS_HEADER.size)
        self.entry = np.frombuffer(mm, HASH, count, KS_HEADER.size + 4 * count)
        self.min_ts, self.max_ts = min_ts, max_ts

    @classmethod
    def open(cls, path: Path, count: int, check: bool = False) -> _Sorted:
        """Map ``path``; CorruptRecord when its header or size (and with ``check`` its CRC)
        does not hold ``count`` entries."""
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size != KS_HEADER.size + 8 * count:
                raise CorruptRecord(f"key index {path}: {size} bytes, not {count} entries")
            if count == 0:
                mm = mmap.mmap(-1, KS_HEADER.size)
                mm.write(f.read(KS_HEADER.size))
            else:
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        magic, version, _r, n, min_ts, max_ts, crc = KS_HEADER.unpack_from(mm, 0)
        if magic != KS_MAGIC or version != KS_VERSION or n != count:
            raise CorruptRecord(f"key index {path}: bad header")
        if check and crc32(memoryview(mm)[KS_HEADER.size:]) != crc:
            raise CorruptRecord(f"key index {path}: CRC mismatch")
        return cls(mm, count, min_ts, max_ts)


def _hashes_from(entries: np.ndarray, fetch: Fetch, data_start: int) -> np.ndarray:
    """Key hashes of ``entries``, reading their frames in spans of at most CATCH_UP_BYTES."""
    out = np.zeros(len(entries), HASH)
    pos = entries["pos"].astype(np.int64)
    sizes = entries["size"].astype(np.int64)
    live = np.flatnonzero((sizes > 0) & (pos >= data_start))
    i = 0
    while i < len(live):
        lo = int(pos[live[i]])
        j = int(np.searchsorted(pos[live], lo + CATCH_UP_BYTES, "left"))
        j = max(j, i + 1)
        pick = live[i:j]
        hi = int(pos[pick[-1]] + sizes[pick[-1]])
        try:
            buf = fetch(lo, hi - lo)
        except (CorruptRecord, StorageError, OSError) as exc:
            # Data the index points at cannot be read (damaged, set aside): those records are
            # not served either; their hashes stay 0 rather than the store failing to open.
            event(log, "store.key_index_unreadable", logging.ERROR, position=lo,
                  bytes=hi - lo, error=str(exc))
        else:
            out[pick] = hash_keys(buf, pos[pick] - lo, sizes[pick])
        i = j
    return out


def _read_hashes(seg: Segment, length: int) -> np.ndarray:
    want = length * HASH.itemsize
    with seg.use() as fd:
        raw = os.pread(fd, want, 0)
    if len(raw) != want:
        raise CorruptRecord(f"key index {seg.path} is shorter than its {length} entries")
    return np.frombuffer(raw, HASH)


def _hashes_in(path: Path) -> int:
    """Hashes in a ``.kh`` file, cutting a torn partial one off its tail first."""
    size = path.stat().st_size
    if size % HASH.itemsize:
        os.truncate(path, size - size % HASH.itemsize)
    return size // HASH.itemsize
