"""A batch too large for its broker is sent again in pieces, as Kafka's producer does (KIP-126).

A producer does not know the ``max_batch_bytes`` of the broker a partition lives on (brokers
set it, topics with large messages raise it), and a batch over it is refused whole
(``BatchTooLarge``, naming the limit), so nothing of it was appended. Failing those records
would make a producer's ``batch_bytes`` a setting that has to match every broker; instead the
sender cuts the batch into pieces within the limit and sends them in order, and sends later
batches of that partition cut the same way before they go. It remembers the limit
(:class:`RefusedLimits`) for that partition's broker only, and for a while: a partition whose
leader moves, or a broker whose limit is raised, gets whole batches again.

The records' futures belong to the refused batch (one shared outcome): :class:`Split` settles
it once every piece has, each record's offset taken from its piece. A piece that fails for good
fails the whole batch at once and the pieces after it are never sent (pieces before it were
appended: as after a timeout, some of the records may be in the topic).
"""
from __future__ import annotations

import bisect
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from lib.produce_wire import batch_span, joined
from lib.producer.batch import Batch
from lib.records import HEADER_SIZE
from lib.records.layout import COLUMN_BYTES_PER_RECORD
from lib.types import RecordMetadata, TopicPartition

LIMIT_MEMORY_S = 300.0  # a refused batch limit is trusted this long, then learnt again


class RefusedLimits:
    """The batch limit each partition's broker refused a batch above, per broker address.

    Why not for good: the limit belongs to the broker (its ``max_batch_bytes``, or the topic's
    when larger), so a leader change to another broker forgets it, and after
    ``memory_s`` a batch goes whole again (one refusal, then pieces) in case it was raised."""

    def __init__(self, memory_s: float = LIMIT_MEMORY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.memory_s, self.clock = memory_s, clock
        self._known: dict[TopicPartition, tuple[str, int, float]] = {}

    def remember(self, tp: TopicPartition, address: str, limit: int) -> None:
        self._known[tp] = (address, limit, self.clock())

    def get(self, tp: TopicPartition, address: str) -> int | None:
        """The limit to cut ``tp``'s batches to before sending them to ``address``."""
        known = self._known.get(tp)
        if known is None:
            return None
        broker, limit, learnt = known
        if broker != address or self.clock() - learnt > self.memory_s:
            del self._known[tp]
            return None
        return limit


def piece_bounds(sizes: np.ndarray, limit: int) -> list[int] | None:
    """Record index bounds of pieces whose whole batch (header, columns, frames) is at most
    ``limit`` bytes, as few as possible; None when one record alone is over it."""
    cost = sizes.astype(np.int64) + COLUMN_BYTES_PER_RECORD
    budget = limit - HEADER_SIZE
    if len(cost) == 0 or int(cost.max()) > budget:
        return None
    ends = np.cumsum(cost)
    bounds, start, taken = [0], 0, 0
    while start < len(cost):  # one search per piece, not a loop per record
        start = int(np.searchsorted(ends, taken + budget, side="right"))
        taken = int(ends[start - 1])
        bounds.append(start)
    return bounds


def frames_of(batch: Batch) -> memoryview:
    """The batch's frames back to back: the tail of the batch in its sealed request, or its
    buffer when it was never sealed."""
    total = int(np.sum(batch.sizes, dtype=np.int64))
    if batch.payload:
        batch.payload = joined(batch.payload)
        end = batch_span(batch.payload)[1]
        return memoryview(batch.payload)[end - total:end]
    batch.encode()
    buf = batch.buf
    return memoryview(b"".join(buf) if isinstance(buf, list) else buf)


def cut(batch: Batch, frames: memoryview, bounds: list[int]) -> list[Batch]:
    """The pieces of ``batch`` (not sealed: each gets its producer sequence when sent)."""
    sizes = np.asarray(batch.sizes, np.int64)
    starts = np.concatenate(([0], np.cumsum(sizes)))
    times = np.asarray(batch.timestamps, np.int64)
    tags = None if batch.tag_hashes is None else np.asarray(batch.tag_hashes, np.int64)
    pieces = []
    for i, j in zip(bounds, bounds[1:], strict=False):
        a, b = int(starts[i]), int(starts[j])
        pieces.append(Batch(batch.tp, batch.created, frames[a:b], sizes[i:j].tolist(),
                            None if tags is None else tags[i:j].tolist(),
                            times[i:j].tolist(), b - a, sealed=True))
    return pieces


def pieces_within(batch: Batch, limit: int) -> list[Batch] | None:
    """``batch`` as pieces of at most ``limit`` bytes, settled through a :class:`Split`;
    None when it fits whole, or when one of its records alone does not fit (it fails as it
    is)."""
    if HEADER_SIZE + COLUMN_BYTES_PER_RECORD * len(batch) + batch.size <= limit:
        return None
    frames = frames_of(batch)  # encodes plain values
    bounds = piece_bounds(np.asarray(batch.sizes), limit)
    if bounds is None or len(bounds) <= 2:
        return None
    pieces = cut(batch, frames, bounds)
    Split(batch, pieces, bounds)
    return pieces


class Split:
    """The refused batch's outcome, settled from its pieces (see the module docstring)."""

    def __init__(self, parent: Batch, pieces: list[Batch], bounds: list[int]) -> None:
        self.parent, self.pieces, self.starts = parent, pieces, bounds[:-1]
        self.left = len(pieces)
        self.finished = False
        for piece in pieces:
            piece.split = self

    def settled(self, piece: Batch, error: Any) -> Batch | None:
        """A piece finished (``error`` None: acknowledged). Returns the parent once its
        outcome is settled by this call (the caller passes it up if it is a piece too)."""
        if self.finished:
            return None
        if error is not None:
            for later in self.pieces:
                if later.abandoned is None and not later.finished and later is not piece:
                    later.abandoned = error
            self._finish(error)
            return self.parent
        self.left -= 1
        if self.left:
            return None
        self.parent.offset_runs = [(start + s, base) for start, p in zip(self.starts, self.pieces,
                                                                        strict=True)
                                   for s, base in p.runs()]
        self._finish(None)
        return self.parent

    def _finish(self, error: Any) -> None:
        self.finished = True
        parent = self.parent
        if error is not None:
            parent.outcome.fail(error)
        else:
            topic, partition = parent.tp
            runs = parent.offset_runs or []
            firsts = [s for s, _ in runs]
            times = parent.timestamps

            def metadata(i: int) -> RecordMetadata:
                start, base = runs[bisect.bisect_right(firsts, i) - 1]
                return RecordMetadata(topic, partition, base + i - start, int(times[i]))

            parent.outcome.succeed(metadata)
        parent.mark_done()
