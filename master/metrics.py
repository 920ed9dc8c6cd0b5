"""Prometheus metrics of the master, in a registry of its own (no global state)."""
from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server


class MasterMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.rebalances = Counter("tubeq_master_rebalances", "Consumer-group rebalances",
                                  ["reason"], registry=self.registry)
        self.leader_changes = Counter("tubeq_master_leaderships",
                                      "Times this master became the active one",
                                      registry=self.registry)
        self._gauges: dict[str, Gauge] = {}
        self._server = None

    def gauge(self, name: str, doc: str, read: Callable[[], float]) -> None:
        g = Gauge(name, doc, registry=self.registry)
        g.set_function(read)
        self._gauges[name] = g

    def serve(self, host: str, port: int) -> str:
        """Start the HTTP endpoint; returns its "host:port" (port 0 picks a free one)."""
        self._server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return f"{host}:{self._server.server_port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
