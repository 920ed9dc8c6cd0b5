"""Cutting one partition's log back (truncate) or restarting it further on (reset), for a
follower that replication tells to (storage/partition_log.py says why a marker chunk makes it
durable; ``Store.truncate`` / ``Store.reset`` are the entry points).

Rare, so simple rather than fast: the store is flushed, then the flusher's ``io_lock`` (no
block write, checkpoint or retention) and the store's lock (no append) are held over the
partition's file changes and the marker's entry into the active block.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lib.errors import StorageError
from storage.core import StoreCore
from storage.datalog import CHUNK, chunk_header
from storage.flusher import Flusher
from storage.index import INDEX_DTYPE
from storage.partition_log import PartitionLog


class LogCuts:
    """Truncations and resets of a store's partitions (module docstring)."""

    def __init__(self, core: StoreCore, flusher: Flusher, flush: Callable[[], None],
                 writable: Callable[[int], PartitionLog], make_room: Callable[[], None]) -> None:
        """The store's ``flush``, writable-partition lookup and ``make_room`` (lock held)."""
        self._core, self._flusher, self._flush = core, flusher, flush
        self._writable, self._make_room = writable, make_room

    def cut(self, partition: int, offset: int, reset: bool) -> None:
        """Flush (every record of the partition in the files, none in a cache block); then,
        holding the flusher's ``io_lock`` (no block write, checkpoint or retention) and the
        store's lock (no append), cut the partition's log and put the marker in the active
        block, before any later append of the partition; then flush again."""
        while True:
            self._flush()
            with self._flusher.io_lock, self._core.cond:
                part = self._writable(partition)
                part.check_cut(offset, reset)
                active = self._core.cache.active
                if part.flushed < part.next or partition in active.parts:
                    continue  # an append came in since the flush: flush again
                if not active.fits(CHUNK.size):
                    if self._core.cache.flushing is not None:
                        continue
                    self._make_room()  # swaps: the flusher writes it once io_lock is released
                self._cut_now(part, offset, reset)
                break
        self._flush()

    def _cut_now(self, part: PartitionLog, offset: int, reset: bool) -> None:
        """Epochs, index files, offsets, then the marker into the active block. A failure
        before the index is cut leaves nothing a retry would not redo; one cutting it stops
        the store (the index files and the offsets no longer agree)."""
        part.cut_epochs(offset, reset)
        self._core.space.admit(CHUNK.size)  # the marker's bytes, like an append's
        self._core.unwritten += CHUNK.size
        try:
            part.cut_index(offset, reset)
        except StorageError as exc:
            failed = StorageError(f"store {self._core.name}: {exc.message}", path=exc.path)
            self._core.failed = failed
            self._core.notify()
            raise failed from exc
        p = part.partition
        self._core.cache.active.add(p, offset, chunk_header(p, 0, offset, 0), memoryview(b""),
                               np.empty(0, INDEX_DTYPE))
        self._core.notify()
