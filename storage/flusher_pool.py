"""The threads that run the stores' flushers: a few for every store of a process, not one each.

A broker holds a store per topic (TubeMQ's case is thousands of topics per broker); a thread
per store meant 10,000 threads for 10,000 topics, each woken on its own timers. Here a
:class:`~storage.flusher.Flusher` is a task: :meth:`Flusher.step` does one round (write the
block that is due, fsync, checkpoint, retention) and says how long until it wants the next
one. The pool keeps the tasks in a ready queue (run in arrival order, one thread per task at a
time) and a timer heap; a store wakes its task (:meth:`FlusherPool.wake`) when an append, a
sync waiter or close makes it due sooner. Fsyncs release the GIL, so a few threads overlap
the disk waits of several stores.

A store runs in :func:`default_pool` (the process's) unless it is given one: a broker gives
its stores a pool of ``flusher_threads``.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

log = logging.getLogger(__name__)

# Enough to overlap the fsyncs of sync topics; more only pass the GIL around (every runnable
# flusher wakes for it, and each hand-over is a context switch): on the 2-core VM, at 10,000
# busy topics 2 write as fast as 4 (no append waited for them) and the broker runs 0.62-0.64
# of its one-topic rate against 0.50-0.53 (4 against 16 before: 0.45-0.48 against 0.37-0.41);
# 1 falls behind. One per core, 2 to 4 (docs/benchmarks-history.md#many-topics).
DEFAULT_THREADS = min(4, max(2, os.cpu_count() or 2))


class Task(Protocol):
    def step(self) -> float | None:
        """One round; seconds until the next (0: at once), None when finished."""
        ...


class _Slot:
    """The pool's bookkeeping of one task (guarded by the pool's lock)."""

    __slots__ = ("task", "queued", "running", "rerun", "timer", "finished")

    def __init__(self, task: Task) -> None:
        self.task = task
        self.queued = self.running = self.rerun = self.finished = False
        self.timer = 0  # bumped on every wake: a timer entry with an older token is stale


class FlusherPool:
    """``threads`` threads running :class:`Task` steps (module docstring)."""

    def __init__(self, threads: int = DEFAULT_THREADS, name: str = "flusher") -> None:
        if threads < 1:
            raise ValueError(f"a flusher pool needs at least 1 thread, got {threads}")
        self.threads, self.name = threads, name
        self._cv = threading.Condition()
        self._ready: deque[_Slot] = deque()
        self._timers: list[tuple[float, int, int, _Slot]] = []  # (at, seq, token, slot)
        self._seq = itertools.count()
        self._workers: list[threading.Thread] = []
        self._pid = os.getpid()
        self._tasks = 0  # added and not finished
        self._stopped = False
        self._local = threading.local()  # .deferred: the wakes a thread gathers (wakes_deferred)

    def add(self, task: Task) -> _Slot:
        """Schedule ``task``'s first step now; returns the handle :meth:`wake` takes."""
        slot = _Slot(task)
        with self._cv:
            self._start_workers()
            self._tasks += 1
            self._enqueue(slot)
        return slot

    def wake(self, slot: _Slot) -> None:
        """Run the task's next step soon (it became due): now if idle, again after the
        current step if running."""
        deferred = getattr(self._local, "deferred", None)
        if deferred is not None:
            deferred.append(slot)
            return
        with self._cv:
            self._enqueue(slot)

    @contextmanager
    def wakes_deferred(self) -> Iterator[None]:
        """Gather the wakes this thread makes inside the block and apply them together at its
        end: one lock and one notify per idle worker, not one each. A produce call appending
        to hundreds of stores (one ProduceMany entry each) woke a flusher per entry, each a
        futex call holding the GIL. Never around code that waits for a flusher."""
        if getattr(self._local, "deferred", None) is not None:
            yield  # nested: the outer block applies them
            return
        self._local.deferred = slots = []
        try:
            yield
        finally:
            self._local.deferred = None
            if slots:
                with self._cv:
                    queued = sum(self._woken(slot) for slot in slots)
                    if queued:
                        self._cv.notify(queued)

    def _woken(self, slot: _Slot) -> bool:
        """Under the lock: mark ``slot`` due; True when it joined the ready queue."""
        if slot.finished:
            return False
        if slot.running:
            slot.rerun = True
            return False
        if slot.queued:
            return False
        slot.timer += 1
        slot.queued = True
        self._ready.append(slot)
        return True

    def _enqueue(self, slot: _Slot) -> None:
        if self._woken(slot):
            self._cv.notify()

    def _start_workers(self) -> None:
        """Lazily, and again in a forked child (threads do not survive a fork)."""
        if self._workers and self._pid == os.getpid():
            return
        self._pid = os.getpid()
        self._ready, self._timers = deque(s for s in self._ready if not s.finished), []
        self._workers = [threading.Thread(target=self._work, daemon=True,
                                          name=f"{self.name}-{i}") for i in range(self.threads)]
        for t in self._workers:
            t.start()

    def _next(self) -> _Slot | None:
        with self._cv:
            while True:
                if self._stopped:
                    return None
                now = time.monotonic()
                while self._timers and self._timers[0][0] <= now:
                    _, _, token, slot = heapq.heappop(self._timers)
                    if token == slot.timer and not (slot.queued or slot.running
                                                    or slot.finished):
                        slot.queued = True
                        self._ready.append(slot)
                if self._ready:
                    slot = self._ready.popleft()
                    slot.queued, slot.running, slot.rerun = False, True, False
                    return slot
                self._cv.wait(self._timers[0][0] - now if self._timers else None)

    def _work(self) -> None:
        while True:
            slot = self._next()
            if slot is None:
                return
            try:
                wait = slot.task.step()
            except BaseException:  # noqa: BLE001 - step handles its own failures; never lose the thread
                log.exception("flusher step failed")
                wait = None
            with self._cv:
                slot.running = False
                if wait is None:
                    slot.finished = True
                    self._tasks -= 1
                elif slot.rerun or wait <= 0:
                    self._enqueue(slot)
                else:
                    slot.timer += 1
                    at = time.monotonic() + wait
                    sooner = not self._timers or at < self._timers[0][0]
                    heapq.heappush(self._timers, (at, next(self._seq), slot.timer, slot))
                    if len(self._timers) > 2 * self._tasks + 64:
                        self._drop_stale_timers()
                    if sooner:  # a worker waiting on a later timer recomputes; a later
                        self._cv.notify()  # one woke a worker for nothing (every step)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the threads once every store using the pool is closed (a broker's stop)."""
        with self._cv:
            self._stopped = True
            self._cv.notify_all()
            workers = self._workers
        for t in workers:
            t.join(timeout)

    def _drop_stale_timers(self) -> None:
        """A wake outdates the task's timer entry, which stays in the heap until it comes
        due: a busy store with an hour's housekeeping timer would pile them up."""
        self._timers = [e for e in self._timers if e[2] == e[3].timer and not e[3].finished]
        heapq.heapify(self._timers)

    def stats(self) -> dict[str, int]:
        with self._cv:
            return {"threads": len(self._workers), "ready": len(self._ready),
                    "timers": len(self._timers)}


_default: FlusherPool | None = None
_default_lock = threading.Lock()


def default_pool() -> FlusherPool:
    """The process's shared pool (``DEFAULT_THREADS`` threads, started at first use)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = FlusherPool()
        return _default
