"""Memory cache blocks: appends land here; the flusher writes a whole block in one write.

A block owns a fixed buffer placed at a known data-log position, so index entries get their
final positions at append time. A new buffer is allocated per block (never reused) so that
memoryviews handed to readers stay valid after the block is flushed; how a buffer is
allocated follows the store's pace (:func:`fresh_buffer`).

A store has a :class:`CachePair` (TubeMQ's MsgMemStore pair): the *active* block takes appends,
the *flushing* one is being written by the flusher. Reads of recent offsets are served from
both. The pair does no locking: its owner (the Store) calls it with its lock held.
"""
from __future__ import annotations

import mmap
from collections.abc import Callable

import numpy as np

from storage.index import INDEX_DTYPE


class _Entries:
    """Growable array of index entries for one partition inside one block."""

    __slots__ = ("first_offset", "arr", "n")

    def __init__(self, first_offset: int) -> None:
        self.first_offset = first_offset
        self.arr = np.empty(1024, INDEX_DTYPE)
        self.n = 0

    def extend(self, entries: np.ndarray | tuple[int, int, int, int]) -> int:
        """Append ``entries``, or one entry as a (pos, size, tag, ts) tuple (a one-record
        batch: a send_sync; a temporary array and its byte copy cost 6 us against 0.4 for
        the row assignment). Returns how many were appended."""
        if isinstance(entries, tuple):
            if self.n == len(self.arr):
                self._grow(self.n + 1)
            self.arr[self.n] = entries
            self.n += 1
            return 1
        need = self.n + len(entries)
        if need > len(self.arr):
            self._grow(need)
        # Copy as raw bytes: a structured-dtype assignment is ~8x slower field by field.
        self.arr[self.n:need].view(np.uint8)[:] = entries.view(np.uint8)
        self.n = need
        return len(entries)

    def _grow(self, need: int) -> None:
        grown = np.empty(max(need, 2 * len(self.arr)), INDEX_DTYPE)
        grown[: self.n] = self.arr[: self.n]
        self.arr = grown

    def view(self) -> np.ndarray:
        return self.arr[: self.n]


def fresh_buffer(capacity: int, busy: bool) -> np.ndarray:
    """A block's buffer, allocated to suit the store's pace.

    A busy store fills its blocks: a plain allocation lets the process reuse the memory of the
    blocks it wrote (no page faults, nothing to zero) and numpy asks for huge pages on it.
    A store taking bursts writes a little into each block, and a fresh huge page is zeroed
    whole (2 MiB) at the first byte written: a 500 KiB burst into a fresh 8 MiB block paid for
    2-4 MiB of zeroing, a third of the broker's CPU at 1,000 busy topics (``perf``:
    ``clear_page_erms`` under ``do_huge_pmd_anonymous_page``). So such a store gets a mapping
    of its own in small pages: memory is committed as bytes land and unmapped when the block
    goes, so 1,000 idle stores hold almost none. The mapping is private: Python's default
    anonymous mapping is shared, whose pages fault in through shmem (``shmem_fault``), and
    10,000 stores taking one burst each paid for it: 7-15 % less CPU per burst private
    (``load.bench_store_bursts``, alternating).
    """
    if busy:
        return np.empty(capacity, np.uint8)
    m = mmap.mmap(-1, capacity, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        m.madvise(mmap.MADV_NOHUGEPAGE)
    except (AttributeError, OSError):  # not Linux, or a kernel without huge pages: none to avoid
        pass
    return np.frombuffer(m, np.uint8)  # the array keeps the mapping alive, then unmaps it


class CacheBlock:
    """Bytes destined for data-log positions [base_pos, base_pos + fill)."""

    def __init__(self, base_pos: int, capacity: int, created: float,
                 busy: bool = False) -> None:
        self.base_pos = base_pos
        self.buf = fresh_buffer(capacity, busy)
        self.mem = memoryview(self.buf)  # appends copy through it
        self.fill = 0
        self.messages = 0
        self.created = created  # clock reading: the flush interval counts from here
        self.parts: dict[int, _Entries] = {}

    @property
    def end_pos(self) -> int:
        return self.base_pos + self.fill

    def fits(self, nbytes: int) -> bool:
        return self.fill + nbytes <= len(self.buf)

    def add(self, partition: int, base_offset: int, header: bytes, frames: memoryview,
            entries: np.ndarray | tuple[int, int, int, int]) -> None:
        """Copy a chunk in (one memcpy for the frames) and record its index entries (an
        array, or one entry as a tuple: :meth:`_Entries.extend`)."""
        at, mem = self.fill, self.mem
        mem[at:at + len(header)] = header  # a memoryview copy: no numpy array per piece
        at += len(header)
        mem[at:at + len(frames)] = frames
        self.fill = at + len(frames)
        part = self.parts.get(partition)
        if part is None:
            part = self.parts[partition] = _Entries(base_offset)
        self.messages += part.extend(entries)

    def entries(self, partition: int) -> tuple[int, np.ndarray] | None:
        part = self.parts.get(partition)
        return None if part is None else (part.first_offset, part.view())

    def data(self) -> memoryview:
        return memoryview(self.buf[: self.fill])

    def slice(self, position: int, length: int) -> memoryview:
        at = position - self.base_pos
        return memoryview(self.buf[at:at + length])


class CachePair:
    """The active block and the block being flushed (None when the flusher is idle).

    The flushing block is the one just before the active one in the data log, so together
    they hold every position from ``flushing.base_pos`` (or ``active.base_pos``) to the end.
    """

    def __init__(self, base_pos: int, capacity: int, clock: Callable[[], float]) -> None:
        self.capacity, self.clock = capacity, clock
        self.active = CacheBlock(base_pos, capacity, clock())
        self.flushing: CacheBlock | None = None

    @property
    def cached_bytes(self) -> int:
        return self.active.fill + (self.flushing.fill if self.flushing else 0)

    def swap(self) -> None:
        """Hand the active block to the flusher and start an empty one after it (the store
        is busy when the one handed over was at least half full: see :func:`fresh_buffer`)."""
        self.flushing = self.active
        busy = 2 * self.flushing.fill >= self.capacity
        self.active = CacheBlock(self.flushing.end_pos, self.capacity, self.clock(), busy)

    def flushed(self) -> None:
        """The flushing block is in the files: readers find its offsets there now."""
        self.flushing = None

    def forget(self, partition: int) -> None:
        """Drop a removed partition's index entries from both blocks. Its bytes stay: they
        reach the data log below the origin of any later copy (storage/removal.py)."""
        for block in (self.active, self.flushing):
            if block is not None:
                block.parts.pop(partition, None)

    def entries(self, partition: int, first: int, last: int, limit: int
                ) -> tuple[np.ndarray, list[CacheBlock]]:
        """At most ``limit`` index entries of [first, last) from the blocks, with the blocks
        holding them (for :func:`read_span`)."""
        parts, blocks = [], []
        for block in (self.flushing, self.active):
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
        return entries[:limit], blocks


def read_span(blocks: list[CacheBlock], position: int, length: int) -> memoryview:
    """Data-log bytes [position, position + length) from ``blocks`` (as :meth:`entries` gave)."""
    for block in blocks:
        if block.base_pos <= position and position + length <= block.end_pos:
            return block.slice(position, length)
    # A span can cross from the flushing block into the active one (they are adjacent).
    out = []
    for block in blocks:
        lo = max(position, block.base_pos)
        hi = min(position + length, block.end_pos)
        if hi > lo:
            out.append(bytes(block.slice(lo, hi - lo)))
    return memoryview(b"".join(out))
