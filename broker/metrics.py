"""Broker metrics: Prometheus series plus the per-partition counters sent in heartbeats.

Each :class:`BrokerMetrics` has its own registry (no process-global state), so several brokers
can live in one test process. Counters are bumped once per batch or fetch, never per record.

The bytes and messages in and out are kept once, as plain per-partition counters under one lock
(the heartbeats carry them), and the per-topic Prometheus series are their sums, computed at
scrape time (:class:`_TopicTotals`): two labelled Prometheus counters per request cost a
one-record Produce 4.4 us of its path against 0.65 for the plain counters (hot loop).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily

from lib.metrics import ProcessMetrics
from storage.handles import handles
from storage.space import SpaceGuard

_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 30)


@dataclass
class PartitionCounters:
    bytes_in: int = 0
    messages_in: int = 0
    bytes_out: int = 0
    messages_out: int = 0


# (the PartitionCounters field, the Prometheus series, its help) of the per-topic totals
_TOTALS = (("bytes_in", "tubeq_broker_bytes_in", "Batch bytes appended"),
           ("messages_in", "tubeq_broker_messages_in", "Messages appended"),
           ("bytes_out", "tubeq_broker_bytes_out", "Frame bytes served (fetch + push)"),
           ("messages_out", "tubeq_broker_messages_out", "Messages served"))


class _TopicTotals:
    """A Prometheus collector: per topic, the sums of its partitions' counters."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self._metrics = metrics

    def collect(self):
        sums: dict[str, list[int]] = {}
        for (topic, _), c in self._metrics.snapshot().items():
            total = sums.setdefault(topic, [0, 0, 0, 0])
            for i, (field, _, _) in enumerate(_TOTALS):
                total[i] += getattr(c, field)
        for i, (_, name, help_text) in enumerate(_TOTALS):
            family = CounterMetricFamily(name, help_text, labels=["topic"])
            for topic, total in sorted(sums.items()):
                family.add_metric([topic], total[i])
            yield family


class BrokerMetrics(ProcessMetrics):
    def __init__(self) -> None:
        super().__init__()
        r = self.registry
        self.errors = Counter("tubeq_broker_request_errors", "Requests that failed",
                              ["method", "code"], registry=r)
        self.latency = Histogram("tubeq_broker_request_seconds", "Handler latency", ["method"],
                                 buckets=_LATENCY_BUCKETS, registry=r)
        self.push_streams = Gauge("tubeq_broker_push_streams", "Open Subscribe streams",
                                  registry=r)
        self._lock = threading.Lock()
        self._parts: dict[tuple[str, int], PartitionCounters] = {}
        self._touched: set[tuple[str, int]] = set()  # counters moved since drain_touched()
        self._latency: dict[str, Any] = {}  # method -> its labelled histogram
        r.register(_TopicTotals(self))
        Gauge("tubeq_broker_segment_files_open", "Segment files open now (capped at the "
              "open-file limit less a reserve: storage/handles.py)",
              registry=r).set_function(lambda: handles().stats()["open"])
        Gauge("tubeq_broker_segment_file_opens", "Segment files opened since the broker "
              "started, reopens past the cap included",
              registry=r).set_function(lambda: handles().stats()["opened"])

    def watch_space(self, space: SpaceGuard) -> None:
        """Export the data dir's free space and disk-full condition (read at scrape time)."""
        r = self.registry
        Gauge("tubeq_broker_disk_free_bytes", "Free bytes on the data dir's filesystem",
              registry=r).set_function(lambda: space.status().free_bytes)
        Gauge("tubeq_broker_disk_reserve_bytes", "Free space kept back (disk_reserve_bytes)",
              registry=r).set_function(lambda: space.reserve)
        Gauge("tubeq_broker_disk_full", "1 while appends are refused with DISK_FULL",
              registry=r).set_function(lambda: int(space.status().full))
        Gauge("tubeq_broker_unwritten_bytes", "Bytes acknowledged into cache blocks and not "
              "written to the files yet (bounded by max_unwritten_bytes)",
              registry=r).set_function(lambda: space.status().unwritten_bytes)
        Gauge("tubeq_broker_unwritten_waits", "Appends that waited for the flushers because "
              "max_unwritten_bytes were unwritten, since the broker started",
              registry=r).set_function(lambda: space.unwritten_waits)

    def watch_delays(self, movers) -> None:
        """Export delayed delivery's figures (broker/delayed.py; read at scrape time)."""
        r = self.registry
        Gauge("tubeq_broker_delayed_pending", "Delayed records waiting in partitions of "
              "tubeq.delayed led here", registry=r).set_function(movers.pending)
        Gauge("tubeq_broker_delayed_delivered", "Delayed records delivered to their targets "
              "since the broker started", registry=r).set_function(movers.delivered)
        Gauge("tubeq_broker_delayed_overdue_seconds", "How far past its due time the most "
              "overdue pending record is", registry=r).set_function(movers.overdue_s)

    def produced(self, topic: str, partition: int, nbytes: int, messages: int) -> None:
        with self._lock:
            c = self._counters(topic, partition)
            c.bytes_in += nbytes
            c.messages_in += messages
            self._touched.add((topic, partition))

    def served(self, topic: str, partition: int, nbytes: int, messages: int) -> None:
        if messages:
            with self._lock:
                c = self._counters(topic, partition)
                c.bytes_out += nbytes
                c.messages_out += messages
                self._touched.add((topic, partition))

    def took(self, method: str, seconds: float) -> None:
        """One handler call of ``method`` took ``seconds``."""
        histogram = self._latency.get(method)
        if histogram is None:
            histogram = self._latency[method] = self.latency.labels(method)
        histogram.observe(seconds)

    def _counters(self, topic: str, partition: int) -> PartitionCounters:
        """The partition's counters (lock held); made once, not on every call."""
        c = self._parts.get((topic, partition))
        if c is None:
            c = self._parts[(topic, partition)] = PartitionCounters()
        return c

    def snapshot(self) -> dict[tuple[str, int], PartitionCounters]:
        """A copy of every partition's counters (totals since the broker started)."""
        with self._lock:
            return {key: PartitionCounters(**vars(c)) for key, c in self._parts.items()}

    def drain_touched(self) -> set[tuple[str, int]]:
        """The partitions whose counters moved since the last call (heartbeat stats)."""
        with self._lock:
            touched, self._touched = self._touched, set()
            return touched

    def partition(self, topic: str, partition: int) -> PartitionCounters:
        """A copy of the counters of one partition (totals since the broker started)."""
        with self._lock:
            c = self._parts.get((topic, partition))
            return PartitionCounters(**vars(c)) if c else PartitionCounters()
