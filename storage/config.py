"""Per-topic storage policy: cache blocks, disk sync thresholds, durability, segments, retention."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from lib.config import require
from lib.records import DEFAULT_MAX_BATCH_BYTES, DEFAULT_MAX_MESSAGE_BYTES

MiB = 1 << 20


@dataclass(frozen=True)
class StoreConfig:
    """Settings of one storage instance; every store of a topic shares them.

    Loss windows (see docs/durability.md): in ``async`` mode a process crash loses what the
    two cache blocks hold (at most ``2 * cache_block_bytes`` or ``cache_flush_interval_ms``);
    a power loss also loses what was written but not yet fsynced (at most
    ``fsync_every_messages`` / ``fsync_every_bytes`` / ``fsync_interval_ms``).
    In ``sync`` mode an acknowledged append is on disk and survives both. When a block is
    written and when the data log is fsynced is decided in one place: storage/sync_policy.py.

    TubeMQ's names for the three fsync thresholds are accepted in TOML tables (``ALIASES``).
    """

    # TubeMQ name (unflushThreshold, unflushDataHold, unflushInterval) -> our name; lib.config
    # .build renames them and refuses a table that gives both names.
    ALIASES: ClassVar[dict[str, str]] = {
        "unflush_threshold": "fsync_every_messages",
        "unflush_data_hold": "fsync_every_bytes",
        "unflush_interval_ms": "fsync_interval_ms",
    }

    durability: Literal["async", "sync"] = "async"
    cache_block_bytes: int = 8 * MiB
    cache_block_messages: int = 200_000
    cache_flush_interval_ms: int = 200
    fsync_every_messages: int = 10_000  # async: fsync after this many unsynced messages
    fsync_every_bytes: int = 16 * MiB  # ... or this many unsynced bytes
    fsync_interval_ms: int = 1_000  # ... or this long after the last fsync
    checkpoint_interval_ms: int = 1_000
    segment_bytes: int = 512 * MiB
    index_segment_entries: int = 1 << 20
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    retention_check_interval_ms: int = 30_000
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
    # Free space kept on the data dir's filesystem: an append that would leave less (counting
    # what is cached but not yet written) is refused with DiskFull. A broker applies its
    # ``[broker.store]`` value to the whole data dir (see storage/space.py).
    disk_reserve_bytes: int = 64 * MiB
    # Bytes acknowledged into cache blocks but not written to the files yet, for the whole
    # data dir: past it, appends wait (up to ``unwritten_wait_ms``) for the flushers, so a
    # broker whose many busy stores outrun its flusher pool neither grows without bound in
    # memory nor stretches the async loss window (storage/space.py). 0: no bound.
    max_unwritten_bytes: int = 256 * MiB
    unwritten_wait_ms: int = 30_000
    # The newest bytes of the data log kept in the OS page cache after their fsync (readers
    # behind the cache blocks find them there); older pages are dropped, so new writes reuse
    # them instead of filling fresh ones (docs/operations.md, "Page cache window"). 0 leaves it
    # to the kernel.
    page_cache_window_bytes: int = 64 * MiB
    # What the stores riding one data dir's syncfs (storage/checkpoints.py) keep together of
    # that window: after each syncfs, a store written in its interval keeps at most this
    # divided by how many were, so 10,000 stores written once each hold no more page cache than
    # one busy store, and their new writes reuse pages as one store's do. 0: each its window.
    page_cache_shared_bytes: int = 256 * MiB
    # Idempotent producers (storage/producers.py): a partition remembers the last batches of
    # at most this many producers (the least recently used go first), forgets one unused for
    # this long (Kafka's producer.id.expiration.ms), and the store snapshots the windows at
    # most this often (recovery replays the data log written since).
    producer_state_max: int = 1000
    producer_state_expiry_ms: int = 24 * 3600 * 1000
    producer_snapshot_interval_ms: int = 30_000

    def validate(self) -> None:
        for name in ("cache_block_bytes", "cache_block_messages", "cache_flush_interval_ms",
                     "fsync_every_messages", "fsync_every_bytes", "fsync_interval_ms",
                     "checkpoint_interval_ms", "segment_bytes", "index_segment_entries",
                     "retention_check_interval_ms", "max_message_bytes", "max_batch_bytes",
                     "producer_state_max", "producer_state_expiry_ms",
                     "producer_snapshot_interval_ms"):
            require(getattr(self, name) > 0, f"StoreConfig.{name} must be > 0")
        require(self.disk_reserve_bytes >= 0, "StoreConfig.disk_reserve_bytes must be >= 0")
        require(self.max_unwritten_bytes >= 0,
                "StoreConfig.max_unwritten_bytes must be >= 0 (0: no bound)")
        require(self.unwritten_wait_ms > 0, "StoreConfig.unwritten_wait_ms must be > 0")
        require(self.page_cache_window_bytes >= 0,
                "StoreConfig.page_cache_window_bytes must be >= 0 (0: never drop)")
        require(self.page_cache_shared_bytes >= 0,
                "StoreConfig.page_cache_shared_bytes must be >= 0 (0: each store its window)")
        require(self.retention_ms > 0 or self.retention_ms == -1,
                "StoreConfig.retention_ms must be > 0, or -1 for no age limit")
        require(self.retention_bytes > 0 or self.retention_bytes == -1,
                "StoreConfig.retention_bytes must be > 0, or -1 for no size limit")
        require(self.max_message_bytes <= self.max_batch_bytes,
                f"StoreConfig.max_message_bytes ({self.max_message_bytes}) must be <= "
                f"max_batch_bytes ({self.max_batch_bytes})")
        require(self.max_batch_bytes <= self.cache_block_bytes,
                f"StoreConfig.max_batch_bytes ({self.max_batch_bytes}) must be <= "
                f"cache_block_bytes ({self.cache_block_bytes}): a batch lands in one block")
        require(self.segment_bytes >= self.cache_block_bytes,
                "StoreConfig.segment_bytes must be >= cache_block_bytes")
