"""``Broker(config)``: builds the stores, the gRPC server, metrics, health and the master link.

Nothing is created at import time. ``start()`` binds the gRPC port (only on ``config.host``),
starts metrics and the master link and returns; ``stop()`` stops accepting calls, waits up to
``stop_grace_s`` for the running ones (waking long polls and push streams at once), then closes
the stores (each flushes and fsyncs) and the offset store. Both are called from plain threads
(``python -m broker``, in-process tests). Without masters (``config.masters`` empty) the broker
serves only what is given to :meth:`TopicManager.apply` directly: that is how the in-process
tests drive it.

Threading model: the gRPC server is ``grpc.aio`` on an asyncio event loop that runs in one
thread owned by the Broker ("rpc-loop"). Handlers are coroutines on that loop; whatever may
block (appends, including a ``sync`` topic's fsync wait; store reads; LMDB offsets) runs in a
bounded ThreadPoolExecutor of ``grpc_workers`` threads ("rpc"). Waiting is done on the loop
(a long-poll Fetch parks on the topic's Signal, a push stream on its Signal or its credit), so
idle consumers hold no thread and cannot starve produce: with the former thread-per-call server,
70 idle 30 s long-polls held up a produce to another topic for 20-40 s. The master link and the
metrics endpoint keep their own threads.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from broker.client_stream import ClientStreamServer
from broker.config import BrokerConfig
from broker.data import DataPlane
from broker.delay_index import DelayIndex
from broker.delayed import DelayMovers
from broker.hanging_txns import HangingTxns
from broker.kafka.gateway import Gateway
from broker.kafka.listener import KafkaListener, ListenerLimits
from broker.kafka.session import Authenticating
from broker.master_link import MasterLink
from broker.metrics import BrokerMetrics
from broker.offsets import OffsetsPlane
from broker.push import PushPlane
from broker.replica_answer import REPLICA_FETCH_METHOD
from broker.replica_fetcher import ReplicaFetcher
from broker.replica_stream import ReplicaStreamServer
from broker.replication import IsrChange, ReplicaLeader
from broker.service import BrokerService
from broker.sinks import SinkPlane
from broker.term import TermWatermark
from broker.topics import TopicManager
from lib.auth.access import Access
from lib.auth.acl import Authorizer
from lib.auth.addresses import AddressRules
from lib.auth.client import Credentials
from lib.auth.identities import (
    CLUSTER_IDENTITY,
    Authenticator,
    KeyRing,
    certificate_identities,
)
from lib.auth.quotas import QuotaBook
from lib.auth.refusals import RefusalLog
from lib.auth.server import AioServerAuth
from lib.auth.settings import announce_auth_off, cluster_header
from lib.decoding import AioStrictDecoding
from lib.delay import DELAY_TOPIC
from lib.errors import ConfigError, TubeqError, Unavailable
from lib.fetch_wire import FETCH_METHOD
from lib.logs import event
from lib.produce_wire import PRODUCE_MANY_METHOD, PRODUCE_METHOD, parse_produce, parse_produce_many
from lib.producer import Producer
from lib.proto import broker_pb2_grpc, security_pb2_grpc
from lib.rpc import MAX_MESSAGE_BYTES, SERVER_OPTIONS, ChannelPool, invoke
from lib.tls import server_tls
from lib.wire import Spliced
from storage import held_write
from storage.offsets import OffsetStore

log = logging.getLogger(__name__)
SERVICE_NAME = "tubeq.broker.Broker"
T = TypeVar("T")


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        data_dir = Path(config.data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        self.metrics = BrokerMetrics()
        self.term = TermWatermark()
        self.keyring = KeyRing()  # filled by the master link
        self.acls = Authorizer(version=-1)  # replaced by the master link: none until then
        self.addresses = AddressRules()  # the IP lists, replaced by the master link
        self.quotas = QuotaBook(config.quota_burst_s, config.quota_hard_limit_s)  # master link
        self.refusals = RefusalLog(config.audit_refusal_window_s, config.audit_refusal_kinds)
        held_write.configure(config.held_write_bytes)  # before any store writes
        self.topics = TopicManager(data_dir, config.store, config.flusher_threads)
        self.offset_store = OffsetStore(data_dir / "offsets")
        self.offsets = OffsetsPlane(self.topics, self.offset_store, self.term)
        self.executor = ThreadPoolExecutor(config.grpc_workers, thread_name_prefix="rpc")
        self.replication = ReplicaLeader(self.topics, config.broker_id, self.offsets)
        self.sinks = SinkPlane(self.topics, self.offsets, config.sink_staging_bytes,
                               config.sink_staging_ttl_s, self._appended,
                               holding=self.replication.holding)
        self.service = BrokerService(
            DataPlane(config, self.topics, self.metrics, self.replication),
            self.offsets,
            PushPlane(config, self.topics, self.metrics, self.replication, self.quotas),
            self.metrics, self.executor, self.sinks, self.replication, self.quotas)
        self.fetcher = ReplicaFetcher(self.topics, config.broker_id,
                                      config.resolved_cluster_secret,
                                      server_tls(config).as_client(), self.offsets)
        self.delays = DelayMovers(self.topics, self.replication,
                                  DelayIndex(data_dir / "delay-index"), self._delay_producer)
        self.metrics.watch_delays(self.delays)
        self.health = health.aio.HealthServicer()
        self.server: grpc.aio.Server | None = None
        self.link: MasterLink | None = None
        self.address = ""
        self.metrics_address = ""
        self.kafka: KafkaListener | None = None
        self.replica_stream: ReplicaStreamServer | None = None
        self.replica_stream_port = 0
        self.client_stream: ClientStreamServer | None = None
        self.client_stream_port = 0
        self._peers = ChannelPool(tls=server_tls(config).as_client())  # the Kafka port's
        self.kafka_address = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._stopped = threading.Event()

    def start(self) -> Broker:
        cfg = self.config
        self._loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(target=self._loop.run_forever, name="rpc-loop",
                                             daemon=True)
        self._loop_thread.start()
        try:
            port = self._on_loop(self._serve())
        except BaseException:
            self._end_loop()
            raise
        self.address = f"{cfg.host}:{port}"
        if cfg.replica_stream_on:
            try:
                self.replica_stream_port = self._on_loop(self._serve_replica_stream())
            except BaseException:
                self.stop()
                raise
        if cfg.client_stream_on:
            try:
                self.client_stream_port = self._on_loop(self._serve_client_stream())
            except BaseException:
                self.stop()
                raise
        if cfg.kafka_port >= 0:
            try:
                kafka_port = self._on_loop(self._serve_kafka())
            except BaseException:
                self.stop()
                raise
            self.kafka_address = cfg.kafka_advertised_address or f"{cfg.host}:{kafka_port}"
        if cfg.metrics_port >= 0:
            self.metrics_address = self.metrics.serve(cfg.host, cfg.metrics_port)
        if cfg.master_list:
            self.link = MasterLink(cfg.broker_id, cfg.advertised_address or self.address,
                                   cfg.master_list, self.topics, self.metrics, self.term,
                                   cfg.register_timeout_s, on_deleted=self._forget_topic,
                                   offsets=self.offsets,
                                   cluster_secret=cfg.resolved_cluster_secret,
                                   keyring=self.keyring, acls=self.acls, quotas=self.quotas,
                                   addresses=self.addresses, rack=cfg.rack,
                                   refusals=self.refusals, tls=server_tls(cfg).as_client(),
                                   kafka_address=self.kafka_address)
            self.link.unreachable = self.fetcher.unreachable_leaders
            self.fetcher.on_unreachable = self.link.heartbeat_soon
            after_s = cfg.txn_hanging_after_ms / 1000
            self.hanging = HangingTxns(self.topics, self.link.open_txns, after_s,
                                       check_s=min(10.0, after_s))
            self.link.after_heartbeat = self.hanging.maybe_check
            self.link.start()
            self.fetcher.start()
            self.delays.start()
            threading.Thread(target=self._keep_isr, name="isr-keeper", daemon=True).start()
        event(log, "broker.started", address=self.address, metrics=self.metrics_address,
              replica_stream=self.replica_stream_port,
              client_stream=self.client_stream_port,
              broker_id=cfg.broker_id, masters=cfg.masters)
        return self

    async def _serve(self) -> int:
        """Build, bind and start the aio server on the loop; returns the bound port."""
        cfg = self.config
        server = grpc.aio.server(options=SERVER_OPTIONS,
                                 interceptors=[AioStrictDecoding(
                                     {PRODUCE_METHOD: parse_produce,
                                      PRODUCE_MANY_METHOD: parse_produce_many},
                                     {REPLICA_FETCH_METHOD: Spliced.SerializeToString,
                                      FETCH_METHOD: Spliced.SerializeToString}),
                                     *self._auth()])
        broker_pb2_grpc.add_BrokerServicer_to_server(self.service, server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        try:
            port = server_tls(cfg).bind(server, f"{cfg.host}:{cfg.port}")
        except RuntimeError:
            port = 0
        if port == 0:
            raise ConfigError(f"cannot bind the broker to {cfg.host}:{cfg.port}")
        await server.start()
        self.server = server
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        return port

    async def _serve_replica_stream(self) -> int:
        """The followers' plain-socket ReplicaFetch (broker/replica_stream.py); its port."""
        cfg = self.config
        authenticator = Authenticator(self.keyring.get, cfg.resolved_cluster_secret)

        def authorized(header: str) -> bool:
            if cfg.auth == "none":
                return True
            try:
                return authenticator.identify(header) == CLUSTER_IDENTITY
            except TubeqError:
                return False

        self.replica_stream = ReplicaStreamServer(
            lambda request: self.replication.fetch(request, self.service.run), authorized,
            lambda peer, reason: self.refusals.record("", "ReplicaStream", reason, peer))
        port = await self.replica_stream.start(cfg.host, cfg.replica_stream_port,
                                               server_tls(cfg).ssl_context())
        self.replication.serve_stream(port)
        return port

    async def _serve_client_stream(self) -> int:
        """The clients' plain-socket ProduceMany and Fetch (broker/client_stream.py); its
        port. The gate is the gRPC interceptor's: the same callers, ACLs and IP lists."""
        cfg = self.config
        service = type(self.service)  # the handlers unguarded: errors as exceptions
        produce_many, fetch = service.ProduceMany.__wrapped__, service.Fetch.__wrapped__
        self.client_stream = ClientStreamServer(
            self.address, lambda views, call: produce_many(self.service, views, call),
            lambda request, call: fetch(self.service, request, call), self._gate(),
            MAX_MESSAGE_BYTES)
        port = await self.client_stream.start(cfg.host, cfg.client_stream_port,
                                              server_tls(cfg).ssl_context())
        self.service.client_stream_port = port
        return port

    async def _serve_kafka(self) -> int:
        """The Kafka protocol listener (broker/kafka/) on this loop; returns its port."""
        cfg = self.config
        authenticating = None
        if cfg.auth != "none":
            authenticating = Authenticating(
                lambda req: self._master_call(security_pb2_grpc.SecurityStub, "Login", req),
                Authenticator(self.keyring.get, cfg.resolved_cluster_secret),
                lambda identity, peer: Access(
                    identity, self.acls,
                    lambda err: self.refusals.record(identity.principal, "Kafka", err.message,
                                                     peer),
                    peer, self.addresses),
                lambda req: self._master_call(security_pb2_grpc.SecurityStub, "ScramStep", req))
        gateway = Gateway(cfg.broker_id, self.service.data, self.replication, self.service.run,
                          self._master_call, self._peer_call, authenticating,
                          cfg.fetch_max_wait_ms, cfg.fetch_max_bytes, self.quotas)
        self.kafka = KafkaListener(gateway, ListenerLimits(
            cfg.kafka_max_connections, cfg.kafka_max_request_bytes, cfg.kafka_max_inflight_bytes,
            cfg.kafka_request_timeout_s, cfg.kafka_idle_timeout_s), cfg.auth != "none")
        port = await self.kafka.start(cfg.host, cfg.kafka_port, server_tls(cfg).ssl_context())
        host, _, advertised_port = (cfg.kafka_advertised_address or
                                    f"{cfg.host}:{port}").rpartition(":")
        gateway.advertised = (host, int(advertised_port))
        return port

    def _peer_call(self, address: str, method: str, request):
        """A call to another broker (or this one) as the cluster: the Kafka port's offset
        commits and fetches go to each partition's leader."""
        stub = broker_pb2_grpc.BrokerStub(self._peers.get(address))
        return invoke(getattr(stub, method), request, 10.0,
                      cluster_header(self.config.resolved_cluster_secret))

    def _master_call(self, stub, method: str, request, token: str = ""):
        """A call to the active master as the cluster (the Kafka port's metadata, ids and
        logins); Unavailable while this broker has no masters to ask."""
        if self.link is None:
            raise Unavailable("this broker has no masters (--masters): the Kafka port "
                              "needs them for metadata")
        return self.link.call(stub, method, request, token)

    def _auth(self) -> list[AioServerAuth]:
        """Who may call what (lib/auth/server.py): tokens are checked against the signing keys,
        and calls against the ACLs, that the masters send with heartbeat responses;
        ``auth = "none"`` is said loudly."""
        gate = self._gate()
        if gate is None:
            announce_auth_off(log)
        return [] if gate is None else [gate]

    def _gate(self) -> AioServerAuth | None:
        """The gRPC interceptor (None: ``auth = "none"``), also the client stream's gate."""
        if self.config.auth == "none":
            return None
        return AioServerAuth(Authenticator(self.keyring.get,
                                           self.config.resolved_cluster_secret),
                             authorizer=lambda: self.acls, refusals=self.refusals,
                             certificates=certificate_identities(server_tls(self.config)),
                             addresses=lambda: self.addresses)

    def _on_loop(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the broker's loop from a plain thread and wait for its result."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def _appended(self, topic: str, partition: int, nbytes: int, records: int) -> None:
        """A sink commit appended a batch: count it and wake the topic's waiting fetches."""
        self.metrics.produced(topic, partition, nbytes, records)
        self.topics.notify(topic)

    def _delay_producer(self, partition: int) -> Producer:
        """The transactional producer a delayed partition's mover delivers with, as the
        cluster (broker/delayed.py)."""
        cfg = self.config
        secret = cfg.resolved_cluster_secret
        return Producer(cfg.master_list, transactional_id=f"{DELAY_TOPIC}-{partition}",
                        credentials=Credentials(cluster_secret=secret) if secret else None,
                        tls=server_tls(cfg).as_client(), linger_ms=1,
                        client_id=f"delay-mover-{cfg.broker_id}-{partition}")

    def _forget_topic(self, topic: str) -> None:
        self.offsets.forget_topic(topic)

    def _keep_isr(self) -> None:
        """Shrink and expand the ISR of the partitions led here (broker/replication.py)."""
        lag_s = self.config.replica_lag_max_ms / 1e3
        while not self._stopped.wait(max(0.1, lag_s / 4)):
            for change in self.replication.isr_changes(lag_s):
                self._alter_isr(change, lag_s)

    def _alter_isr(self, change: IsrChange, lag_s: float) -> None:
        """One ISR change (or reassignment end) of a partition led here, through the master.
        A reassignment that moves the leadership away holds the partition's writes first
        (broker/replication.py ``hold_writes``) and keeps them held once the master agreed:
        this broker no longer leads it (the new roles come with the next heartbeat, now)."""
        if change.complete and not self.replication.hold_writes(change, max(1.0, lag_s)):
            return
        try:
            res = self.link.alter_isr(change)
        except TubeqError as err:
            self.replication.release_writes(change)
            event(log, "partition.isr_change_refused", logging.WARNING,
                  topic=change.topic, partition=change.partition, error=err.message)
            return
        if change.complete and res.leader == self.config.broker_id:
            self.replication.release_writes(change)  # not finished after all: serve on
        self.replication.isr_changed(change, list(res.isr))
        event(log, "partition.isr_changed", topic=change.topic, partition=change.partition,
              isr=list(res.isr), replicas=list(res.replicas), leader=res.leader)

    def stop(self) -> None:
        """Stop serving, then close every store (flush + fsync); safe to call twice."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.fetcher.stop()  # before the stores close: a copy in progress finishes
        self.delays.stop()  # an open delivery is aborted by its successor's fencing
        if self.link is not None:
            self.link.hand_off()  # leaderships to in-sync followers first (clean shutdown)
            self.link.stop()
        for name, listener in (("kafka", self.kafka), ("replica_stream", self.replica_stream),
                               ("client_stream", self.client_stream)):
            if listener is None:
                continue
            try:
                self._on_loop(listener.stop(), 5)
            except Exception as exc:  # noqa: BLE001 - still stop the rest
                event(log, f"broker.{name}_stop_failed", logging.WARNING, error=repr(exc))
        if self.server is not None:
            self._on_loop(self.health.enter_graceful_shutdown(), 5)
            grace = self.config.stop_grace_s
            done = asyncio.run_coroutine_threadsafe(self.server.stop(grace), self._loop)
            self.topics.wake_all()  # long polls and push streams return now, not at the grace
            try:
                done.result(grace + 5)
            except Exception as exc:  # noqa: BLE001 - still close the stores
                event(log, "broker.stop_incomplete", logging.WARNING, error=repr(exc))
        self.topics.close()  # appends still running in the executor get StoreClosed
        self.executor.shutdown(wait=True, cancel_futures=True)
        self._end_loop()
        self.offset_store.close()
        self._peers.close()
        self.delays.index.close()
        self.metrics.stop()
        event(log, "broker.stopped", broker_id=self.config.broker_id)

    def _end_loop(self) -> None:
        """Cancel what is left on the loop (streams past the grace), stop it, close it."""
        loop, thread = self._loop, self._loop_thread
        if loop is None or thread is None:
            return
        try:
            self._on_loop(_cancel_tasks(), 5)
        except Exception as exc:  # noqa: BLE001 - stopping anyway
            event(log, "broker.loop_cancel_failed", logging.WARNING, error=repr(exc))
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        if not thread.is_alive():
            loop.close()

    @property
    def stopped(self) -> threading.Event:
        """Set once :meth:`stop` has begun."""
        return self._stopped


async def _cancel_tasks() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=2)
