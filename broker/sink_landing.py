"""What an interrupted sink commit already appended: found by the marks of its intent.

Before a sink commit appends anything it writes its intent to LMDB (broker/sinks.py): per
partition, the log end before its appends and a mark of each batch (record count, bytes, CRC
of its frames, CRC of its first frame). If the broker dies, or an append fails, before the
commit's batch id is recorded, the replayed commit asks here how many of the partition's
records are already in the log, and appends only the rest.

The batches of one partition were appended in order, each as one contiguous run, somewhere
after the recorded log end (other producers may have appended in between), so each is looked
for from where the previous one ended; the first one missing ends the search. A batch is found
by its first frame's CRC, then confirmed by the CRC of all its frames. This runs only after an
interrupted commit, over what was appended since its intent: it loops per record, in Python.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lib.errors import OffsetOutOfRange
from lib.records import BatchView, frame_sizes
from lib.records.layout import crc32
from storage.store import Store

SCAN_BYTES = 4 << 20  # read per step while looking for a batch


@dataclass(frozen=True)
class BatchMark:
    """Enough of a staged batch to recognise it in the log."""

    count: int
    nbytes: int
    crc: int
    first_crc: int

    @classmethod
    def of(cls, view: BatchView) -> BatchMark:
        first = int(view.sizes[0])
        return cls(view.count, len(view.frames), crc32(view.frames),
                   crc32(view.frames[:first]))

    def as_list(self) -> list[int]:
        return [self.count, self.nbytes, self.crc, self.first_crc]


def landed_records(store: Store, partition: int, start: int, end: int,
                   marks: list[BatchMark]) -> int:
    """How many records of ``marks`` (in append order) are in offsets [start, end)."""
    landed, pos = 0, start
    for mark in marks:
        at = _find(store, partition, pos, end, mark)
        if at is None:
            break
        landed += mark.count
        pos = at + mark.count
    return landed


def _find(store: Store, partition: int, pos: int, end: int, mark: BatchMark) -> int | None:
    pos = max(pos, store.earliest(partition))
    while pos + mark.count <= end:
        try:
            got = store.read(partition, pos, max_bytes=SCAN_BYTES, stop=end)
        except OffsetOutOfRange:
            return None
        if not len(got):
            if got.next_offset <= pos:
                return None
            pos = got.next_offset
            continue
        frames = memoryview(got.frames)
        bounds = np.concatenate(([0], np.cumsum(frame_sizes(frames))))
        for i, offset in enumerate(got.offsets.tolist()):
            first = frames[int(bounds[i]):int(bounds[i + 1])]
            if crc32(first) == mark.first_crc and _matches(store, partition, offset, mark):
                return offset
        pos = got.next_offset
    return None


def _matches(store: Store, partition: int, offset: int, mark: BatchMark) -> bool:
    """Whether offsets [offset, offset + count) hold exactly the marked frames (a read may
    return fewer records than asked: read on until all are in)."""
    crc, nbytes, pos, end = 0, 0, offset, offset + mark.count
    while pos < end and nbytes <= mark.nbytes:
        got = store.read(partition, pos, max_bytes=mark.nbytes - nbytes + 1, stop=end)
        if not len(got) or int(got.offsets[0]) != pos or \
                int(got.offsets[-1]) != pos + len(got) - 1:
            return False  # a hole or a filtered gap: not one contiguous run
        crc = crc32(got.frames, crc)
        nbytes += len(got.frames)
        pos += len(got)
    return pos == end and nbytes == mark.nbytes and crc == mark.crc
