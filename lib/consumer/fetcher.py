"""Prefetching for the pull consumer: Fetch RPCs per (broker, topic) in background threads.

``parallelism`` worker threads per (broker address, topic) (each with a sticky share of the
partitions, so the broker serves one while we decode another) long-poll ``Fetch`` for the
fetchable partitions of that topic on that broker, decode the frames and append a
:class:`Completed` fetch to one bounded ready queue (``prefetch_max_bytes`` in total, at most
``PER_PARTITION_BUFFERED`` full fetches' bytes per partition, one request in flight per
worker), so memory stays bounded however slow the application is. Only one worker ever fetches
a partition at a time and it appends in offset order, so order per partition is kept.

:meth:`Fetcher.drain` (the application thread, through ``poll``) hands records out and moves
the partition's position with :meth:`SubscriptionState.advance`, which refuses data fetched
under an old epoch or that does not start at the position: such data is dropped, never
delivered twice or out of order. Per-partition errors: OFFSET_OUT_OF_RANGE applies the reset
policy (``error``: poll raises OffsetOutOfRange with earliest/latest); stale routes refresh them.

A hung leader: a Fetch still in flight a second past its long-poll wait is watched
(lib/stuck_calls.py); when the master names another leader for one of its partitions the call
is cancelled, its partitions leave the worker, and the next ``poll`` starts one at the new
leader. gRPC keepalive (lib/rpc.py) ends a call to a peer that stopped answering anyway.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from lib import errors
from lib.config import require
from lib.consumer.coordinator import OffsetClient
from lib.consumer.fetch_worker import Completed, FetchWorker
from lib.consumer.subscription import SubscriptionState
from lib.logs import event
from lib.records import Record, decode_span
from lib.records.columns import FrameColumns, checked_run
from lib.stuck_calls import StuckCallWatch
from lib.types import TopicPartition

T = TypeVar("T")
log = logging.getLogger(__name__)
# A partition is fetched while it has less than this many full fetches (fetch_max_bytes each)
# waiting to be polled. A cap in bytes, not in fetches: at a low rate each fetch brings a few
# records, and a cap of 2 *fetches* left a hot partition out of the worker's next long-poll,
# which then waited on its cold partitions (tens of ms of end-to-end latency).
PER_PARTITION_BUFFERED = 2


@dataclass(frozen=True)
class FetcherConfig:
    fetch_max_bytes: int = 4 << 20  # per partition and request
    fetch_max_wait_ms: int = 500  # long-poll
    fetch_max_total_bytes: int = 16 << 20  # per request
    prefetch_max_bytes: int = 64 << 20  # fetched but not yet polled, all partitions
    rpc_timeout_s: float = 10.0
    parallelism: int = 2  # fetch requests in flight per (broker, topic), partitions split
    read_committed: bool = False  # FetchRequest.read_committed (docs/transactions.md)


    def validate(self) -> None:
        require(1024 <= self.fetch_max_bytes <= 64 << 20,
                f"fetch_max_bytes must be within 1 KiB..64 MiB, got {self.fetch_max_bytes}")
        require(0 <= self.fetch_max_wait_ms <= 60_000,
                f"fetch_max_wait_ms must be within 0..60000, got {self.fetch_max_wait_ms}")
        require(self.fetch_max_total_bytes >= 1024,
                f"fetch_max_total_bytes must be >= 1 KiB, got {self.fetch_max_total_bytes}")
        require(self.prefetch_max_bytes >= self.fetch_max_bytes,
                "prefetch_max_bytes must be >= fetch_max_bytes")
        require(1 <= self.parallelism <= 16,
                f"parallelism must be within 1..16, got {self.parallelism}")


class Fetcher:
    """The ready queue and the worker threads (see the module docstring)."""

    def __init__(self, config: FetcherConfig, sub: SubscriptionState, offsets: OffsetClient,
                 group: Callable[[], str] = str,
                 committed_topics: set[str] | None = None) -> None:
        self.config, self.sub, self.offsets = config, sub, offsets
        # read read_committed whatever the config says (a group's retry topic: retry.py)
        self.committed_topics = set() if committed_topics is None else committed_topics
        self.group = group  # the consumer's group now ("": none), named in every Fetch
        self.routes = offsets.routes
        self.watch = StuckCallWatch(self.routes, "fetch")
        self._cond = threading.Condition()
        self._ready: deque[Completed] = deque()
        self._buffered: dict[TopicPartition, int] = {}  # tp -> frame bytes waiting for poll
        self._bytes = 0
        self._pushed = 0
        self._closed = False
        self._workers: dict[tuple[str, str, int], FetchWorker] = {}
        self._slots: dict[TopicPartition, int] = {}  # which worker of its broker fetches it
        self._seen_versions = (-1, -1)
        self._unrouted = False
        self._last_refresh = 0.0

    # -- application thread ------------------------------------------------------------------

    def ensure_workers(self) -> None:
        """Start a worker for every (broker, topic) with assigned partitions (cheap if none)."""
        versions = (self.sub.version, self.routes.version, self.sub.moves)
        if versions == self._seen_versions and not self._unrouted:
            return
        assigned = self.sub.assignment()
        grouped, missing = self.routes.by_broker(assigned)
        self._unrouted = bool(missing)  # e.g. its broker is down: ask again (rate-limited)
        if missing:
            self.refresh_routes({tp.topic for tp in missing})
        with self._cond:
            if self._closed:
                return
            self._seen_versions = versions
            self._slots = {tp: s for tp, s in self._slots.items() if tp in assigned}
            for address, tps in grouped.items():
                for tp in sorted(tps):
                    self._slots.setdefault(tp, self._emptiest_slot(tp.topic, tps))
                for key in {(address, tp.topic, self._slots[tp]) for tp in tps}:
                    if key not in self._workers:
                        w = self._workers[key] = FetchWorker(self, *key)
                        w.start()
            self._interrupt_stale()

    def _interrupt_stale(self) -> None:
        """Cut short the long-poll of a worker whose request is for a partition that left or
        moved (seek), or while a partition of its share is not in it (just assigned): else
        the new work waits up to ``fetch_max_wait_ms`` for a call whose answer is dropped
        anyway. A reused consumer (a Spark task's next range) lost 500 ms per range to it."""
        fetchable = {tp: epoch for tp, _, epoch in self.sub.fetchable()}
        for w in self._workers.values():
            asked = w.asked
            if not asked:
                continue
            in_call = {tp for tp, _, _ in asked}
            if any(fetchable.get(tp) != epoch for tp, _, epoch in asked) or any(
                    tp not in in_call and self._belongs(w, tp) for tp in fetchable):
                w.interrupt()

    def _emptiest_slot(self, topic: str, tps: list[TopicPartition]) -> int:
        """Spread a broker's partitions of ``topic`` over ``parallelism`` workers (sticky)."""
        load = [0] * self.config.parallelism
        for tp in tps:
            slot = self._slots.get(tp)
            if tp.topic == topic and slot is not None and slot < len(load):
                load[slot] += 1
        return load.index(min(load))

    def refresh_routes(self, topics: set[str]) -> None:
        """Ask the master for routes, at most every 200 ms (errors are logged, not raised)."""
        now = time.monotonic()
        if now - self._last_refresh < 0.2:
            return
        self._last_refresh = now
        try:
            self.offsets.refresh_routes(topics)
        except errors.TubeqError as exc:
            event(log, "fetch.routes_failed", logging.WARNING, error=str(exc))

    def drain(self, max_records: int) -> list[Record]:
        """Up to ``max_records`` ready records, in order per partition; moves positions."""
        out: list[Record] = []
        for records in self._drain(max_records, self._take):
            out += records
        return out

    def drain_columns(self, max_records: int) -> list[FrameColumns]:
        """:meth:`drain`, handing out checked frame runs instead of Records (no decoding)."""
        return self._drain(max_records, self._take_columns)

    def _drain(self, max_records: int, take: Callable[[Completed, int], T | None]) -> list[T]:
        """Walk the ready queue, taking up to ``max_records`` records with ``take`` (which
        returns what it took, or None when it dropped the fetch)."""
        out: list[T] = []
        taken, sub = 0, self.sub
        with self._cond:
            ready, held = self._ready, []
            while ready and taken < max_records:
                c = ready.popleft()
                if sub.epoch(c.tp) != c.epoch:
                    self._release(c)
                    continue
                if sub.is_paused(c.tp):
                    held.append(c)
                    continue
                got = take(c, max_records - taken)
                if got is None:
                    continue
                out.append(got)
                taken += len(got)
                if c.index < len(c.offsets):
                    ready.appendleft(c)
                else:
                    self._release(c)
            ready.extendleft(reversed(held))
        return out

    def _take_columns(self, c: Completed, want: int) -> FrameColumns | None:
        """Check up to ``want`` frames of ``c`` and take them (no decoding); None if ``c`` was
        dropped."""
        sizes, first = c.sizes, c.index
        if sizes is None:
            return self._take_run(c, want, checked_run)
        return self._take_run(c, want, lambda frames, offsets, pos, partition, topic: checked_run(
            frames, offsets, pos, partition, topic, sizes[first:first + len(offsets)]))

    def _take(self, c: Completed, want: int) -> list[Record] | None:
        """Decode up to ``want`` records of ``c``; None if ``c`` was dropped."""
        if c.frames.__class__ is not bytes:  # records slice their values out of bytes
            c.frames = bytes(c.frames)
        return self._take_run(c, want, decode_span)

    def _take_run(self, c: Completed, want: int,
                  decode: Callable[[bytes, list[int], int, int, str], tuple[T, int]]) -> T | None:
        """Take up to ``want`` frames of ``c`` through ``decode`` (which checks every frame
        and returns what it made and the end byte) and move the partition's position past
        them; None if ``c`` was dropped: a bad frame fails the partition (poll raises it,
        naming the offset; a corrupt frame is never delivered), and data that does not line
        up with the position is refetched."""
        sub, tp, end = self.sub, c.tp, min(len(c.offsets), c.index + want)
        try:
            got, stop = decode(c.frames, c.offsets[c.index:end], c.pos, tp.partition, tp.topic)
            if end == len(c.offsets) and stop != len(c.frames):
                raise errors.CorruptRecord(f"{len(c.frames) - stop} frame bytes past the last "
                                           f"offset of {tp.topic}[{tp.partition}]")
        except errors.CorruptRecord as exc:
            sub.fail(tp, exc)
            self._release(c)
            return None
        new_pos = c.offsets[end - 1] + 1 if end < len(c.offsets) else c.next_offset
        if not sub.advance(tp, c.epoch, c.expected, new_pos):
            sub.invalidate(tp)
            self._release(c)
            return None
        c.index, c.pos, c.expected = end, stop, new_pos
        return got

    def wait(self, timeout: float) -> None:
        """Block until a worker appends a fetch (or ``timeout``)."""
        with self._cond:
            seen = self._pushed
            self._cond.wait_for(lambda: self._pushed != seen or self._closed, timeout)

    def wakeup(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def clear(self) -> None:
        """Drop everything prefetched (e.g. after a rebalance)."""
        with self._cond:
            self._ready.clear()
            self._buffered.clear()
            self._bytes = 0
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            workers = list(self._workers.values())
            self._cond.notify_all()
        for w in workers:
            w.cancel()
        for w in workers:
            w.join(timeout=5)
        self.watch.close()

    # -- worker side -------------------------------------------------------------------------

    def _release(self, c: Completed) -> None:
        n = self._buffered.get(c.tp, 0) - c.nbytes
        if n > 0:
            self._buffered[c.tp] = n
        else:
            self._buffered.pop(c.tp, None)
        self._bytes -= c.nbytes
        self._cond.notify_all()

    def push(self, c: Completed) -> None:
        """A worker's fetch result, into the ready queue."""
        with self._cond:
            self._ready.append(c)
            self._buffered[c.tp] = self._buffered.get(c.tp, 0) + c.nbytes
            self._bytes += c.nbytes
            self._pushed += 1
            self._cond.notify_all()

    def work_for(self, worker: FetchWorker) -> list[tuple[TopicPartition, int, int]] | None:
        """What ``worker`` should fetch now: (tp, offset, epoch); None = exit (nothing ours)."""
        with self._cond:
            while not self._closed:
                mine = [(tp, pos, ep) for tp, pos, ep in self.sub.fetchable()
                        if self._belongs(worker, tp)]
                if not mine and not any(self._belongs(worker, tp)
                                        for tp in self.sub.assignment()):
                    del self._workers[(worker.address, worker.topic, worker.slot)]
                    return None
                room = self._bytes < self.config.prefetch_max_bytes
                cap = PER_PARTITION_BUFFERED * self.config.fetch_max_bytes
                todo = [(tp, worker.next_offset(tp, pos, ep), ep) for tp, pos, ep in mine
                        if self._buffered.get(tp, 0) < cap]
                held_back = len(todo) < len(mine)
                if todo and room and not (held_back and worker.all_at_end(todo)):
                    return todo
                # Nothing to fetch, or only partitions at their end while one with more data
                # waits for room: a long-poll on those would hold this worker for
                # fetch_max_wait_ms after the room came (a 0.5 s stall mid-read of a backlog);
                # _release wakes us instead.
                self._cond.wait(0.5)
            return None

    def _belongs(self, worker: FetchWorker, tp: TopicPartition) -> bool:
        return (tp.topic == worker.topic and self._slots.get(tp) == worker.slot
                and self.routes.address(tp) == worker.address)
