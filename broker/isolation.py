"""What a consumer's read shows of transactions (docs/transactions.md).

Every read leaves out control records (transaction markers). A ``read_committed`` read also
stops at the partition's last stable offset (the first offset of its oldest open
transaction: nothing at or after it is decided yet) and leaves out the records of aborted
transactions, found in the partition's aborted-transaction index (storage/aborted.py) rather
than by reading anything twice. ``next_offset`` still moves past what was left out.

Partitions no transaction ever wrote to (``Store.transactional``) are returned as read: the
check costs one flag there. Where a read does hold records to leave out, the kept frames are
joined once per contiguous run.
"""
from __future__ import annotations

import numpy as np

from lib.records import FLAG_CONTROL, FRAME_FLAGS_AT, frame_starts
from storage.select import ReadResult
from storage.store import Store


def visible_end(store: Store, partition: int, high_watermark: int | None,
                read_committed: bool) -> int | None:
    """Where a consumer's read stops: the high watermark (None: one copy, the log end) and,
    for ``read_committed``, the last stable offset."""
    if not read_committed or not store.producers.transactional(partition):
        return high_watermark
    stable = store.producers.last_stable(partition)
    return stable if high_watermark is None else min(high_watermark, stable)


def leave_out(store: Store, partition: int, res: ReadResult,
              read_committed: bool) -> ReadResult:
    """``res`` without its control records, and for ``read_committed`` without the records
    of aborted transactions."""
    if not len(res.offsets) or not store.producers.transactional(partition):
        return res
    sizes = res.sizes.astype(np.int64)
    starts = frame_starts(sizes)
    drop = (np.frombuffer(res.frames, np.uint8)[starts + FRAME_FLAGS_AT] & FLAG_CONTROL) != 0
    if read_committed:
        offsets = res.offsets
        ranges = store.producers.aborted_ranges(partition, int(offsets[0]), int(offsets[-1]) + 1)
        if len(ranges):
            ranges = np.sort(ranges, order="first")
            at = np.searchsorted(ranges["first"], offsets, side="right") - 1
            drop |= (at >= 0) & (offsets <= ranges["last"][np.maximum(at, 0)])
    if not drop.any():
        return res
    keep = ~drop
    return ReadResult((_kept_frames(res.frames, starts, sizes, keep),), res.offsets[keep],
                      res.next_offset, res.earliest, res.latest, res.sizes[keep])


def _kept_frames(frames: bytes, starts: np.ndarray, sizes: np.ndarray,
                 keep: np.ndarray) -> bytes:
    """The kept frames joined, one slice per contiguous run of them."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], keep.view(np.int8), [0]))))
    view = memoryview(frames)
    return b"".join(view[int(starts[a]):int(starts[b - 1] + sizes[b - 1])]
                    for a, b in zip(edges[::2], edges[1::2], strict=True))
