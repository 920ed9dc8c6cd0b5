"""``Master(config)``: builds the state machine, live registries and gRPC services; start/stop.

Start order: open the LMDB state and bump the epoch (a ``start`` command: generations and terms
of this run are higher than any before), then build the in-memory parts, then listen. Stop
order is the reverse: stop taking requests, stop the reaper, close broker channels, close LMDB.
"""
from __future__ import annotations

import logging
import threading
from concurrent import futures
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from lib.errors import TubeqError
from lib.logs import event
from lib.rpc import SERVER_OPTIONS
from master import admin, service
from master.broker_calls import BrokerCalls
from master.brokers import BrokerRegistry, wall_ms
from master.config import MasterConfig
from master.group_ops import GroupOps
from master.groups import GroupCoordinator, SessionLimits
from master.guard import Leadership
from master.metrics import MasterMetrics
from master.routes import RouteBook
from master.state import MetaState
from master.topic_ops import TopicOps

log = logging.getLogger(__name__)
SERVICES = ("tubeq.master.Master", "tubeq.admin.Admin")


class Master:
    def __init__(self, config: MasterConfig) -> None:
        self.config = config
        c = config
        self.state = MetaState(Path(c.data_dir) / "meta", c.lmdb_map_size, c.tombstones_kept,
                               c.audit_entries_kept)
        self.epoch: int = self.state.apply({"op": "start", "time_ms": wall_ms()})
        self.metrics = MasterMetrics()
        self.registry = BrokerRegistry(c.broker_timeout_ms)
        self.groups = GroupCoordinator(
            self.epoch, self._partitions_of,
            SessionLimits(c.group_session_timeout_ms, c.group_min_session_timeout_ms,
                          c.group_max_session_timeout_ms),
            c.group_reaper_interval_ms, on_rebalance=self._rebalanced)
        self.leadership = Leadership()
        self.calls = BrokerCalls(c.broker_call_timeout_ms / 1000)
        self.routes = RouteBook(self.state, self.registry)
        topic_ops = TopicOps(c, self.state, self.registry, self.groups, self.routes, self.calls)
        group_ops = GroupOps(self.state, self.groups, self.routes, self.calls)
        self.health = health.HealthServicer()
        self._server = grpc.server(futures.ThreadPoolExecutor(c.grpc_workers,
                                                              thread_name_prefix="master-rpc"),
                                   options=SERVER_OPTIONS)
        service.add_to(self._server, service.MasterService(
            c, self.state, self.registry, self.groups, self.routes, self.leadership))
        admin.add_to(self._server, admin.AdminService(
            self.state, self.registry, topic_ops, group_ops, self.leadership))
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._server)
        self._gauges()
        self.address = ""
        self.metrics_address = ""
        self._stopped = threading.Event()

    def _partitions_of(self, topic: str) -> int | None:
        record = self.state.topic(topic)
        return None if record is None else record["settings"]["partitions"]

    def _rebalanced(self, group: str, reason: str, generation: int) -> None:
        self.metrics.rebalances.labels(reason).inc()
        event(log, "group.rebalanced", group=group, reason=reason, generation=generation)

    def _gauges(self) -> None:
        m = self.metrics
        m.gauge("tubeq_master_brokers_alive", "Brokers alive",
                lambda: len(self.registry.alive_ids()))
        m.gauge("tubeq_master_topics", "Topics", lambda: len(self.state.topics()))
        m.gauge("tubeq_master_groups_live", "Groups with live members",
                lambda: len(self.groups.live_groups()))
        m.gauge("tubeq_master_epoch", "Master epoch (term)", lambda: self.epoch)

    def start(self) -> Master:
        c = self.config
        port = self._server.add_insecure_port(f"{c.host}:{c.port}")
        if port == 0:
            raise TubeqError(f"cannot listen on {c.host}:{c.port}")
        self._server.start()
        self.address = f"{c.host}:{port}"
        if c.metrics_port >= 0:
            self.metrics_address = self.metrics.serve(c.host, c.metrics_port)
        self.groups.start()
        for name in ("", *SERVICES):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        event(log, "master.started", address=self.address, metrics=self.metrics_address,
              epoch=self.epoch, topics=len(self.state.topics()))
        return self

    def stop(self) -> None:
        """Idempotent; safe from a signal handler thread."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.health.enter_graceful_shutdown()
        self._server.stop(self.config.stop_grace_s).wait()
        self.groups.stop()
        self.calls.close()
        self.metrics.stop()
        self.state.close()
        event(log, "master.stopped", epoch=self.epoch)

    def wait(self) -> None:
        """Block until :meth:`stop` has run."""
        while not self._stopped.wait(0.5):
            pass
