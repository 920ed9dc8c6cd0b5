"""Keep Python's cyclic garbage collector off the broker's long-lived heap.

A broker's heap is mostly long-lived: its stores, their indexes and caches, the routes, the
ACLs (about a million objects at 10,000 topics). Python's cyclic collector walks all of them
at each full collection, and it runs one whenever the objects that survived the younger
collections reach a quarter of those the last one found: at 10,000 topics the walk was a
quarter of the broker's CPU (load.bench_many_topics: 10,000 topics at 0.18 of one topic's rate
with the heap frozen against 0.13 without, the broker's CPU 41 s against 55;
docs/benchmarks-history.md#many-topics).

So the broker *settles* its heap: one full collection, then ``gc.freeze()`` moves what is left
out of every generation, and later collections walk only what came after. It settles when
the stores it holds changed (a view opened or closed some), at most every
``heap_settle_s``, and at least every :data:`SETTLE_AT_LEAST_S`: a frozen object that later
becomes cyclic garbage (a closed store, a replaced table) is freed at the next settle, which
unfreezes before it collects. A settle holds the GIL for one full collection (tens to
hundreds of milliseconds at 10,000 topics), as the collector's own full collections did.
"""
from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Hashable

from lib.logs import event

log = logging.getLogger(__name__)
CHECK_S = 5.0  # how often the stores' shape is looked at
SETTLE_AT_LEAST_S = 600.0


def settle() -> None:
    """Collect everything (frozen objects too), then freeze what is left."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


class HeapSettler(threading.Thread):
    """Settles the heap when ``shape()`` (the broker's open stores) changed, at most every
    ``min_s``, and at least every SETTLE_AT_LEAST_S; stops with ``stopped``."""

    def __init__(self, shape: Callable[[], Hashable], min_s: float, stopped: threading.Event,
                 clock: Callable[[], float] = time.monotonic,
                 settle_heap: Callable[[], None] = settle) -> None:
        super().__init__(name="heap-settler", daemon=True)
        self.shape, self.min_s, self.stopped = shape, min_s, stopped
        self._clock, self._settle = clock, settle_heap
        self._settled_shape: Hashable = None
        self._settled_at = float("-inf")

    def run(self) -> None:
        while not self.stopped.wait(CHECK_S):
            self.maybe_settle()

    def maybe_settle(self) -> bool:
        """Settle now if due; whether it did."""
        shape, now = self.shape(), self._clock()
        since = now - self._settled_at
        if since < SETTLE_AT_LEAST_S and (shape == self._settled_shape or since < self.min_s):
            return False
        started = time.perf_counter()
        self._settle()
        self._settled_shape, self._settled_at = shape, now
        event(log, "broker.heap_settled", frozen=gc.get_freeze_count(),
              took_ms=round((time.perf_counter() - started) * 1e3, 1))
        return True
