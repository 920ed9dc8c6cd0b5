"""The Prometheus side every server process shares: its own registry and its /metrics endpoint.

Each process's metrics class derives from :class:`ProcessMetrics`, so no registry is global
(several servers can live in one test process) and serving and stopping the endpoint is
written once. Each registry also carries the standard ``process_*`` (CPU, memory,
descriptors) and ``python_gc_*`` (collections per generation) metrics: a broker holding
10,000 stores is a large heap, and its collections are worth watching; with
``lib/gc_freeze.py`` installed, the ``tubeq_gc_*`` figures of its full collections too.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, GCCollector, ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from lib import gc_freeze


class ProcessMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        GCCollector(registry=self.registry)
        ProcessCollector(registry=self.registry)
        self.registry.register(_FreezerCollector())
        self._http = None

    def serve(self, host: str, port: int) -> str:
        """Start the /metrics HTTP endpoint on ``host`` only; returns its ``host:port`` (port 0
        picks a free one)."""
        self._http, _thread = start_http_server(port, addr=host, registry=self.registry)
        return f"{host}:{self._http.server_port}"

    def stop(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None


class _FreezerCollector:
    """The process's :class:`lib.gc_freeze.LongLivedFreezer` figures, read when scraped (none
    while none is installed). ``describe`` names them, so a scrape filtered by name finds
    them."""

    def describe(self):
        return self._families((0,) * len(gc_freeze.FIGURES))

    def collect(self):
        freezer = gc_freeze.installed()
        return self._families(freezer.figures()) if freezer else iter(())

    @staticmethod
    def _families(values):
        for (name, text), value in zip(gc_freeze.FIGURES, values, strict=True):
            if name.endswith("_total"):
                yield CounterMetricFamily(name.removesuffix("_total"), text, value=value)
            else:
                yield GaugeMetricFamily(name, text, value=value)
