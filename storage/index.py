"""Per-partition index log: fixed-size numpy entries, offset n is entry n - base.

Owned by one :class:`~storage.store.Store`, which serialises writers; reads may run
concurrently with appends (they only look at entries below the end they were given).
"""
from __future__ import annotations

import bisect
import os
from pathlib import Path

import numpy as np

from lib.errors import CorruptRecord, OffsetOutOfRange, StorageError
from storage.fsutil import fsync_dir, list_segments, quarantine, segment_name

INDEX_DTYPE = np.dtype([("pos", "<u8"), ("size", "<u4"), ("tag", "<u4"), ("ts", "<i8")])
ENTRY = INDEX_DTYPE.itemsize  # 24
SUFFIX = ".idx"


class _Segment:
    __slots__ = ("base", "path", "count", "fd")

    def __init__(self, base: int, path: Path, count: int, fd: int) -> None:
        self.base, self.path, self.count, self.fd = base, path, count, fd

    @property
    def end(self) -> int:
        return self.base + self.count


class IndexLog:
    """Segmented index of one partition (``p<partition>/<20-digit base offset>.idx``)."""

    def __init__(self, directory: Path, max_entries: int) -> None:
        self.dir = directory
        self.max_entries = max_entries
        directory.mkdir(parents=True, exist_ok=True)
        # Replaced, never mutated in place, so a reader holding the old list stays consistent;
        # fds of removed segments wait in the graveyard until the next removal or close.
        self._segs: list[_Segment] = []
        self._graveyard: list[_Segment] = []
        self._next_base = 0
        for base, path in list_segments(directory, SUFFIX):
            if self._segs and base != self._segs[-1].end:
                # A gap or an overlap (an older segment damaged, lost or grown): offsets from
                # here on cannot be trusted. Set the rest aside; recovery rebuilds the index
                # from the data log since it now ends short of the checkpoint.
                quarantine(path)
                continue
            size = path.stat().st_size
            if size % ENTRY:  # torn tail of a partial entry write
                os.truncate(path, size - size % ENTRY)
            self._open(base, path, size // ENTRY)
        if self._segs:
            self._next_base = self._segs[-1].end

    def _open(self, base: int, path: Path, count: int) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self._segs = [*self._segs, _Segment(base, path, count, fd)]

    @property
    def start(self) -> int:
        return self._segs[0].base if self._segs else self._next_base

    @property
    def end(self) -> int:
        return self._segs[-1].end if self._segs else self._next_base

    def append(self, entries: np.ndarray) -> None:
        """Write entries at the end (rolling segments at ``max_entries``).

        ``end`` counts only entries whose bytes were all written: after a failure (ENOSPC)
        the caller appends ``entries[end - first:]`` again and the result is exact.
        """
        done = 0
        while done < len(entries):
            seg = self._segs[-1] if self._segs else None
            if seg is None or seg.count >= self.max_entries:
                seg = self._roll()
            n = min(len(entries) - done, self.max_entries - seg.count)
            data = memoryview(np.ascontiguousarray(entries[done:done + n])).cast("B")
            at = seg.count * ENTRY
            try:
                written = 0
                while written < len(data):
                    written += os.pwrite(seg.fd, data[written:], at + written)
            except OSError as exc:
                raise StorageError(f"index write failed in {seg.path}: {exc}") from exc
            seg.count += n
            done += n

    def _roll(self) -> _Segment:
        """Start a new segment at ``end``; on failure nothing changed and it can be retried."""
        base = self.end
        if self._segs:  # the full segment will not change again: make it durable once
            os.fsync(self._segs[-1].fd)
        path = self.dir / segment_name(base, SUFFIX)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fsync_dir(self.dir)
        except OSError:
            os.close(fd)  # the empty file is reused by the retry (no O_EXCL here)
            raise
        self._segs = [*self._segs, _Segment(base, path, 0, fd)]
        return self._segs[-1]

    def read(self, first: int, last: int) -> np.ndarray:
        """Entries for offsets [first, last); the caller keeps the range inside [start, end)."""
        parts = []
        segs = self._segs
        if segs and first < segs[0].base:
            raise OffsetOutOfRange(f"offset {first} is below this index (starts at {segs[0].base})",
                                   offset=first, earliest=segs[0].base)
        i = max(0, bisect.bisect_right([s.base for s in segs], first) - 1)
        while first < last and i < len(segs):
            seg = segs[i]
            stop = min(last, seg.end)
            if stop > first:
                want = (stop - first) * ENTRY
                raw = os.pread(seg.fd, want, (first - seg.base) * ENTRY)
                if len(raw) != want:
                    raise CorruptRecord(f"index {seg.path} is shorter than its entry count")
                parts.append(np.frombuffer(raw, INDEX_DTYPE))
                first = stop
            i += 1
        if not parts:
            return np.empty(0, INDEX_DTYPE)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def last_entry(self) -> np.ndarray | None:
        return self.read(self.end - 1, self.end)[0] if self.end > self.start else None

    def truncate(self, end: int) -> None:
        """Drop every entry at offset >= end (recovery); whole later segments are removed."""
        while self._segs and self._segs[-1].base >= end:
            self._drop_last()
        if not self._segs:
            self._next_base = end
            return
        seg = self._segs[-1]
        keep = end - seg.base
        if keep < seg.count:
            os.ftruncate(seg.fd, keep * ENTRY)
            seg.count = keep

    def sanitize_tail(self, data_end: int) -> None:
        """Cut the last segment at the first entry that is out of order or past ``data_end``.

        Catches torn or garbage index tails; older segments were fsynced when they rolled.
        """
        if not self._segs or self._segs[-1].count == 0:
            return
        seg = self._segs[-1]
        entries = self.read(seg.base, seg.end)
        pos = entries["pos"].astype(np.uint64)
        ends = pos + entries["size"].astype(np.uint64)
        bad = ends > np.uint64(data_end)
        # An entry never starts before the previous one ends (holes have size 0 and may share
        # a position with the entry after them).
        bad[1:] |= pos[1:] < ends[:-1]
        if len(self._segs) > 1:
            prev = self.read(seg.base - 1, seg.base)[0]
            bad[0] |= int(pos[0]) < int(prev["pos"]) + int(prev["size"])
        if bad.any():
            self.truncate(seg.base + int(np.argmax(bad)))

    def first_at_or_after(self, position: int) -> int:
        """Lowest offset whose data position is >= ``position`` (positions grow with offsets)."""
        lo, hi = self.start, self.end
        while lo < hi:
            mid = (lo + hi) // 2
            if int(self.read(mid, mid + 1)["pos"][0]) >= position:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _drop_last(self) -> None:
        seg = self._segs[-1]
        self._segs = self._segs[:-1]
        os.close(seg.fd)
        seg.path.unlink(missing_ok=True)
        self._next_base = seg.base

    def reset(self, base: int) -> None:
        """Forget every entry and continue at ``base`` (recovery found no valid entry)."""
        while self._segs:
            self._drop_last()
        self._next_base = base
        fsync_dir(self.dir)

    def delete_before(self, offset: int) -> int:
        """Remove whole segments that hold only offsets below ``offset``; returns how many."""
        segs = self._segs
        removed = 0
        while len(segs) - removed > 1 and segs[removed + 1].base <= offset:
            removed += 1
        if removed:
            for seg in self._graveyard:
                os.close(seg.fd)
            self._graveyard = segs[:removed]
            self._segs = segs[removed:]
            for seg in self._graveyard:
                seg.path.unlink(missing_ok=True)
            fsync_dir(self.dir)
        return removed

    def sync(self) -> None:
        for seg in self._segs[-2:]:  # older segments were synced when they rolled
            os.fsync(seg.fd)

    def close(self) -> None:
        for seg in self._segs + self._graveyard:
            os.close(seg.fd)
        self._segs, self._graveyard = [], []
