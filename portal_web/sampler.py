"""History for the charts: a thread that samples the cluster every ``sample_interval_s`` into
rings covering ``history_s`` (an hour by default), kept in the portal's memory only.

The portal needs an identity of its own for this (``monitor_credentials_file``): a user that
may describe the cluster's topics and groups (a viewer is enough). Without one the sampler is
off and the charts say so. What is sampled:

- messages in: the sum of every partition's latest offset (its rise is what was produced);
- messages out: the sum of every group's committed offsets (its rise is what groups consumed
  and committed; a consumer that never commits does not show);
- each group's total lag;
- each partition's latest offset at the last two samples (its rate now).

Counters that fall (a topic deleted, offsets reset) count as 0 for that interval.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from lib.admin import AdminClient
from lib.errors import TubeqError
from lib.logs import event

log = logging.getLogger(__name__)
MAX_SAMPLED_GROUPS = 500  # beyond, a tick samples the first 500 (sorted) and says so


class Sampler:
    def __init__(self, client: AdminClient, interval_s: float, history_s: float,
                 clock: Callable[[], float] = time.time) -> None:
        self.client, self.interval_s, self.clock = client, interval_s, clock
        self.size = max(2, int(history_s / interval_s) + 1)
        self.totals: deque[tuple[int, int, int]] = deque(maxlen=self.size)  # (ms, in, out)
        self.lags: dict[str, deque[tuple[int, int]]] = {}
        # (ms, {(topic, partition): (broker, latest)}) of the last two samples
        self.partitions: deque[tuple[int, dict[tuple[str, int], tuple[int, int]]]] = \
            deque(maxlen=2)
        self.error = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Sampler:
        self._thread = threading.Thread(target=self._run, name="portal-sampler", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def sample(self) -> None:
        """One tick; a failure is kept (shown beside the charts) and the next tick retries."""
        try:
            now = int(self.clock() * 1000)
            latest = {(t.name, p.partition): (p.broker_id, p.latest)
                      for t in self.client.list_topics() for p in t.partitions}
            produced = sum(max(0, offset) for _, offset in latest.values())
            consumed, lags = 0, {}
            for name in self.client.list_groups()[:MAX_SAMPLED_GROUPS]:
                info = self.client.describe_group(name)
                consumed += sum(max(0, p.committed) for p in info.partitions)
                lags[name] = sum(max(0, p.lag) for p in info.partitions)
        except TubeqError as err:
            self.error = f"sampling failed: {err.message}"
            event(log, "portal.sample_failed", error=err.message)
            return
        with self._lock:
            self.error = ""
            self.totals.append((now, produced, consumed))
            self.partitions.append((now, latest))
            for name, lag in lags.items():
                self.lags.setdefault(name, deque(maxlen=self.size)).append((now, lag))
            for gone in set(self.lags) - set(lags):
                del self.lags[gone]

    def rates(self) -> dict[str, list[tuple[int, float]]]:
        """Messages per second in and out, one point per interval."""
        with self._lock:
            points = list(self.totals)
        rates: dict[str, list[tuple[int, float]]] = {"in": [], "out": []}
        for (t0, in0, out0), (t1, in1, out1) in zip(points, points[1:], strict=False):
            seconds = max(1e-3, (t1 - t0) / 1000)
            rates["in"].append((t1, max(0, in1 - in0) / seconds))
            rates["out"].append((t1, max(0, out1 - out0) / seconds))
        return rates

    def partition_rates(self) -> dict[tuple[str, int], float]:
        """Messages per second into each partition between the last two samples."""
        with self._lock:
            if len(self.partitions) < 2:
                return {}
            (t0, before), (t1, after) = self.partitions
        seconds = max(1e-3, (t1 - t0) / 1000)
        return {tp: max(0, offset - before.get(tp, (0, offset))[1]) / seconds
                for tp, (_, offset) in after.items()}

    def growing_lags(self, samples: int) -> list[str]:
        """Groups whose lag rose at each of the last ``samples`` samples."""
        with self._lock:
            series = {name: [lag for _, lag in ring][-samples - 1:]
                      for name, ring in self.lags.items()}
        return sorted(name for name, lags in series.items() if len(lags) > samples
                      and all(b > a for a, b in zip(lags, lags[1:], strict=False)))

    def lag(self, group: str) -> list[tuple[int, int]]:
        with self._lock:
            return list(self.lags.get(group, ()))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.interval_s + 10)
        self.client.close()
