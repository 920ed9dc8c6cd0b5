"""What a store shares with its flusher: the lock, the state it guards, and the files.

A :class:`~storage.store.Store` takes appends and serves reads; its
:class:`~storage.flusher.Flusher` writes the cache blocks to the files on a thread of its own.
Both work on one :class:`StoreCore`, and that is the whole seam between them: the store builds
the core and hands it to the flusher, the flusher offers the store ``io_lock``,
``wait_synced`` and ``enforce_retention``, and neither touches the other's private names.

Threading: ``cond`` is the store's one lock (a Condition: appenders wait on it for room in
the cache, sync waiters for the flusher's fsync, the flusher for work). It guards the cache
pair, the ``parts`` dict and each partition's offsets (storage/partition_log.py), and every
flag below (``unwritten``, ``closing``, ``closed``, ``close_started``, ``failed``,
``disk_full``). The files (``data``, each partition's index, ``checkpoint``) are written only
by the flusher, or by the store holding the flusher's ``io_lock`` (cuts, removal); readers
read them outside ``cond`` (segment lists are replaced, never mutated).
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from lib.errors import DiskFull, StorageError
from storage.cache import CachePair
from storage.checkpoints import CheckpointSlot, OwnCheckpoint
from storage.config import StoreConfig
from storage.datalog import DataLog
from storage.partition_log import PartitionLog
from storage.space import SpaceGuard


class StoreCore:
    """One store's shared state (module docstring); attributes are read and set under
    ``cond`` unless they never change (identity, config and the collaborators)."""

    def __init__(self, topic: str, store_id: int, store_dir: Path, config: StoreConfig,
                 data: DataLog, checkpoint: CheckpointSlot | OwnCheckpoint,
                 parts: dict[int, PartitionLog], space: SpaceGuard, cache: CachePair) -> None:
        self.topic, self.store_id, self.dir, self.config = topic, store_id, store_dir, config
        self.name = f"{topic}/{store_id}"  # in errors, events and the space guard's table
        self.data = data  # the data log every partition's chunks share
        self.checkpoint = checkpoint  # where the flusher saves the synced position
        self.parts = parts  # partition -> its log; add/remove change it under cond
        self.space = space  # admits appends (the store), counts writes (the flusher)
        self.cache = cache  # the active block and the one being flushed
        self.cond = threading.Condition()
        self.unwritten = 0  # bytes admitted by the guard that the flusher has not written
        self.closing = self.closed = False  # close() began / the flusher has stopped
        self.close_started = 0.0  # clock() when close() began (the disk-full close limit)
        self.failed: StorageError | None = None  # stops the store for good
        self.disk_full: DiskFull | None = None  # the flusher cannot write: appends refused
        self.wake_flusher: Callable[[], None] = lambda: None  # set by the flusher

    def notify(self) -> None:
        """Under ``cond``: the state changed for waiters and for the flusher (an append made
        a block due, a block was swapped out, close began)."""
        self.cond.notify_all()
        self.wake_flusher()

    def refresh_earliest(self) -> None:
        """The data log's start moved (opening, retention): so does each earliest."""
        for part in self.parts.values():
            part.move_earliest(self.data.start)
