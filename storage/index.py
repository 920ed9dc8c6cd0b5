"""Per-partition index log: fixed-size numpy entries, offset n is entry n - base.

Owned by one partition's log (storage/partition_log.py), whose store serialises writers;
reads may run concurrently with appends (they only look at entries below the end they were
given). :func:`index_entries` builds a batch's entries.
"""
from __future__ import annotations

import bisect
import os
from pathlib import Path

import numpy as np

from lib.errors import CorruptRecord, OffsetOutOfRange
from lib.records import BatchView, frame_starts
from storage.fsutil import fsync_dir
from storage.segments import Segment, SegmentedLog, SegmentList, pwrite_all

INDEX_DTYPE = np.dtype([("pos", "<u8"), ("size", "<u4"), ("tag", "<u4"), ("ts", "<i8")])
ENTRY = INDEX_DTYPE.itemsize  # 24
SUFFIX = ".idx"


class IndexLog(SegmentedLog):
    """Segmented index of one partition (``p<partition>/<20-digit base offset>.idx``); a
    segment's length is in entries (the shared life cycle is
    :class:`~storage.segments.SegmentList`).

    A segment after a gap or an overlap (an older one damaged, lost or grown) is set aside:
    offsets from there on cannot be trusted, and recovery rebuilds the index from the data log
    since it now ends short of the checkpoint.
    """

    def __init__(self, directory: Path, max_entries: int) -> None:
        self.dir = directory
        self.max_entries = max_entries
        self._list = SegmentList(directory, SUFFIX, _entries_in)
        # Record bytes summed per segment as base -> (first, last, total): a sealed segment is
        # read once, the active one only past what was summed before (see record_bytes).
        self._tally: dict[int, tuple[int, int, int]] = {}
        # Odd while a cut (truncate, reset) runs, bumped again after it: a reader whose pread
        # came back short, and who started during a cut or saw this move, raced the cut
        # (OffsetOutOfRange), it did not read a damaged file.
        self._cuts = 0

    def append(self, entries: np.ndarray) -> None:
        """Write entries at the end (rolling segments at ``max_entries``).

        ``end`` counts only entries whose bytes were all written: after a failure (ENOSPC)
        the caller appends ``entries[end - first:]`` again and the result is exact.
        """
        done = 0
        while done < len(entries):
            seg = self._list.active
            if seg is None or seg.length >= self.max_entries:
                seg = self._list.roll()
            n = min(len(entries) - done, self.max_entries - seg.length)
            part = np.ascontiguousarray(entries[done:done + n])
            pwrite_all(seg, memoryview(part).cast("B"), seg.length * ENTRY, "index")
            self._tally_appended(seg, part)
            seg.length += n
            done += n

    def _tally_appended(self, seg: Segment, part: np.ndarray) -> None:
        """Extend the segment's record-byte sum by entries just written past its end, so the
        heartbeat's :meth:`record_bytes` reads no file for them (at 10,000 partitions it read
        10,000 index files a second). A sum that does not end at the old end is left for
        record_bytes to redo; each stored sum stays exact for its range, whoever wrote it."""
        lo, hi, summed = self._tally.get(seg.base, (seg.base, seg.base, 0))
        if hi == seg.end:
            self._tally[seg.base] = (lo, hi + len(part),
                                     summed + int(part["size"].sum(dtype=np.uint64)))

    def read(self, first: int, last: int) -> np.ndarray:
        """Entries for offsets [first, last); the caller keeps the range inside [start, end)."""
        cuts = self._cuts
        parts = []
        segs = self._list.segs
        if segs and first < segs[0].base:
            raise OffsetOutOfRange(f"offset {first} is below this index (starts at {segs[0].base})",
                                   offset=first, earliest=segs[0].base)
        i = max(0, bisect.bisect_right([s.base for s in segs], first) - 1)
        while first < last and i < len(segs):
            seg = segs[i]
            if first < seg.base:  # the one before ended short: a cut shortened it meanwhile
                raise self._short(segs[i - 1], first, cuts)
            stop = min(last, seg.end)
            if stop > first:
                got = _read_segment(seg, first, stop)
                if got is None:
                    raise self._short(seg, first, cuts)
                parts.append(got)
                first = stop
            i += 1
        if not parts:
            return np.empty(0, INDEX_DTYPE)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _short(self, seg: Segment, first: int, cuts: int) -> OffsetOutOfRange | CorruptRecord:
        """What a short read of ``seg`` means: a cut raced it, or the file is damaged."""
        if cuts % 2 or self._cuts != cuts:
            return OffsetOutOfRange(f"offset {first} was truncated away while being read",
                                    offset=first, earliest=self.start, latest=self.end)
        return CorruptRecord(f"index {seg.path} is shorter than its entry count")

    def record_bytes(self, first: int, last: int) -> int:
        """Bytes the records of offsets [first, last) take in the data log.

        Asked every heartbeat for every partition, so each segment's sum is remembered and
        only entries appended since are read. Called outside the store's lock: retention may
        drop the segments it iterates over, whose files stay open until the next drop, so each
        is read through its own descriptor rather than looked up again.
        """
        total = 0
        for seg in self._list.segs:
            lo, hi = max(first, seg.base), min(last, seg.end)
            if lo >= hi:
                continue
            was_lo, was_hi, summed = self._tally.get(seg.base, (lo, lo, 0))
            if was_lo != lo or was_hi > hi:
                was_hi, summed = lo, 0
            if hi > was_hi:
                got = _read_segment(seg, was_hi, hi)
                if got is None:  # cut meanwhile: counted again on the next call
                    self._tally.pop(seg.base, None)
                    continue
                summed += int(got["size"].sum(dtype=np.uint64))
            self._tally[seg.base] = (lo, hi, summed)
            total += summed
        live = {seg.base for seg in self._list.segs}
        for base in [b for b in self._tally if b not in live]:
            del self._tally[base]
        return total

    def segment_bases(self) -> dict[int, int]:
        """Each segment's base -> its length in entries (the key files mirror them)."""
        return {seg.base: seg.length for seg in self._list.segs}

    def segment_of(self, offset: int) -> tuple[int, int]:
        """(base, end) of the segment holding ``offset`` (start <= offset < end)."""
        segs = self._list.segs
        seg = segs[max(0, bisect.bisect_right([s.base for s in segs], offset) - 1)]
        return seg.base, seg.end

    def last_entry(self) -> np.ndarray | None:
        return self.read(self.end - 1, self.end)[0] if self.end > self.start else None

    def truncate(self, end: int, keep_fds: bool = False) -> None:
        """Drop every entry at offset >= end; whole later segments are removed.

        Recovery (alone) closes their fds at once; a live store truncating a partition
        passes ``keep_fds``: readers may still hold them (``SegmentList.drop_newest``).
        """
        self._cuts += 1
        try:
            self._tally.clear()
            segs = self._list
            while segs.segs and segs.segs[-1].base >= end:
                segs.drop_newest(keep_fds)
            if not segs.segs:
                segs.empty_end = end
                return
            seg = segs.segs[-1]
            keep = end - seg.base
            if keep < seg.length:
                with seg.use() as fd:
                    os.ftruncate(fd, keep * ENTRY)
                seg.length = keep
        finally:
            self._cuts += 1

    def sanitize_tail(self, data_end: int) -> None:
        """Cut the last segment at the first entry that is out of order or past ``data_end``.

        Catches torn or garbage index tails; older segments were fsynced when they rolled.
        """
        segs = self._list.segs
        if not segs or segs[-1].length == 0:
            return
        seg = segs[-1]
        entries = self.read(seg.base, seg.end)
        pos = entries["pos"].astype(np.uint64)
        ends = pos + entries["size"].astype(np.uint64)
        bad = ends > np.uint64(data_end)
        # An entry never starts before the previous one ends (holes have size 0 and may share
        # a position with the entry after them).
        bad[1:] |= pos[1:] < ends[:-1]
        if len(segs) > 1:
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

    def reset(self, base: int, keep_fds: bool = False) -> None:
        """Forget every entry and continue at ``base`` (recovery found no valid entry, or a
        store reset the partition: ``keep_fds`` as in :meth:`truncate`)."""
        self._cuts += 1
        try:
            self._tally.clear()
            while self._list.segs:
                self._list.drop_newest(keep_fds)
            self._list.empty_end = base
        finally:
            self._cuts += 1
        fsync_dir(self.dir)

    def open_first_segment(self) -> None:
        """An empty index's first segment file, made now (storage/partition_log.py,
        ``_open_first_files``)."""
        if not self._list.segs:
            self._list.roll()

    def keep_end(self) -> None:
        """Make an empty index's end survive a reopen: an empty segment file named by it.

        Without one a reopened empty index ends at 0, and recovery has to find in the data
        log where the partition continues (a reset or truncation marker: a full scan, and
        retention may have deleted the marker by then).
        """
        if not self._list.segs and self._list.empty_end > 0:
            self._list.roll()

    def delete_before(self, offset: int) -> int:
        """Remove whole segments that hold only offsets below ``offset``; returns how many."""
        segs = self._list.segs
        doomed = 0
        while len(segs) - doomed > 1 and segs[doomed + 1].base <= offset:
            doomed += 1
        return self._list.drop_oldest(doomed)

    def sync(self) -> None:
        for seg in self._list.segs[-2:]:  # older segments were synced when they rolled
            with seg.use() as fd:
                os.fsync(fd)


def _read_segment(seg: Segment, first: int, stop: int) -> np.ndarray | None:
    """Entries [first, stop) of one segment (the caller keeps them inside it); None when the
    file holds fewer (the caller says why)."""
    want = (stop - first) * ENTRY
    fd = seg.pin()
    try:
        raw = os.pread(fd, want, (first - seg.base) * ENTRY)
    finally:
        seg.unpin()
    if len(raw) != want:
        return None
    return np.frombuffer(raw, INDEX_DTYPE)


def _entries_in(path: Path) -> int:
    """Entries in an index file, cutting a torn partial entry off its tail first."""
    size = path.stat().st_size
    if size % ENTRY:
        os.truncate(path, size - size % ENTRY)
    return size // ENTRY


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
