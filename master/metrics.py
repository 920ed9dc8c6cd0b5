"""Prometheus metrics of the master, in a registry of its own (no global state)."""
from __future__ import annotations

from collections.abc import Callable

from prometheus_client import Counter, Gauge

from lib.metrics import ProcessMetrics


class MasterMetrics(ProcessMetrics):
    def __init__(self) -> None:
        super().__init__()
        self.rebalances = Counter("tubeq_master_rebalances", "Consumer-group rebalances",
                                  ["reason"], registry=self.registry)
        self.leader_changes = Counter("tubeq_master_leaderships",
                                      "Times this master became the active one",
                                      registry=self.registry)
        self._gauges: dict[str, Gauge] = {}

    def gauge(self, name: str, doc: str, read: Callable[[], float]) -> None:
        g = Gauge(name, doc, registry=self.registry)
        g.set_function(read)
        self._gauges[name] = g
