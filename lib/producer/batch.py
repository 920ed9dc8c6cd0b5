"""A producer's batch: the records of one partition sent in one Produce call, from the first
append to the acknowledgement (the accumulator queues it, the sender seals, sends and settles
it)."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lib.producer.futures import BatchOutcome
from lib.records.encode import Pieces, column_pieces
from lib.types import TopicPartition

_DONE = threading.Lock()  # a batch's finished flag and its lazily made event


@dataclass(eq=False, slots=True)  # no instance dict: one object less per batch to track
class Batch:
    """Records of one partition sent in one Produce call.

    Frames are laid out back to back in ``buf`` as they arrive, so sending the batch joins one
    buffer instead of one object per record; ``sizes`` delimits them. ``tag_hashes`` stays None
    until a record with a tag arrives (then it holds one entry per record).

    A batch of plain values (``values`` not None: no key, tag, headers or compression, what
    ``Producer.send`` sees most) keeps the caller's bytes objects instead, and the sender
    encodes them all at once when it seals the batch (:meth:`encode`): one pass over columns
    costs a third of encoding frame by frame in ``send``. A batch holds one kind or the
    other; a record of the other kind opens a new batch behind it.
    """

    tp: TopicPartition
    created: float
    # frames; a view: append_run; a list of pieces to join: plain values once encoded
    buf: bytearray | memoryview | list = field(default_factory=bytearray)
    sizes: list[int] = field(default_factory=list)
    tag_hashes: list[int] | None = None
    timestamps: list[int] = field(default_factory=list)  # ms; plain values': ns until encoded
    size: int = 0
    sealed: bool = False  # sent at least once: no more appends, keeps its bytes and sequence
    attempts: int = 0
    address: str = ""  # the broker of the last send
    first_sent: float = 0.0
    retry_at: float = 0.0
    payload: bytes | Pieces = b""  # the request, built once (joined at its first Produce call)
    base_sequence: int = -1
    producer_id: int = -1
    values: list[bytes] | None = None  # plain values not encoded yet (see above)
    finished: bool = False  # acknowledged or failed for good (mark_done)
    _done: threading.Event | None = None  # made by the first wait_done (flush): most never are
    outcome: BatchOutcome = field(default_factory=BatchOutcome)  # shared by its futures
    base_offset: int = -1  # once acknowledged
    # Cut into pieces after its broker refused it as too large (lib/producer/split.py):
    split: Any = None  # the Split this batch is a piece of
    offset_runs: list[tuple[int, int]] | None = None  # (first record, its offset) per piece
    abandoned: Any = None  # an earlier piece failed for good: fail this one, unsent
    joinable: bool = False  # send_batch's runs: queued, never sent, more runs may join it

    def join_run(self, frames: memoryview, sizes: np.ndarray, tag_hashes: np.ndarray | None,
                 timestamp: int) -> int:
        """Add a run of frames (``append_run``'s, joinable batches only) after those held,
        kept as a view: the request joins the pieces once. Returns the run's first index."""
        first, n = len(self), len(sizes)
        if isinstance(self.buf, Pieces):
            self.buf.append(frames)
            self.buf.nbytes += len(frames)
        else:
            self.buf = Pieces((self.buf, frames), len(self.buf) + len(frames))
        if tag_hashes is not None or self.tag_hashes is not None:
            self.tag_hashes = np.concatenate((
                np.zeros(first, np.uint32) if self.tag_hashes is None else self.tag_hashes,
                np.zeros(n, np.uint32) if tag_hashes is None else tag_hashes))
        self.sizes = np.concatenate((self.sizes, sizes))
        self.timestamps = np.concatenate((self.timestamps, np.full(n, timestamp, np.int64)))
        self.size += len(frames)
        return first

    def runs(self) -> list[tuple[int, int]]:
        """(first record index, its offset) of each run of consecutive offsets, once
        acknowledged: one run, unless the batch went out in pieces."""
        return self.offset_runs or [(0, self.base_offset)]

    def __len__(self) -> int:
        return len(self.timestamps)

    def mark_done(self) -> None:
        """Finished: wake whoever waits in :meth:`wait_done`."""
        with _DONE:
            self.finished = True
            done = self._done
        if done is not None:
            done.set()

    def wait_done(self, timeout: float | None) -> bool:
        """Wait until finished (``flush``); False on timeout. The event is made here, not with
        every batch: an Event is a Condition, a lock and a deque for the collector to track."""
        with _DONE:
            if self.finished:
                return True
            if self._done is None:
                self._done = threading.Event()
            done = self._done
        return done.wait(timeout)

    def encode(self) -> None:
        """Encode the plain values into ``buf`` (pieces the request joins: one copy of the
        frames, not two) and ``sizes``, once: the sender seals the batch."""
        if self.values is not None:
            ns = np.fromiter(self.timestamps, np.int64, len(self.timestamps))  # add_value's
            self.timestamps = ns // 1_000_000
            self.buf, self.sizes, _ = column_pieces(self.values, self.timestamps)
            self.values = None

    def frames(self) -> list[bytes]:
        """The frames one by one, until the batch is sent (for tests and debugging: sending
        uses ``buf`` whole, then frees it)."""
        self.encode()
        buf = b"".join(self.buf) if isinstance(self.buf, list) else self.buf
        out, pos = [], 0
        for size in self.sizes:
            out.append(bytes(buf[pos:pos + size]))
            pos += size
        return out
