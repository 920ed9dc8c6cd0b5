"""Keep CPython's full garbage collections off a server's long-lived objects.

Why: a broker of 10,000 topics holds about a million objects that live as long as their
stores (stores, partitions, indexes, flusher state), a master about as many for its topics.
A full collection visits every one of them with the GIL held: on this project's VMs 0.35-1.1 s
during which no request of the process moves, every few seconds while topics are created and
again under load. After a full collection that took long, its survivors are frozen
(``gc.freeze``: a permanent generation no collection visits), so the next full collections
visit only what was made since: the broker's longest pause in ``load.bench_many_topics`` at
10,000 topics 0.09-0.14 s against 0.74-1.10 s (throughput the same within the noise).

What it costs: an object frozen that later becomes garbage inside a reference cycle is not
collected while frozen (garbage without cycles is freed by reference counting, as always):
a dropped store's cycles, or an in-flight request's caught by a freeze. So at most once every
``thaw_every_s`` a slow full collection thaws everything instead (``gc.unfreeze``) and the
next one sees it all again: one long pause per interval, where there was one every few
seconds. Only the figures this module keeps are updated inside the collector's callback
(plain attributes, no locks: a callback runs in whatever thread allocated, possibly inside a
lock of its own); the metrics read them when scraped.

``TUBEQ_GC_FREEZE=0`` leaves the collector alone: the pauses are still timed.
"""
from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

ENV = "TUBEQ_GC_FREEZE"
SLOW_S = 0.02  # a full collection this long freezes its survivors
THAW_EVERY_S = 600.0


@dataclass(frozen=True)
class FreezeConfig:
    freeze: bool = True  # False: only time the full collections
    slow_s: float = SLOW_S
    thaw_every_s: float = THAW_EVERY_S


class LongLivedFreezer:
    """The ``gc.callbacks`` entry that freezes after slow full collections, and its figures."""

    def __init__(self, config: FreezeConfig = FreezeConfig(),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config, self.clock = config, clock
        self.full_collections = 0
        self.full_seconds = 0.0  # every full collection's pause, summed
        self.longest_s = 0.0
        self.freezes = 0
        self.thaws = 0
        self._started: float | None = None
        self._last_thaw = clock()

    def __call__(self, phase: str, info: dict) -> None:
        if info.get("generation") != 2:
            return
        now = time.perf_counter()
        if phase == "start":
            self._started = now
            return
        if self._started is None:
            return
        took, self._started = now - self._started, None
        self.full_collections += 1
        self.full_seconds += took
        self.longest_s = max(self.longest_s, took)
        if took < self.config.slow_s or not self.config.freeze:
            return
        # The young generations are empty now and the old one holds only what survived: no
        # garbage is frozen at this moment.
        at = self.clock()
        if at - self._last_thaw >= self.config.thaw_every_s:
            self._last_thaw = at
            self.thaws += 1
            gc.unfreeze()
        else:
            self.freezes += 1
            gc.freeze()

    def figures(self) -> tuple[float, ...]:
        """The values of :data:`FIGURES`, in order (read by lib/metrics.py)."""
        return (self.full_collections, self.full_seconds, self.longest_s, self.freezes,
                self.thaws)


FIGURES = (  # (metric name, help): counters end in _total
    ("tubeq_gc_full_collections_total", "full collections (generation 2)"),
    ("tubeq_gc_full_collection_seconds_total", "their pauses, summed"),
    ("tubeq_gc_longest_full_collection_seconds", "the longest full collection since start"),
    # Counts of freezes, not of objects frozen: gc.get_freeze_count() walks the whole
    # permanent generation (17 ms for 2 M objects, with the GIL held) at every scrape.
    ("tubeq_gc_freezes_total", "slow full collections whose survivors were frozen"),
    ("tubeq_gc_thaws_total", "slow full collections that unfroze everything instead"),
)


_lock = threading.Lock()
_installed: LongLivedFreezer | None = None


def freeze_long_lived(config: FreezeConfig | None = None) -> LongLivedFreezer:
    """Install the freezer in this process once (later calls return the first one); with
    ``TUBEQ_GC_FREEZE=0`` it only times the full collections."""
    global _installed
    with _lock:
        if _installed is None:
            off = os.environ.get(ENV, "1").strip() in ("0", "false", "no")
            config = config or FreezeConfig()
            _installed = LongLivedFreezer(replace(config, freeze=config.freeze and not off))
            gc.callbacks.append(_installed)
        return _installed


def installed() -> LongLivedFreezer | None:
    return _installed
