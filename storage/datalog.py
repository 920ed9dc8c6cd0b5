"""The data log of a store: append-only segments shared by all partitions of the store.

Positions are logical bytes across segments (a segment is named by the position of its first
byte), so an index entry's position never changes when segments roll or are deleted. The log
is a sequence of *chunks*, one per appended batch::

    magic "TQCH" | partition u32 | count u32 | base_offset i64 | frames_len u32
    | leader_epoch u32 | crc u32 (of the 28 bytes before it) | frames ...

so that recovery can rebuild every partition's index from the data log alone. A chunk of an
idempotent producer's batch has the producer's fields too (version 2, magic "TQC2")::

    magic "TQC2" | partition u32 | count u32 | base_offset i64 | frames_len u32
    | leader_epoch u32 | producer_id i64 | producer_epoch i16 | attrs u16
    | base_sequence i32 | crc u32 (of the 44 bytes before it) | frames ...

so that a broker rebuilds its producers' de-duplication windows from its own files
(storage/producers.py); other chunks keep the 32-byte header. ``leader_epoch``
is the epoch of the leader that assigned the chunk's offsets (replication; storage/epochs.py);
0 means none, which is also how chunks written before the field existed (reserved, always 0)
read. A chunk with no records (count 0, frames_len 0) is a *marker*: the partition's log was
truncated or reset to ``base_offset`` (the old frames of a shared log cannot be removed, so
recovery replays the marker over them; storage/recovery.py). One writer (the store's
flusher); readers may run at the same time and only read below the flushed end.
"""
from __future__ import annotations

import math
import mmap
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lib.errors import CorruptRecord, StorageError
from lib.records import STORED_FLAGS, frame_columns, frame_sizes, frame_starts
from storage.direct import pread_direct
from storage.index import INDEX_DTYPE
from storage.segments import Segment, SegmentedLog, SegmentList, pwrite_all

CHUNK = struct.Struct("<4sIIqIII")
CHUNK_MAGIC = b"TQCH"
PRODUCER_CHUNK = struct.Struct("<4sIIqIIqhHiI")
PRODUCER_MAGIC = b"TQC2"
SUFFIX = ".log"
DROP_ALIGN = 2 << 20  # drop_cached lets go of whole 2 MiB units (a huge folio)
PAGE = mmap.PAGESIZE


ATTR_TXN = 0x01  # the batch belongs to its producer's open transaction
ATTR_CONTROL = 0x02  # a transaction marker (one control record): ends the open transaction
ATTR_COMMIT = 0x04  # ... by committing it (else aborting it)


@dataclass(frozen=True)
class ProducerFields:
    """An idempotent producer's batch, as its chunk header carries it (``attrs``: ATTR_*)."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    attrs: int = 0


def chunk_header(partition: int, count: int, base_offset: int, frames_len: int,
                 leader_epoch: int = 0, producer: ProducerFields | None = None) -> bytes:
    """The header of a chunk (module docstring); its CRC covers every field, the epoch too."""
    if producer is None:
        head = CHUNK.pack(CHUNK_MAGIC, partition, count, base_offset, frames_len, leader_epoch,
                          0)
    else:
        head = PRODUCER_CHUNK.pack(PRODUCER_MAGIC, partition, count, base_offset, frames_len,
                                   leader_epoch, producer.producer_id, producer.producer_epoch,
                                   producer.attrs, producer.base_sequence, 0)
    return head[:-4] + struct.pack("<I", zlib.crc32(head[:-4]))


def header_size(producer: ProducerFields | None) -> int:
    return CHUNK.size if producer is None else PRODUCER_CHUNK.size


@dataclass(frozen=True)
class ChunkHead:
    partition: int
    count: int
    base_offset: int
    frames_len: int
    leader_epoch: int
    size: int  # of the header: 32, or 48 with producer fields
    producer: ProducerFields | None


@dataclass(frozen=True)
class ScannedChunk:
    partition: int
    base_offset: int
    entries: np.ndarray  # INDEX_DTYPE, one per frame (holes for a damaged chunk; none: a marker)
    frames_len: int
    leader_epoch: int
    frames_pos: int  # data position right after the header: where the frames (would) start
    header_size: int = CHUNK.size
    producer: ProducerFields | None = None

    @property
    def position(self) -> int:
        """Where the chunk's header starts."""
        return self.frames_pos - self.header_size

    @property
    def end(self) -> int:
        """The data position right after the chunk."""
        return self.frames_pos + self.frames_len


