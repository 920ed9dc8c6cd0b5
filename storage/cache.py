"""Memory cache block: appends land here; the flusher writes a whole block in one write.

A block owns a fixed buffer placed at a known data-log position, so index entries get their
final positions at append time. A new buffer is allocated per block (never reused) so that
memoryviews handed to readers stay valid after the block is flushed.
"""
from __future__ import annotations

import time

import numpy as np

from storage.index import INDEX_DTYPE


class _Entries:
    """Growable array of index entries for one partition inside one block."""

    __slots__ = ("first_offset", "arr", "n")

    def __init__(self, first_offset: int) -> None:
        self.first_offset = first_offset
        self.arr = np.empty(1024, INDEX_DTYPE)
        self.n = 0

    def extend(self, entries: np.ndarray) -> None:
        need = self.n + len(entries)
        if need > len(self.arr):
            grown = np.empty(max(need, 2 * len(self.arr)), INDEX_DTYPE)
            grown[: self.n] = self.arr[: self.n]
            self.arr = grown
        # Copy as raw bytes: a structured-dtype assignment is ~8x slower field by field.
        self.arr[self.n:need].view(np.uint8)[:] = entries.view(np.uint8)
        self.n = need

    def view(self) -> np.ndarray:
        return self.arr[: self.n]


class CacheBlock:
    """Bytes destined for data-log positions [base_pos, base_pos + fill)."""

    def __init__(self, base_pos: int, capacity: int) -> None:
        self.base_pos = base_pos
        self.buf = np.empty(capacity, np.uint8)
        self.fill = 0
        self.messages = 0
        self.created = time.monotonic()
        self.parts: dict[int, _Entries] = {}

    @property
    def end_pos(self) -> int:
        return self.base_pos + self.fill

    def fits(self, nbytes: int) -> bool:
        return self.fill + nbytes <= len(self.buf)

    def add(self, partition: int, base_offset: int, header: bytes, frames: memoryview,
            entries: np.ndarray) -> None:
        """Copy a chunk in (one memcpy for the frames) and record its index entries."""
        at = self.fill
        self.buf[at:at + len(header)] = np.frombuffer(header, np.uint8)
        at += len(header)
        self.buf[at:at + len(frames)] = np.frombuffer(frames, np.uint8)
        self.fill = at + len(frames)
        self.messages += len(entries)
        part = self.parts.get(partition)
        if part is None:
            part = self.parts[partition] = _Entries(base_offset)
        part.extend(entries)

    def entries(self, partition: int) -> tuple[int, np.ndarray] | None:
        part = self.parts.get(partition)
        return None if part is None else (part.first_offset, part.view())

    def data(self) -> memoryview:
        return memoryview(self.buf[: self.fill])

    def slice(self, position: int, length: int) -> memoryview:
        at = position - self.base_pos
        return memoryview(self.buf[at:at + length])
