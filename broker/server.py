"""``Broker(config)``: builds the stores, the gRPC server, metrics, health and the master link.

Nothing is created at import time. ``start()`` binds the gRPC port (only on ``config.host``),
starts metrics and the master link and returns; ``stop()`` stops accepting calls, waits up to
``stop_grace_s`` for the running ones, then closes the stores (each flushes and fsyncs) and the
offset store. Without masters (``config.masters`` empty) the broker serves only what is given
to :meth:`TopicManager.apply` directly: that is how the in-process tests drive it.
"""
from __future__ import annotations

import logging
import threading
from concurrent import futures
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from broker.config import BrokerConfig
from broker.data import DataPlane
from broker.dedup import Dedup
from broker.master_link import MasterLink
from broker.metrics import BrokerMetrics
from broker.offsets import OffsetsPlane
from broker.push import PushPlane
from broker.service import BrokerService
from broker.term import TermWatermark
from broker.topics import TopicManager
from lib.errors import ConfigError
from lib.logs import event
from lib.proto import broker_pb2_grpc
from lib.rpc import SERVER_OPTIONS
from storage.offsets import OffsetStore

log = logging.getLogger(__name__)
SERVICE_NAME = "tubeq.broker.Broker"


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        data_dir = Path(config.data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        self.metrics = BrokerMetrics()
        self.term = TermWatermark()
        self.topics = TopicManager(data_dir, config.store)
        self.offset_store = OffsetStore(data_dir / "offsets")
        self.dedup = Dedup()
        self.offsets = OffsetsPlane(self.topics, self.offset_store, self.term)
        self.service = BrokerService(
            DataPlane(config, self.topics, self.dedup, self.metrics), self.offsets,
            PushPlane(config, self.topics, self.metrics), self.metrics)
        self.health = health.HealthServicer()
        self.server: grpc.Server | None = None
        self.link: MasterLink | None = None
        self.address = ""
        self.metrics_address = ""
        self._stopped = threading.Event()

    def start(self) -> Broker:
        cfg = self.config
        server = grpc.server(futures.ThreadPoolExecutor(cfg.grpc_workers,
                                                        thread_name_prefix="rpc"),
                             options=SERVER_OPTIONS)
        broker_pb2_grpc.add_BrokerServicer_to_server(self.service, server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        port = server.add_insecure_port(f"{cfg.host}:{cfg.port}")
        if port == 0:
            raise ConfigError(f"cannot bind the broker to {cfg.host}:{cfg.port}")
        server.start()
        self.server = server
        self.address = f"{cfg.host}:{port}"
        if cfg.metrics_port >= 0:
            self.metrics_address = self.metrics.serve(cfg.host, cfg.metrics_port)
        for name in ("", SERVICE_NAME):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        if cfg.master_list:
            self.link = MasterLink(cfg.broker_id, cfg.advertised_address or self.address,
                                   cfg.master_list, self.topics, self.metrics, self.term,
                                   cfg.register_timeout_s, on_deleted=self._forget_topic)
            self.link.start()
        event(log, "broker.started", address=self.address, metrics=self.metrics_address,
              broker_id=cfg.broker_id, masters=cfg.masters)
        return self

    def _forget_topic(self, topic: str) -> None:
        self.offsets.forget_topic(topic)
        self.dedup.forget_topic(topic)

    def stop(self) -> None:
        """Stop serving, then close every store (flush + fsync); safe to call twice."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.health.enter_graceful_shutdown()
        if self.link is not None:
            self.link.stop()
        if self.server is not None:
            done = self.server.stop(self.config.stop_grace_s)
            self.topics.wake_all()  # long polls and push streams return now, not at the grace
            done.wait(self.config.stop_grace_s + 1)
        self.topics.close()
        self.offset_store.close()
        self.metrics.stop()
        event(log, "broker.stopped", broker_id=self.config.broker_id)

    def wait(self) -> None:
        self._stopped.wait()