@dataclass(frozen=True)
class Damage:
    """Bytes of the data log that recovery could not index, and why (logged by recovery)."""

    position: int
    length: int
    reason: str
    cut: bool = False  # True: the bytes were truncated away (the tail), else left in place
    partition: int = -1  # known when the damaged chunk's header was intact
    base_offset: int = -1
    count: int = 0


class DataLog(SegmentedLog):
    """Segmented data log in ``directory`` (``<20-digit base position>.log``); a segment's
    length is in bytes (the shared life cycle is :class:`~storage.segments.SegmentList`)."""

    def __init__(self, directory: Path, segment_bytes: int) -> None:
        self.dir = directory
        self.segment_bytes = segment_bytes
        self._list = SegmentList(directory, SUFFIX, lambda path: path.stat().st_size)
        self._dirty = False
        self._uncached = self._list.start  # below this, the page cache was told to let go

    def size_bytes(self) -> int:
        return self.end - self.start

    def write(self, data: memoryview) -> None:
        """Append ``data`` at the end in one write (rolls first when the segment is full).

        On failure (e.g. ENOSPC) ``end`` is unchanged: bytes that did reach the file lie past
        the end and are overwritten by the next write, so a retry of the same data is exact.
        """
        seg = self._list.active
        if seg is None or seg.length >= self.segment_bytes:
            seg = self._list.roll()
        pwrite_all(seg, data, seg.length, "data")
        seg.length += len(data)
        self._dirty = True

    def open_first_segment(self) -> None:
        """An empty log's first segment file, made now (storage/partition_log.py,
        ``_open_first_files``)."""
        if self._list.active is None:
            self._list.roll()

    def sync(self) -> None:
        """fdatasync the active segment (rolled ones were synced when they rolled).

        A failed sync leaves the log dirty, so the next call syncs again.
        """
        seg = self._list.active
        if seg is not None and self._dirty:
            try:
                with seg.use() as fd:
                    os.fdatasync(fd)
            except OSError as exc:
                raise StorageError(f"fsync failed on {seg.path}: {exc}") from exc
            self._dirty = False

    @property
    def uncached(self) -> int:
        """Below this position the page cache was told to let go (:meth:`drop_cached`)."""
        return self._uncached

    def drop_cached(self, below: int, whole: bool = True) -> None:
        """Let the kernel drop the page-cache pages of bytes before ``below`` (already synced).

        Why: a page the page cache has never held costs several times its copy to fill on a
        VM (the hypervisor backs it on first touch); pages dropped behind the writer are
        reused by its next writes. Only clean pages go, so call it after :meth:`sync`. Inside
        a file only whole ``DROP_ALIGN`` units go: the kernel keeps a large folio that the
        range covers only in part, and the next range would start past it. ``whole=False``
        (a store keeping less than a unit: many stores share the page cache) drops whole
        pages instead, each time from the start of the unit the last range ended in, so a
        folio kept then goes with a later range.
        """
        if not hasattr(os, "posix_fadvise"):  # macOS: the kernel decides alone
            return
        segs = self._list.segs
        for seg in segs:
            lo, hi = max(seg.base, self._uncached), min(seg.end, below)
            if not whole:  # whole pages, and again from the unit a kept folio may straddle
                lo = max(seg.base, seg.base + (lo - seg.base) // DROP_ALIGN * DROP_ALIGN)
                hi = seg.base + (hi - seg.base) // PAGE * PAGE
            elif hi < seg.end or seg is segs[-1]:
                hi = seg.base + (hi - seg.base) // DROP_ALIGN * DROP_ALIGN
            if lo < hi:
                with seg.use() as fd:
                    os.posix_fadvise(fd, lo - seg.base, hi - lo, os.POSIX_FADV_DONTNEED)
                self._uncached = max(self._uncached, hi)

    def read(self, position: int, length: int) -> bytes:
        """Bytes [position, position + length); may span segments. Bytes the page cache
        window dropped are read with O_DIRECT (storage/direct.py: why)."""
        segs = self._list.segs
        parts = []
        for seg in segs:
            if length <= 0:
                break
            end = seg.end  # once: a truncation may shorten the segment while we read
            if end <= position:
                continue
            if seg.base > position:
                raise CorruptRecord(f"data at position {position} is missing (deleted or damaged)")
            n = min(length, end - position)
            raw = None
            fd = seg.pin()
            try:
                if position + n <= self._uncached:  # dropped from the page cache: around it
                    raw = pread_direct(fd, n, position - seg.base)
                if raw is None:
                    raw = os.pread(fd, n, position - seg.base)
            finally:
                seg.unpin()
            if len(raw) != n:
                raise CorruptRecord(f"data segment {seg.path} is shorter than expected")
            parts.append(raw)
            position += n
            length -= n
        if length > 0:
            raise CorruptRecord(f"data at position {position} is beyond the end of the log")
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def read_scattered(self, spans: list[tuple[int, int]]) -> list[bytes]:
        """Small reads at scattered positions (a key lookup's frames): every span is asked of
        the kernel first (``POSIX_FADV_WILLNEED`` starts its disk read and returns), then
        read through the page cache, so N cold reads wait about one disk read, not N
        (measured on the development VM: ten O_DIRECT reads one after another, 30 ms at p50;
        threads to run them side by side cost more than they saved while the data was
        cached). The few pages stay cached until the kernel needs them."""
        segs = self._list.segs
        where = []
        for position, length in spans:
            seg = next((s for s in segs if s.base <= position < s.end), None)
            if seg is None or position + length > seg.end:
                raise CorruptRecord(f"data at position {position} is missing (deleted or "
                                    f"damaged)")
            where.append((seg, position - seg.base, length))
        pinned: dict[Segment, int] = {}
        for seg, _, _ in where:
            if seg not in pinned:
                pinned[seg] = seg.pin()
        try:
            if len(spans) > 1 and hasattr(os, "posix_fadvise"):  # cheap where cached
                for seg, at, length in where:
                    os.posix_fadvise(pinned[seg], at, length, os.POSIX_FADV_WILLNEED)
            out = [os.pread(pinned[seg], length, at) for seg, at, length in where]
        finally:
            for seg in pinned:
                seg.unpin()
        if any(len(raw) != length for raw, (_s, _a, length) in zip(out, where, strict=True)):
            raise CorruptRecord(f"a data segment of {self.dir} is shorter than expected")
        return out

    def delete_oldest(self, count: int) -> None:
        """Delete the ``count`` oldest segments (never the active one)."""
        self._list.drop_oldest(count)

    def segment_info(self) -> list[tuple[int, int, float]]:
        """(base, size, mtime) of every segment, oldest first. The active (last) segment's
        mtime is not read (inf): retention never deletes it, and a ``stat`` is a system call
        that lets the GIL go (storage/held_write.py): at 10,000 topics one per store's
        retention check was 6 % of the flushers' time."""
        segs = self._list.segs
        return [(s.base, s.length, _mtime(s) if i < len(segs) - 1 else math.inf)
                for i, s in enumerate(segs)]

    def scan(self, position: int) -> tuple[list[ScannedChunk], list[Damage]]:
        """Validate chunks from ``position`` to the end; returns them and what was damaged.

        Runs on open only (a per-frame loop is fine here). A bad chunk costs only itself: one
        whose header is intact comes back as *holes* (size-0 index entries that keep its
        offsets taken; readers skip them), and after a damaged header the scan resumes at the
        next valid chunk of the segment. Only a damaged tail with nothing valid after it is
        cut from the log. Damage is set aside and reported, never fatal.
        """
        chunks: list[ScannedChunk] = []
        damage: list[Damage] = []
        segs = self._list.segs
        for i, seg in enumerate(segs):
            if seg.end <= position:
                continue
            local = max(0, position - seg.base)
            last = i == len(segs) - 1
            good = _scan_segment(seg, local, chunks, damage, last)
            if good < seg.length:
                if last:
                    damage.append(Damage(seg.base + good, seg.length - good, "torn or corrupt "
                                         "tail with no valid chunk after it: cut", cut=True))
                    self._cut(i, good)
                else:  # positions of later segments are fixed: skip the bytes, keep them
                    damage.append(Damage(seg.base + good, seg.length - good,
                                         "no valid chunk after it in its segment: skipped"))
        return chunks, damage

    def _cut(self, index: int, keep: int) -> None:
        seg = self._list.segs[index]
        with seg.use() as fd:
            os.ftruncate(fd, keep)
            os.fsync(fd)
        seg.length = keep


def _scan_segment(seg: Segment, local: int, out: list[ScannedChunk],
                  damage: list[Damage], last: bool) -> int:
    """Append the chunks of ``seg`` from byte ``local`` to ``out`` and report damaged bytes in
    ``damage``; return where the last valid chunk ends.

    A damaged chunk with an intact header between valid chunks becomes holes; after the last
    valid chunk of the last segment (the tail, where a torn write lands) nothing is kept."""
    if seg.length == 0:
        return 0
    good = local
    held: list[ScannedChunk] = []  # holes and damage since the last valid chunk
    seen: list[Damage] = []
    with seg.use() as fd, mmap.mmap(fd, seg.length, access=mmap.ACCESS_READ) as mm:
        mv = memoryview(mm)
        try:
            while local < seg.length:
                chunk, why = parse_chunk(mv, local, seg.base)
                if chunk is not None:
                    out += [*held, chunk]
                    damage += seen
                    held, seen = [], []
                    local = good = local + chunk.header_size + chunk.frames_len
                    continue
                head = _intact_header(mv, local)
                if head is not None:  # frames damaged: the chunk's offsets become holes
                    at = seg.base + local + head.size
                    held.append(ScannedChunk(head.partition, head.base_offset,
                                             holes(head.count, at), head.frames_len,
                                             head.leader_epoch, at, head.size))
                    seen.append(Damage(seg.base + local, head.size + head.frames_len, why,
                                       partition=head.partition, base_offset=head.base_offset,
                                       count=head.count))
                    local += head.size + head.frames_len
                    continue
                resume = _next_valid_chunk(mm, mv, local + 1, seg.base)
                if resume is None:
                    break
                seen.append(Damage(seg.base + local, resume - local,
                                   f"{why}; resumed at the next valid chunk"))
                local = resume
        finally:
            mv.release()
    if not last:  # the bytes stay (later positions are fixed): keep the holes, skip the rest
        out += held
        damage += seen
        return min(local, seg.length)  # what follows ``local`` could not be scanned
    return good


def holes(count: int, position: int) -> np.ndarray:
    """Index entries for offsets whose data was lost: size 0 (readers skip them), no tag."""
    entries = np.zeros(count, INDEX_DTYPE)
    entries["pos"] = position
    return entries


def _intact_header(mv: memoryview, at: int) -> ChunkHead | None:
    """The header of a chunk that checks out and whose frames fit in the segment, even if the
    frames themselves are damaged."""
    magic = bytes(mv[at:at + 4])
    if magic == CHUNK_MAGIC and at + CHUNK.size <= len(mv):
        _m, partition, count, base_offset, frames_len, epoch, crc = CHUNK.unpack_from(mv, at)
        size, producer = CHUNK.size, None
    elif magic == PRODUCER_MAGIC and at + PRODUCER_CHUNK.size <= len(mv):
        (_m, partition, count, base_offset, frames_len, epoch, pid, pepoch, attrs, seq,
         crc) = PRODUCER_CHUNK.unpack_from(mv, at)
        size, producer = PRODUCER_CHUNK.size, ProducerFields(pid, pepoch, seq, attrs)
    else:
        return None
    if zlib.crc32(mv[at:at + size - 4]) != crc:
        return None
    if count == 0 and frames_len != 0:  # a marker has no records and no bytes
        return None
    if base_offset < 0 or at + size + frames_len > len(mv):
        return None
    return ChunkHead(partition, count, base_offset, frames_len, epoch, size, producer)


def _next_valid_chunk(mm: mmap.mmap, mv: memoryview, start: int, seg_base: int) -> int | None:
    while True:
        found = [at for magic in (CHUNK_MAGIC, PRODUCER_MAGIC)
                 if (at := mm.find(magic, start)) >= 0]
        if not found:
            return None
        at = min(found)
        if parse_chunk(mv, at, seg_base)[0] is not None:
            return at
        start = at + 1


def parse_chunk(mv: memoryview, at: int, seg_base: int) -> tuple[ScannedChunk | None, str]:
    """The chunk at ``at`` with every frame checked (lib.records' own checks), or None and
    why not."""
    if at + CHUNK.size > len(mv):
        return None, "torn chunk header"
    head = _intact_header(mv, at)
    if head is None:
        return None, "chunk header damaged or its frames run past the segment"
    count, start = head.count, at + head.size
    if count == 0:  # a marker (module docstring)
        return ScannedChunk(head.partition, head.base_offset, np.empty(0, INDEX_DTYPE), 0,
                            head.leader_epoch, seg_base + start, head.size), ""
    frames = mv[start:start + head.frames_len]
    try:
        sizes = frame_sizes(frames)
        if len(sizes) != count:
            return None, f"the chunk holds {len(sizes)} frames, its header says {count}"
        tags, times = frame_columns(frames, sizes, known=STORED_FLAGS)
    except CorruptRecord as exc:
        return None, exc.message
    entries = np.empty(count, INDEX_DTYPE)
    entries["pos"] = frame_starts(sizes) + (seg_base + start)
    entries["size"] = sizes
    entries["tag"] = tags
    entries["ts"] = times
    return ScannedChunk(head.partition, head.base_offset, entries, head.frames_len,
                        head.leader_epoch, seg_base + start, head.size, head.producer), ""


def _mtime(seg: Segment) -> float:
    """A segment's last write time (retention by age), by path: no descriptor needed."""
    try:
        return seg.path.stat().st_mtime
    except FileNotFoundError:  # deleted meanwhile: as old as it gets
        return 0.0
