"""Small builders shared by the storage tests, and the one wait for a condition."""
from __future__ import annotations

import time
from collections.abc import Callable

from lib.records import Record, decode_frames, encode_batch
from storage.config import StoreConfig

KiB = 1 << 10
# A store whose blocks reach the files only when full, on flush() or close(), with small
# segments (8 KiB of data, 16 index entries) and the checkpoint written at close only: the
# recovery and truncation tests decide what is on disk when they "crash".
SMALL_STORE = StoreConfig(
    cache_block_bytes=4 * KiB,
    cache_block_messages=10**6,
    cache_flush_interval_ms=10**6,
    fsync_interval_ms=10**6,
    checkpoint_interval_ms=10**9,
    segment_bytes=8 * KiB,
    index_segment_entries=16,
    retention_ms=-1,
    retention_check_interval_ms=10**12,
    max_message_bytes=1 * KiB,
    max_batch_bytes=4 * KiB,
)


def batch_of(values: list[bytes], tag: str | None = None, timestamp: int = 1) -> bytes:
    return encode_batch([Record(v, tag=tag, timestamp=timestamp) for v in values])


def values(prefix: str, n: int, start: int = 0) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(start, start + n)]


def read_all(store, partition: int, offset: int | None = None, max_bytes: int = 1 << 20,
             tags=None) -> list[Record]:
    """Every record from ``offset`` (default earliest) to latest, following next_offset."""
    out: list[Record] = []
    offset = store.earliest(partition) if offset is None else offset
    while offset < store.latest(partition):
        res = store.read(partition, offset, max_bytes, tags=tags)
        out += decode_frames(res.frames, res.offsets, partition)
        assert res.next_offset > offset, "a read must make progress"
        offset = res.next_offset
    return out


def wait_until(check: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    """Poll ``check`` until it is true; fail naming ``what`` after ``timeout`` seconds (a
    generous deadline: the suite runs on busy machines)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.02)
