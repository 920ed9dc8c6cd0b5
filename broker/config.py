"""The broker's configuration: one frozen dataclass, read from TOML with CLI overrides.

``[broker]`` holds the process settings, ``[broker.store]`` the storage defaults (a
:class:`storage.config.StoreConfig` table). Per-topic settings from the master (durability,
retention, max message size) are merged over those defaults by :func:`topic_store_config`.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from lib.auth.settings import CLUSTER_SECRET_ENV, auth_setting_problem
from lib.config import build, load_toml, require
from lib.rpc import MAX_MESSAGE_BYTES, parse_masters
from lib.tls import server_tls
from storage.config import StoreConfig
from storage.flusher_pool import DEFAULT_THREADS as DEFAULT_FLUSHER_THREADS
from storage.held_write import DEFAULT_HELD_WRITE_BYTES

MiB = 1 << 20


@dataclass(frozen=True)
class BrokerConfig:
    """Everything a :class:`broker.server.Broker` needs; validated once, then passed down.

    ``masters`` is a comma-separated ``host:port`` list. ``advertised_address`` is what the
    master gives clients; empty means the address actually bound (``host:port``).
    ``grpc_workers`` sizes the executor for the handlers' blocking work (appends, including a
    ``sync`` topic's fsync wait; reads far behind the tail; offsets in LMDB): calls are served
    on one event loop, and waiting long-polls and push streams hold no thread.
    """

    data_dir: str = ""
    # The data dir and its files readable by the owner's group too (0750/0640, PostgreSQL's
    # --allow-group-access); else the owner's alone (0700/0600); never others (private_files.py)
    data_dir_group_access: bool = False
    broker_id: int = -1
    host: str = "127.0.0.1"
    port: int = 8123
    metrics_port: int = 0  # 0: any free port; -1: no metrics endpoint
    masters: str = ""
    advertised_address: str = ""
    rack: str = ""  # optional: the master puts a partition's replicas on distinct racks
    # A follower not caught up with its leader for this long leaves the partition's ISR.
    replica_lag_max_ms: int = 10_000
    fetch_max_wait_ms: int = 30_000  # cap on a long-poll, whatever the client asks
    fetch_max_bytes: int = 32 * MiB  # cap on one Fetch response
    fetch_default_partition_bytes: int = 1 * MiB  # when a PartitionFetch says 0
    push_chunk_bytes: int = 1 * MiB  # largest SubscribeResponse
    push_idle_wait_ms: int = 500  # a push stream with nothing to send re-checks this often
    grpc_workers: int = 64  # executor threads for blocking handler work (see broker/server.py)
    # Threads writing every store's cache blocks (storage/flusher_pool.py): a pool, not a
    # thread per store; more overlap more fsyncs of sync topics, and pass the GIL around more.
    flusher_threads: int = DEFAULT_FLUSHER_THREADS
    # Flusher writes up to this size keep the GIL (storage/held_write.py: no 5 ms wait to get
    # it back from a busy event loop); 0: every write lets it go, as a hung disk then stalls
    # only the flushers, not the whole process.
    held_write_bytes: int = DEFAULT_HELD_WRITE_BYTES
    # RLIMIT_NOFILE raised toward this at start (lib/open_files.py): each store's data log and
    # each partition's index hold a descriptor per segment, so 10,000 topics need 20,000+.
    open_files_limit: int = 65_536
    stop_grace_s: float = 5.0
    register_timeout_s: float = 5.0  # one attempt to reach a master
    # "token": every call must carry a token the masters' signing keys verify (or the cluster
    # secret); "none" lets anyone who reaches the port do anything (logged loudly at start).
    auth: str = "token"
    # Presented to the masters (else $TUBEQ_CLUSTER_SECRET), which need it with auth = "token";
    # the masters present it here for their own calls.
    cluster_secret: str = field(default="", repr=False)
    # TLS on the gRPC port (lib/tls.py; all empty: plaintext): this server's certificate
    # and key (PEM files), the CA its peers' and clients' certificates chain to, and whether
    # every client must present one (mutual TLS: the certificate's CN is the principal).
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""
    tls_client_auth: bool = False
    # Refused calls go to the masters' audit log with heartbeats, summarised (as on masters).
    audit_refusal_window_s: float = 60.0
    # Byte-rate quotas (lib/auth/quotas.py): the burst a full bucket allows, and the debt past
    # which calls are refused instead of throttled.
    quota_burst_s: float = 1.0
    quota_hard_limit_s: float = 30.0
    audit_refusal_kinds: int = 20
    sink_staging_bytes: int = 512 * MiB  # exactly-once sinks: staged, uncommitted batches
    sink_staging_ttl_s: float = 900.0  # staging nobody committed or aborted is dropped after
    # A transaction open on a partition led here for this long is checked with the
    # coordinator (then again as long after), and aborted here when the coordinator will not
    # end it (a hanging transaction: broker/hanging_txns.py).
    txn_hanging_after_ms: int = 60_000
    # The Kafka protocol listener (broker/kafka/): -1 off, 0 any free port. It binds ``host``;
    # ``kafka_advertised_address`` is what Kafka clients are told (default: the bound one).
    kafka_port: int = -1
    kafka_advertised_address: str = ""
    kafka_max_connections: int = 1000
    kafka_max_request_bytes: int = 100 * MiB  # Kafka's socket.request.max.bytes
    kafka_max_inflight_bytes: int = 256 * MiB  # requests in memory at once, all connections
    kafka_request_timeout_s: float = 30.0  # a request's bytes must all arrive within this
    kafka_idle_timeout_s: float = 600.0  # Kafka's connections.max.idle.ms
    # The replica stream (broker/replica_stream.py): followers copy over a plain socket
    # instead of gRPC. -1 off, 0 any free port (off with an ``advertised_address``: which
    # port would reach it is unknown). Followers dial the host of this broker's advertised
    # address at this port: behind a firewall or NAT, fix the port and open it there too.
    replica_stream_port: int = 0
    # The client stream (broker/client_stream.py): producers send ProduceMany and consumers
    # long-poll Fetch over a plain socket instead of gRPC. -1 off, 0 any free port (off with
    # an ``advertised_address``, as the replica stream). Clients dial the host of this
    # broker's address at this port.
    client_stream_port: int = 0
    store: StoreConfig = field(default_factory=StoreConfig)

    @property
    def replica_stream_on(self) -> bool:
        return self.replica_stream_port > 0 or (self.replica_stream_port == 0
                                                and not self.advertised_address)

    @property
    def client_stream_on(self) -> bool:
        return self.client_stream_port > 0 or (self.client_stream_port == 0
                                                and not self.advertised_address)

    @property
    def resolved_cluster_secret(self) -> str:
        return self.cluster_secret or os.environ.get(CLUSTER_SECRET_ENV, "")

    def validate(self) -> None:
        require(bool(self.data_dir), "BrokerConfig.data_dir is required (--data-dir)")
        require(self.broker_id >= 0, "BrokerConfig.broker_id must be >= 0 (--broker-id)")
        require(len(self.rack) <= 64 and self.rack.isprintable(),
                "BrokerConfig.rack must be at most 64 printable characters")
        require(100 <= self.replica_lag_max_ms <= 3_600_000,
                "BrokerConfig.replica_lag_max_ms must be in [100, 3600000]")
        require(0 <= self.port < 65536, "BrokerConfig.port must be in [0, 65535]")
        require(-1 <= self.metrics_port < 65536, "BrokerConfig.metrics_port must be in [-1, 65535]")
        require(self.fetch_max_wait_ms >= 0, "BrokerConfig.fetch_max_wait_ms must be >= 0")
        require(0 < self.fetch_max_bytes <= MAX_MESSAGE_BYTES - MiB,
                f"BrokerConfig.fetch_max_bytes must be in (0, {MAX_MESSAGE_BYTES - MiB}] "
                "(below the gRPC message limit)")
        require(0 < self.fetch_default_partition_bytes <= self.fetch_max_bytes,
                "BrokerConfig.fetch_default_partition_bytes must be in (0, fetch_max_bytes]")
        require(0 < self.push_chunk_bytes <= self.fetch_max_bytes,
                "BrokerConfig.push_chunk_bytes must be in (0, fetch_max_bytes]")
        require(self.push_idle_wait_ms > 0, "BrokerConfig.push_idle_wait_ms must be > 0")
        require(self.grpc_workers >= 4, "BrokerConfig.grpc_workers must be >= 4")
        require(1 <= self.flusher_threads <= 256,
                "BrokerConfig.flusher_threads must be within 1..256")
        require(0 <= self.held_write_bytes <= 64 * MiB,
                "BrokerConfig.held_write_bytes must be within 0..64 MiB")
        require(256 <= self.open_files_limit <= 1 << 24,
                "BrokerConfig.open_files_limit must be within 256..16777216")
        require(self.stop_grace_s >= 0, "BrokerConfig.stop_grace_s must be >= 0")
        require(self.register_timeout_s > 0, "BrokerConfig.register_timeout_s must be > 0")
        require(0.1 <= self.audit_refusal_window_s <= 86400,
                "BrokerConfig.audit_refusal_window_s must be in [0.1, 86400]")
        require(0.01 <= self.quota_burst_s <= 60,
                "BrokerConfig.quota_burst_s must be in [0.01, 60]")
        require(1 <= self.quota_hard_limit_s <= 3600,
                "BrokerConfig.quota_hard_limit_s must be in [1, 3600]")
        require(1 <= self.audit_refusal_kinds <= 1000,
                "BrokerConfig.audit_refusal_kinds must be in [1, 1000]")
        require(self.sink_staging_bytes > 0, "BrokerConfig.sink_staging_bytes must be > 0")
        require(self.sink_staging_ttl_s > 0, "BrokerConfig.sink_staging_ttl_s must be > 0")
        require(self.txn_hanging_after_ms >= 100,
                "BrokerConfig.txn_hanging_after_ms must be >= 100")
        problem = auth_setting_problem("BrokerConfig", self.auth, self.resolved_cluster_secret)
        require(not problem, problem)
        problem = server_tls(self).problem("BrokerConfig")
        require(not problem, problem)
        require(-1 <= self.kafka_port < 65536, "BrokerConfig.kafka_port must be in [-1, 65535]")
        require(-1 <= self.replica_stream_port < 65536,
                "BrokerConfig.replica_stream_port must be in [-1, 65535]")
        require(-1 <= self.client_stream_port < 65536,
                "BrokerConfig.client_stream_port must be in [-1, 65535]")
        require(1 <= self.kafka_max_connections <= 1_000_000,
                "BrokerConfig.kafka_max_connections must be in [1, 1000000]")
        require(1024 <= self.kafka_max_request_bytes <= self.kafka_max_inflight_bytes,
                "BrokerConfig.kafka_max_request_bytes must be in [1024, "
                "kafka_max_inflight_bytes]")
        require(self.kafka_request_timeout_s > 0 and self.kafka_idle_timeout_s > 0,
                "BrokerConfig.kafka_request_timeout_s and kafka_idle_timeout_s must be > 0")
        require(isinstance(self.store, StoreConfig), "BrokerConfig.store must be a StoreConfig")
        if self.masters:
            try:
                parse_masters(self.masters)
            except Exception as exc:  # noqa: BLE001 - re-raised as a config error
                require(False, f"BrokerConfig.masters: {exc}")

    @property
    def master_list(self) -> list[str]:
        return parse_masters(self.masters) if self.masters else []


def load(config_file: str | None = None, **overrides: Any) -> BrokerConfig:
    """Build the config from an optional TOML file (``[broker]``) and CLI overrides."""
    table = dict(load_toml(config_file, "broker")) if config_file else {}
    store_table = table.pop("store", {})
    if isinstance(table.get("masters"), list):
        table["masters"] = ",".join(table["masters"])
    store = build(StoreConfig, store_table)
    return build(BrokerConfig, table, store=store, **overrides)


def topic_store_config(base: StoreConfig, durability: str = "", retention_ms: int = 0,
                       retention_bytes: int = 0, max_message_bytes: int = 0) -> StoreConfig:
    """The store config of one topic: broker defaults with the master's settings on top.

    proto3 zero values mean "not set" (keep the default). A larger message limit raises the
    batch, cache block and segment sizes with it, so the StoreConfig invariants still hold.
    """
    changes: dict[str, Any] = {}
    if durability:
        changes["durability"] = durability
    if retention_ms:
        changes["retention_ms"] = retention_ms
    if retention_bytes:
        changes["retention_bytes"] = retention_bytes
    if max_message_bytes:
        changes["max_message_bytes"] = max_message_bytes
        batch = max(base.max_batch_bytes, max_message_bytes + 64 * 1024)
        changes["max_batch_bytes"] = batch
        changes["cache_block_bytes"] = max(base.cache_block_bytes, batch)
        changes["segment_bytes"] = max(base.segment_bytes, changes["cache_block_bytes"])
    merged = dataclasses.replace(base, **changes)
    return build(StoreConfig, dataclasses.asdict(merged))
