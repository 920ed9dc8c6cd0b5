"""Memory cache blocks: appends land here; the flusher writes a whole block in one write.

A block owns a fixed buffer placed at a known data-log position, so index entries get their
final positions at append time. How a buffer is allocated follows the store's pace
(:func:`fresh_buffer`); a written block's mapping is used again only when nothing refers to
it any more (:meth:`CacheBlock.__del__`), so memoryviews handed to readers stay valid after
the block is flushed.

A store has a :class:`CachePair` (TubeMQ's MsgMemStore pair): the *active* block takes appends,
the *flushing* one is being written by the flusher. Reads of recent offsets are served from
both. The pair does no locking: its owner (the Store) calls it with its lock held.
"""
from __future__ import annotations

import mmap
import sys
from collections import deque
from collections.abc import Callable

import numpy as np

from storage.index import INDEX_DTYPE

SPARE_MAPPINGS = 64  # written bursty blocks' mappings kept for reuse, per block capacity
SPARE_TOUCHED_MAX = 1 << 20  # a mapping written past this goes back to the kernel instead
_spares: dict[int, deque[np.ndarray]] = {}  # capacity -> mappings nothing refers to


class _Entries:
    """Growable array of index entries for one partition inside one block."""

    __slots__ = ("first_offset", "arr", "n", "keyed")

    def __init__(self, first_offset: int) -> None:
        self.first_offset = first_offset
        self.arr = np.empty(1024, INDEX_DTYPE)
        self.n = 0
        self.keyed = False  # may a record here have a key (storage/keys.py: else no hashing)

    @property
    def end_offset(self) -> int:
        return self.first_offset + self.n

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
        # Copy as raw bytes: a structured-dtype assignment is ~8x slower field by field; and
        # through memoryviews, a memcpy that keeps the GIL (numpy lets it go for copies of
        # over 500 elements, and the event loop then waits for a flusher to give it back).
        size = INDEX_DTYPE.itemsize
        memoryview(self.arr).cast("B")[self.n * size:need * size] = \
            memoryview(entries).cast("B")
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
    in small pages, private (Python's default anonymous mapping is shared, whose pages fault in
    through shmem: 7-15 % more CPU per burst). A written block's mapping is kept for the next
    burst of any store (:meth:`CacheBlock.__del__`): 10,000 stores taking a burst each in turn
    paid for an ``mmap``, ``madvise`` and ``munmap`` and a page fault per 4 KiB of every burst
    (``munmap`` in a threaded process also interrupts the other CPUs to flush their TLBs).
    """
    if busy:
        return np.empty(capacity, np.uint8)
    spares = _spares.get(capacity)
    if spares:
        try:
            return spares.pop()  # atomic: another thread may have emptied it meanwhile
        except IndexError:
            pass
    m = mmap.mmap(-1, capacity, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        m.madvise(mmap.MADV_NOHUGEPAGE)
    except (AttributeError, OSError):  # not Linux, or a kernel without huge pages: none to avoid
        pass
    return np.frombuffer(m, np.uint8)  # the array keeps the mapping alive, then unmaps it


def spare_mappings() -> int:
    """Written blocks' mappings waiting for reuse (all capacities)."""
    return sum(len(d) for d in list(_spares.values()))


class CacheBlock:
    """Bytes destined for data-log positions [base_pos, base_pos + fill).

    A busy store's block gets its buffer at once; a bursty store's at its first append, so
    an idle store (most of a broker's 10,000) holds none.
    """

    def __init__(self, base_pos: int, capacity: int, created: float,
                 busy: bool = False) -> None:
        self.base_pos = base_pos
        self.capacity = capacity
        self.busy = busy
        self.buf: np.ndarray | None = fresh_buffer(capacity, True) if busy else None
        self.fill = 0
        self.messages = 0
        self.created = created  # clock reading: the flush interval counts from here
        self.parts: dict[int, _Entries] = {}

    def __del__(self) -> None:
        """Keep a bursty block's mapping for the next burst when nothing but this block refers
        to it: every view of the buffer (a numpy slice, a memoryview of one) holds a reference
        to it, so a reader's zero-copy view keeps the bytes it was given, and the block itself
        is gone, so no reader can take a new view of it."""
        buf = self.buf
        if (buf is None or self.busy or _spares is None or self.fill > SPARE_TOUCHED_MAX
                or sys.getrefcount(buf) != 3):  # self.buf, buf, getrefcount's argument
            return
        spares = _spares.get(len(buf))
        if spares is None:
            spares = _spares.setdefault(len(buf), deque(maxlen=SPARE_MAPPINGS))
        spares.append(buf)  # past maxlen the oldest one is unmapped

    @property
    def end_pos(self) -> int:
        return self.base_pos + self.fill

    def fits(self, nbytes: int) -> bool:
        return self.fill + nbytes <= self.capacity

    def add(self, partition: int, base_offset: int, header: bytes, frames: memoryview,
            entries: np.ndarray | tuple[int, int, int, int], keyed: bool = True) -> None:
        """Copy a chunk in (one memcpy for the frames) and record its index entries (an
        array, or one entry as a tuple: :meth:`_Entries.extend`). ``keyed``: False when the
        chunk's check saw no record with a key (``BatchView.keyed``)."""
        if self.buf is None:
            self.buf = fresh_buffer(self.capacity, False)
        # A memoryview for the copies (no numpy array per piece), dropped at return: a view
        # kept by the block would hide readers' views from __del__'s reference count.
        at, mem = self.fill, memoryview(self.buf)
        mem[at:at + len(header)] = header
        at += len(header)
        mem[at:at + len(frames)] = frames
        self.fill = at + len(frames)
        part = self.parts.get(partition)
        if part is None:
            part = self.parts[partition] = _Entries(base_offset)
        part.keyed = part.keyed or keyed
        self.messages += part.extend(entries)

    def entries(self, partition: int) -> tuple[int, np.ndarray] | None:
        part = self.parts.get(partition)
        return None if part is None else (part.first_offset, part.view())

    def data(self) -> memoryview:
        return memoryview(b"") if self.buf is None else memoryview(self.buf[: self.fill])

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
