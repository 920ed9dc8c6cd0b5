"""The producer's buffer: records grouped into per-partition batches, with bounded memory.

``Producer.send`` appends an encoded frame to the open batch of its partition; the sender thread
:meth:`Accumulator.drain` s batches that are ready (full, lingered long enough, flushing, or a
retry whose backoff is over). Ordering rules:

- at most one batch per partition is in flight: :meth:`drain` skips a partition until
  :meth:`release` (success or final failure) or :meth:`requeue` (retry) hands it back;
- a retried batch goes back to the *head* of its partition's queue, sealed, so it is sent again
  before anything appended after it.

Memory: ``buffer_bytes`` bounds the frame bytes held (queued + in flight). :meth:`append` waits
up to ``max_block_s`` for room and then raises, so a slow cluster slows the caller down instead
of growing the heap. One condition variable guards everything; appends take it once per record
and wake the sender only when a batch fills or a partition gets its first batch.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

import numpy as np

from lib.errors import ClientClosed, RequestTimedOut
from lib.producer.batch import Batch
from lib.producer.bulk import batch_bounds
from lib.producer.futures import RecordFuture
from lib.records import FRAME_HEADER_SIZE, MAX_RECORDS_PER_BATCH
from lib.types import TopicPartition

YIELD_EVERY_MASK = 255  # appends yield the GIL once every 256 records of a batch
_new_future = object.__new__


class Accumulator:
    """Per-partition batch queues shared by the caller threads and the sender thread."""

    def __init__(self, batch_bytes: int, buffer_bytes: int, linger_s: float,
                 max_block_s: float) -> None:
        if batch_bytes // FRAME_HEADER_SIZE >= MAX_RECORDS_PER_BATCH:
            # add_value bounds a plain batch by its bytes alone: they must bound its count.
            raise ValueError(f"batch_bytes {batch_bytes} allows more than "
                             f"{MAX_RECORDS_PER_BATCH} records in a batch")
        self.batch_bytes = batch_bytes
        self.buffer_bytes = buffer_bytes
        self.linger_s = linger_s
        self.max_block_s = max_block_s
        # append() takes the raw lock (cheaper than entering the Condition); both are one lock.
        self._lock = threading.Lock()  # never re-entered; cheaper to take than an RLock
        self.cond = threading.Condition(self._lock)
        self._queues: dict[TopicPartition, deque[Batch]] = {}
        # The partitions whose queue may hold a batch: drain() walks these, not every
        # partition ever written (10,000 topics each written once made each drain a walk of
        # 10,000 empty queues, half the producer's time). Added to whenever a queue gains a
        # batch, pruned by drain() when it finds the queue empty.
        self._queued: dict[TopicPartition, deque[Batch]] = {}
        self._in_flight: set[TopicPartition] = set()
        self._incomplete: set[Batch] = set()
        self._used = 0
        self.flushing = 0  # > 0: ignore linger, send everything now
        self.closed = False  # no more appends; linger ignored
        self.forced = False  # close timed out: fail what is left instead of waiting
        self._room_waiters = 0  # send() calls blocked on a full buffer
        self._claims: set[int] = set()  # send_sync's direct sends in progress (claim)
        self._last_claim = 0
        self._claim_waiters = 0  # flush() calls waiting for claims to end

    # ------------------------------------------------------------------ caller side

    def append(self, tp: TopicPartition, frame: bytes, tag_hash: int,
               timestamp: int) -> RecordFuture:
        """Queue one encoded frame and return its future; blocks while the buffer is full
        (up to max_block_s)."""
        return self.add(tp, (frame,), len(frame), tag_hash, timestamp)

    def add(self, tp: TopicPartition, pieces: tuple[bytes, ...], size: int, tag_hash: int,
            timestamp: int) -> RecordFuture:
        """Append one frame of ``size`` bytes, given as ``pieces``, to the open batch of
        ``tp``."""
        with self._lock:
            batch = self._open_batch(tp, size)
            future = self._put(batch, pieces, size, tag_hash, timestamp)
        if future._index & YIELD_EVERY_MASK == YIELD_EVERY_MASK:
            time.sleep(0)  # as in add_value
        return future

    def add_value(self, sticky: list, value: bytes, time_ns: int) -> RecordFuture | None:
        """Append a plain value (encoded when its batch is sealed) to the open batch of
        ``sticky``, the producer's ``[partition, max frame bytes, batch or None]`` of a topic;
        a batch sealed meanwhile (linger) is followed by a new one of the same partition.
        ``time_ns``: the record's time, as ``time.time_ns()`` (the batch turns the whole
        column into milliseconds when sealed: a division per record less in ``send``).
        Returns None, appending nothing, when the value is over the max frame bytes or the
        batch is full: the producer moves on to its next sticky partition (one size check
        serves both decisions, under the lock)."""
        size = len(value) + FRAME_HEADER_SIZE
        if size > sticky[1]:
            return None
        batch = sticky[2]
        lock = self._lock
        lock.acquire()  # not ``with``: 70 ns against 170 on this path of every send()
        try:
            # No record-count check: batch_bytes bounds a batch below MAX_RECORDS_PER_BATCH.
            if batch is None or batch.sealed or batch.size + size > self.batch_bytes or \
                    self._used + size > self.buffer_bytes or self.closed:
                if batch is not None and batch.size + size > self.batch_bytes:
                    return None
                batch = sticky[2] = self._open_batch(sticky[0], size, plain=True)
            values = batch.values
            index = len(values)  # type: ignore[arg-type]
            values.append(value)  # type: ignore[union-attr]
            batch.timestamps.append(time_ns)
            batch.size += size
            self._used += size
        finally:
            lock.release()
        # RecordFuture(outcome, index) without running __init__: 40 of its 120 ns.
        future = _new_future(RecordFuture)
        future._outcome, future._index = batch.outcome, index
        if index & YIELD_EVERY_MASK == YIELD_EVERY_MASK:  # not at 0: a lone record waits not
            # A thread calling send() in a loop keeps the GIL for the whole 5 ms switch
            # interval, stalling the sender thread and gRPC completions of the one in-flight
            # batch per partition; yielding every 256 records (about 1 ms) bounds that wait.
            time.sleep(0)
        return future

    def claim(self, tp: TopicPartition, size: int) -> int:
        """``send_sync``'s direct path: when ``tp`` has nothing queued or in flight and the
        buffer has room, mark it in flight for the caller's own RPC and hold ``size`` bytes.
        Returns the claim's number, or 0 (busy, full or closed: queue the record instead).
        No batch object: a send that succeeds costs a lock round trip here and one in
        :meth:`unclaim`; one that fails becomes a batch (:meth:`adopt`)."""
        with self._lock:
            if (self.closed or tp in self._in_flight or self._queues.get(tp)
                    or self._used + size > self.buffer_bytes):
                return 0
            self._in_flight.add(tp)
            self._used += size
            self._last_claim += 1
            self._claims.add(self._last_claim)
            return self._last_claim

    def unclaim(self, claim: int, tp: TopicPartition, size: int) -> None:
        """The claimed send was acknowledged: free its partition and bytes."""
        with self._lock:
            self._claims.discard(claim)
            self._in_flight.discard(tp)
            self._used -= size
            if self._queues.get(tp) or self._room_waiters or self._claim_waiters or self.closed:
                self.cond.notify_all()  # the sender, a blocked send() or a flush() can go on

    def adopt(self, claim: int, tp: TopicPartition, frame: bytes, tag_hash: int,
              timestamp: int) -> tuple[RecordFuture, Batch]:
        """A claimed send that failed becomes a sealed one-record batch, still in flight and
        holding its bytes, for the sender thread to retry or fail like any other."""
        with self._lock:
            batch = Batch(tp, time.monotonic(), sealed=True)
            self._claims.discard(claim)
            self._used -= len(frame)  # _put counts it again, for the batch
            self._incomplete.add(batch)
            future = self._put(batch, (frame,), len(frame), tag_hash, timestamp)
            self.cond.notify_all()
            return future, batch

    def claims(self) -> set[int]:
        """The claimed sends in progress (for flush)."""
        with self._lock:
            return set(self._claims)

    def wait_claims(self, claims: set[int], timeout: float | None) -> bool:
        """Wait until none of ``claims`` is in progress; False on timeout."""
        with self.cond:
            self._claim_waiters += 1
            try:
                return self.cond.wait_for(lambda: not claims & self._claims, timeout)
            finally:
                self._claim_waiters -= 1

    def _put(self, batch: Batch, pieces: tuple[bytes, ...], size: int, tag_hash: int,
             timestamp: int) -> RecordFuture:
        """Lay one frame into ``batch`` (lock held)."""
        index = len(batch.timestamps)
        if tag_hash and batch.tag_hashes is None:
            batch.tag_hashes = [0] * index
        if batch.tag_hashes is not None:
            batch.tag_hashes.append(tag_hash)
        buf = batch.buf
        for piece in pieces:
            buf += piece
        batch.sizes.append(size)
        batch.timestamps.append(timestamp)
        batch.size += size
        self._used += size
        return RecordFuture(batch.outcome, index)

    def append_run(self, tp: TopicPartition, frames: bytes, sizes: np.ndarray,
                   tag_hashes: np.ndarray | None, timestamp: int) -> list[tuple[Batch, int, int]]:
        """Queue frames encoded together (``Producer.send_batch``) after whatever ``tp``
        already holds (order is kept), in batches of about ``batch_bytes``; blocks while the
        buffer is full. A piece that fits joins the partition's last queued run batch (one
        never sent), as Kafka's records join their partition's open batch: the runs given
        while the partition has a call in flight go out in one call when it returns, not one
        call per run each after the last. Returns (batch, index of the piece's first record
        in it, records) per piece, in order."""
        starts, bounds = batch_bounds(sizes, self.batch_bytes)
        out = []
        whole = memoryview(frames)  # batches hold views: the request is the one copy
        for i, j in zip(bounds, bounds[1:], strict=False):
            a, b = int(starts[i]), int(starts[j])
            tags = None if tag_hashes is None else tag_hashes[i:j]
            with self._lock:
                if self.closed:
                    raise ClientClosed("the producer is closed: it accepts no more records")
                if self._used + b - a > self.buffer_bytes:
                    self._wait_for_room(b - a)
                queue = self._queue(tp)
                tail = queue[-1] if queue else None
                if tail is not None and tail.joinable and tail.size + b - a <= self.batch_bytes:
                    batch, first = tail, tail.join_run(whole[a:b], sizes[i:j], tags, timestamp)
                else:
                    if tail is not None:
                        tail.sealed = True  # records sent after this run go after it
                    batch, first = Batch(tp, time.monotonic(), whole[a:b], sizes[i:j], tags,
                                         np.full(j - i, timestamp, np.int64), b - a,
                                         sealed=True, joinable=True), 0
                    queue.append(batch)
                    self._incomplete.add(batch)
                self._used += b - a
                self.cond.notify_all()
            out.append((batch, first, j - i))
        return out

    def _open_batch(self, tp: TopicPartition, size: int, plain: bool = False) -> Batch:
        """The batch of ``tp`` that takes ``size`` more bytes, of encoded frames or (``plain``)
        of plain values, opened if needed (lock held)."""
        if self.closed:
            raise ClientClosed("the producer is closed: it accepts no more records")
        if self._used + size > self.buffer_bytes:
            self._wait_for_room(size)
        queue = self._queues.get(tp)
        if queue:
            batch = queue[-1]
            if not batch.sealed and batch.size + size <= self.batch_bytes and \
                    len(batch.timestamps) < MAX_RECORDS_PER_BATCH and \
                    (batch.values is not None) == plain:
                return batch
            batch.sealed = True  # a batch follows it: nothing more goes into it (order)
        else:
            queue = self._queue(tp)
        batch = Batch(tp, time.monotonic(), values=[] if plain else None)
        queue.append(batch)
        self._incomplete.add(batch)
        self.cond.notify_all()  # a new batch: the sender learns its linger deadline
        return batch

    def _queue(self, tp: TopicPartition) -> deque[Batch]:
        """The queue of ``tp``, about to take a batch (lock held)."""
        queue = self._queues.get(tp)
        if queue is None:
            queue = self._queues[tp] = deque()
        self._queued[tp] = queue
        return queue

    def _wait_for_room(self, size: int) -> None:
        if size > self.buffer_bytes:
            raise RequestTimedOut(
                f"message of {size} bytes is larger than the whole producer buffer "
                f"({self.buffer_bytes} bytes): raise buffer_bytes", size=size,
                limit=self.buffer_bytes)
        deadline = time.monotonic() + self.max_block_s
        while self._used + size > self.buffer_bytes:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RequestTimedOut(
                    f"producer buffer full ({self._used} of {self.buffer_bytes} bytes) for "
                    f"{self.max_block_s} s: the cluster is not keeping up or is unreachable",
                    used=self._used, limit=self.buffer_bytes)
            self._room_waiters += 1
            try:
                self.cond.wait(left)
            finally:
                self._room_waiters -= 1

    # ------------------------------------------------------------------ sender side

    def drain(self, now: float, leader_of: Callable[[TopicPartition], str | None] | None = None
              ) -> tuple[list[Batch], float | None]:
        """Take the ready head batches of idle partitions (call with ``cond`` held) and, as
        Kafka's accumulator does, the lingering head batches of idle partitions led by a
        broker that one of those goes to (``leader_of``: from the cached routes): they ride
        in the same call (ProduceMany) instead of a call of their own a moment later.

        Returns the batches and the time of the next deadline (linger or backoff) to wait for.
        """
        ready: list[Batch] = []
        waiting: list[tuple[TopicPartition, float, bool]] = []  # (tp, due, lingering)
        emptied: list[TopicPartition] = []
        for tp, queue in self._queued.items():
            if not queue:
                emptied.append(tp)
                continue
            if tp in self._in_flight:
                continue
            head = queue[0]
            due = self._due(head, len(queue))
            if due <= now:
                ready.append(self._take(tp))
            else:  # a batch backing off after a failure is never taken early
                waiting.append((tp, due, not head.retry_at))
        for tp in emptied:
            del self._queued[tp]
        nodes = {leader_of(b.tp) for b in ready} - {None, ""} \
            if ready and leader_of is not None else ()
        next_at: float | None = None
        for tp, due, lingering in waiting:
            if lingering and nodes and leader_of(tp) in nodes:
                ready.append(self._take(tp))
            elif next_at is None or due < next_at:
                next_at = due
        return ready, next_at

    def _take(self, tp: TopicPartition) -> Batch:
        head = self._queued[tp].popleft()
        self._in_flight.add(tp)
        head.sealed = True
        head.joinable = False  # its bytes are about to be sent (and kept for retries)
        return head

    def _due(self, head: Batch, queued: int) -> float:
        if head.retry_at:
            return head.retry_at
        if queued > 1 or head.size >= self.batch_bytes or self.flushing or self.closed:
            return 0.0
        return head.created + self.linger_s

    def requeue(self, batch: Batch, retry_at: float) -> None:
        """Put a batch back at the head of its partition for another attempt."""
        with self.cond:
            batch.retry_at = retry_at
            self._queue(batch.tp).appendleft(batch)
            self._in_flight.discard(batch.tp)
            self.cond.notify_all()

    def replace(self, batch: Batch, pieces: list[Batch]) -> None:
        """``batch`` (in flight, or just drained) goes back as ``pieces`` holding the same
        bytes, at the head of its partition in order, to be sent before anything else."""
        with self.cond:
            self._incomplete.discard(batch)
            self._incomplete.update(pieces)
            self._queue(batch.tp).extendleft(reversed(pieces))
            self._in_flight.discard(batch.tp)
            self.cond.notify_all()

    def release(self, batch: Batch, in_flight: bool = True) -> None:
        """The batch is finished (acknowledged or failed): free its bytes (and its partition,
        unless it was still queued: then another batch of the partition may be in flight)."""
        with self.cond:
            if batch in self._incomplete and in_flight:
                self._in_flight.discard(batch.tp)
            if batch in self._incomplete:
                self._incomplete.discard(batch)
                self._used -= batch.size
            if self._queues.get(batch.tp) or self._room_waiters or self.closed:
                # Someone can use what was freed: the sender (the partition's next batch, or
                # closing), or a send() blocked on a full buffer. Otherwise waking the sender
                # only makes it contend for the GIL (a send_sync's release, every time).
                self.cond.notify_all()
        # Its bytes go now: a topic's producer keeps its last batch (the sticky partition's),
        # which held its whole request until the topic's next record (200 KiB a topic here).
        batch.payload, batch.buf, batch.values = b"", bytearray(), None
        batch.mark_done()

    def abort_queued(self) -> list[Batch]:
        """Remove every queued (not in flight) batch; the caller fails their futures."""
        with self.cond:
            batches = [b for q in self._queues.values() for b in q]
            for q in self._queues.values():
                q.clear()
            for batch in batches:  # a send() holding one as its topic's open batch opens
                batch.sealed = True  # another: this one is failed (and its bytes dropped)
            return batches

    def incomplete(self) -> list[Batch]:
        """Every batch not finished yet (queued or in flight)."""
        with self.cond:
            return list(self._incomplete)

    def incomplete_count(self) -> int:
        """Unfinished batches (call with ``cond`` held or accept a racy answer)."""
        return len(self._incomplete)

    @property
    def used_bytes(self) -> int:
        return self._used

    def in_flight_count(self) -> int:
        with self.cond:
            return len(self._in_flight)
