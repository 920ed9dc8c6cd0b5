"""Prometheus metrics of the master, in a registry of its own (no global state)."""
from __future__ import annotations

from collections.abc import Callable

from prometheus_client import Counter, Gauge
from prometheus_client.core import GaugeMetricFamily

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

    def group_topics(self, read: Callable[[], list[tuple[str, str, int]]]) -> None:
        """Per consumer group, the offsets its retry and dead-letter topics took
        (docs/retry.md): ``read`` gives (group, role, offsets), read at scrape time."""
        self.registry.register(_GroupTopics(read))


class _GroupTopics:
    def __init__(self, read: Callable[[], list[tuple[str, str, int]]]) -> None:
        self._read = read

    def collect(self):
        family = GaugeMetricFamily(
            "tubeq_master_group_moved_offsets", "Offsets a consumer group's retry (role=retry) "
            "or dead-letter (role=dlq) topic took: moved records and the commit markers of the "
            "transactions that moved them, as the brokers last reported",
            labels=["group", "role"])
        for group, role, records in self._read():
            family.add_metric([group, role], records)
        yield family
