"""Where the fsync is decided: when a cache block is written, and when the data log is synced.

This is the one place that turns a topic's thresholds into decisions; the flusher
(storage/flusher.py) asks and then does the I/O. Nothing here does I/O or reads the clock
directly: the clock is injected, so the thresholds are tested with a fake one.

- A block is *full* at ``cache_block_messages`` messages or when it cannot take even a
  smallest chunk; it is *due* when full or when its oldest message is
  ``cache_flush_interval_ms`` old (then the flusher swaps it out and writes it in one write).
- The data log is fsynced (``async`` topics) after ``fsync_every_messages`` written-but-unsynced
  messages, ``fsync_every_bytes`` such bytes, or ``fsync_interval_ms`` since the last fsync
  (TubeMQ's unflushThreshold / unflushDataHold / unflushInterval), and always when a ``sync``
  append, ``flush()`` or ``close()`` waits for it. A store whose data dir a broker's checkpoint
  writer syncs (storage/checkpoints.py: one ``syncfs`` per interval) leaves the time-based
  fsync to that writer (``timed=False``); the counts still ask for its own.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from storage.cache import CacheBlock
from storage.config import StoreConfig
from storage.datalog import CHUNK

SMALLEST_CHUNK = CHUNK.size + 64  # a block with less room than this counts as full


@dataclass(frozen=True)
class Unsynced:
    """What the data log holds that no fsync covers yet, and when the last fsync was."""

    messages: int = 0
    bytes: int = 0
    since: float = 0.0  # clock reading at the last fsync (or at open)

    def add(self, messages: int, nbytes: int) -> Unsynced:
        return replace(self, messages=self.messages + messages, bytes=self.bytes + nbytes)


@dataclass(frozen=True)
class SyncPolicy:
    """Write and fsync decisions of one store (see module docstring); pure, clock injected."""

    block_messages: int = 200_000
    block_interval_ms: int = 200
    fsync_every_messages: int = 10_000
    fsync_every_bytes: int = 16 << 20
    fsync_interval_ms: int = 1_000
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)

    @classmethod
    def of(cls, cfg: StoreConfig, clock: Callable[[], float] = time.monotonic) -> SyncPolicy:
        return cls(cfg.cache_block_messages, cfg.cache_flush_interval_ms,
                   cfg.fsync_every_messages, cfg.fsync_every_bytes, cfg.fsync_interval_ms,
                   clock)

    def synced_now(self) -> Unsynced:
        """The tally right after an fsync (or at open, when the files are all there is)."""
        return Unsynced(since=self.clock())

    def block_full(self, block: CacheBlock) -> bool:
        """Full by count or by bytes: the appender wakes the flusher at once."""
        return block.messages >= self.block_messages or not block.fits(SMALLEST_CHUNK)

    def block_due(self, block: CacheBlock) -> bool:
        """Full, or holding a message ``block_interval_ms`` old."""
        if block.fill == 0:
            return False
        age_ms = (self.clock() - block.created) * 1e3
        return self.block_full(block) or age_ms >= self.block_interval_ms

    def write_due(self, block: CacheBlock, waited_for: bool) -> bool:
        """Swap ``block`` out and write it now: due, or someone waits for its bytes (a sync
        append, ``flush()``, ``close()``)."""
        return block.fill > 0 and (waited_for or self.block_due(block))

    def fsync_due(self, unsynced: Unsynced, waited_for: bool, timed: bool = True) -> bool:
        """fsync the data log now: there is something to sync and a waiter or a threshold
        (messages, bytes, and unless ``timed`` is False time since the last fsync) asks for
        it."""
        if unsynced.bytes == 0:
            return False
        age_ms = (self.clock() - unsynced.since) * 1e3
        return (waited_for or unsynced.messages >= self.fsync_every_messages
                or unsynced.bytes >= self.fsync_every_bytes
                or (timed and age_ms >= self.fsync_interval_ms))

    def wait_s(self, active: CacheBlock, unsynced: Unsynced, idle_s: float,
               timed: bool = True) -> float:
        """How long the flusher may sleep: until the active block or the unsynced bytes fall
        due, else ``idle_s`` (the flusher's next checkpoint or retention check). Counts and
        bytes need no timer: appenders notify when a block fills and when an empty one gets
        its first message, so an idle store costs no wake-ups."""
        now = self.clock()
        wait = idle_s
        if active.fill:
            wait = min(wait, active.created + self.block_interval_ms / 1e3 - now)
        if unsynced.bytes and timed:
            wait = min(wait, unsynced.since + self.fsync_interval_ms / 1e3 - now)
        return max(wait, 0.0)
