"""The master's configuration: one frozen dataclass, read from TOML (``[master]``) + CLI overrides.

Topic defaults (``default_*``) fill the zero fields of a CreateTopic request; the limits bound
what any request may ask for. Everything is validated once, then the object is passed down.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from lib.auth.settings import CLUSTER_SECRET_ENV, auth_setting_problem
from lib.config import build, load_toml, require
from lib.tls import server_tls

MiB = 1 << 20
DAY_MS = 24 * 3600 * 1000
MAX_MESSAGE_LIMIT = 16 * MiB  # largest max_message_bytes a topic may ask for
DURABILITIES = ("async", "sync")
MAX_REPLICATION_FACTOR = 16  # copies of a partition a topic may ask for


@dataclass(frozen=True)
class MasterConfig:
    """Everything :class:`master.server.Master` needs."""

    data_dir: str = ""
    # The data dir and its files readable by the owner's group too (0750/0640, PostgreSQL's
    # --allow-group-access); else the owner's alone (0700/0600); never others (private_files.py)
    data_dir_group_access: bool = False
    host: str = "127.0.0.1"
    port: int = 8715
    # What other hosts dial to reach this master, when that is not the bound host:port (bound
    # on 0.0.0.0, behind NAT or a container's port mapping): named to clients and brokers as
    # the active master's address. Its host is also this master's Raft node name (the other
    # masters list ``<that host>:<raft_port>`` in raft_peers). Empty: host:port as bound.
    advertised_address: str = ""
    metrics_port: int = 0  # 0: any free port; -1: no metrics endpoint
    grpc_workers: int = 32
    stop_grace_s: float = 2.0
    broker_heartbeat_interval_ms: int = 1000
    broker_timeout_ms: int = 6000  # a broker silent this long is down
    broker_call_timeout_ms: int = 1000  # describe/reset calls to brokers
    group_session_timeout_ms: int = 10_000  # when a JoinGroup asks for 0
    group_min_session_timeout_ms: int = 1000
    group_max_session_timeout_ms: int = 600_000
    group_reaper_interval_ms: int = 200
    default_partitions: int = 3
    default_stores: int = 1
    default_durability: str = "async"
    default_retention_ms: int = 7 * DAY_MS
    default_retention_bytes: int = -1
    default_max_message_bytes: int = MiB
    default_replication_factor: int = 1  # copies of each partition, on distinct brokers
    default_min_insync_replicas: int = 1  # acks=all needs this many in-sync copies
    # No live in-sync replica: elect another live replica (losing what only the ISR held)?
    default_unclean_leader_election: bool = False
    # Deprecated, no effect: replication used to be a preview behind this flag. Still accepted
    # so that configs written for it load.
    replication_preview: bool = False
    max_partitions_per_topic: int = 1024
    # -- Delayed messages (tubeq.delayed, made on first use; docs/delayed.md) --
    max_delay_ms: int = 7 * DAY_MS  # the longest delay a producer may ask for
    delay_partitions: int = 4  # partitions of tubeq.delayed: movers, spread over brokers
    delay_replication_factor: int = 0  # 0: as many live brokers as there are, at most 3
    max_topics: int = 10_000
    tombstones_kept: int = 1000
    audit_entries_kept: int = 100_000
    lmdb_map_size: int = 1 << 30
    # -- Master HA (Raft through pysyncobj; see master/raft.py) --
    raft_port: int = 0  # this master's Raft port; 0 (only without peers): any free port
    raft_peers: str = ""  # comma-separated host:port of the OTHER masters' Raft ports
    raft_password: str = ""  # else $TUBEQ_RAFT_PASSWORD; required with peers
    raft_election_min_ms: int = 800
    raft_election_max_ms: int = 1600
    raft_leader_fallback_ms: int = 3000  # a leader cut off from the majority steps down
    raft_compaction_entries: int = 5000  # snapshot + log compaction after this many entries
    raft_compaction_min_s: int = 300  # ... or this often
    command_timeout_ms: int = 5000  # a metadata change not committed by then: Unavailable
    failover_grace_ms: int = 5000  # a new leader lets brokers and members re-register first
    # -- Transactions (master/transactions.py, docs/transactions.md) --
    transaction_timeout_ms: int = 60_000  # when an InitProducerId asks for 0
    transaction_max_timeout_ms: int = 900_000  # the most an InitProducerId may ask for
    # A transactional_id with no transaction open, unchanged this long, is forgotten.
    transactional_id_expiration_ms: int = 7 * DAY_MS
    transaction_check_interval_ms: int = 1000  # how often timeouts and expiry are checked
    # EndTxn / InitProducerId wait this long for a transaction's markers, then answer
    # CONCURRENT_TRANSACTIONS (retriable: the same call again finds it done).
    transaction_end_wait_ms: int = 10_000
    transaction_marker_timeout_ms: int = 5000  # one WriteTxnMarkers call to a broker
    # RocketMQ's transactional messages (send_in_transaction, docs/transactions.md): a half
    # message whose local transaction has not answered is checked back with a live producer
    # of its group this long after it was stored (RocketMQ's transactionTimeout), then every
    # transaction_check_back_interval_ms, at most transaction_check_back_max times (RocketMQ's
    # transactionCheckMax), then rolled back.
    transaction_check_back_after_ms: int = 6000
    transaction_check_back_interval_ms: int = 10_000
    transaction_check_back_max: int = 15
    # -- Permissions (master/security.py) --
    token_ttl_s: int = 3600  # lifetime of a login's token; clients renew before it ends
    # Refused calls and failed logins reach the audit log summarised, one entry per kind and
    # source per window, at most audit_refusal_kinds (+1 for the rest) per window.
    audit_refusal_window_s: float = 60.0
    audit_refusal_kinds: int = 20
    login_backoff_after: int = 5  # failed logins in a row from one host before it must wait
    # "token": every call but a login must carry a token (lib/auth/server.py); "none" lets
    # anyone who reaches the port do anything (logged loudly at start).
    auth: str = "token"
    # The first admin's password, for a new cluster (else generated into
    # <data_dir>/admin-password); read once, at the bootstrap.
    admin_password_file: str = ""
    # What brokers present to the masters (else $TUBEQ_CLUSTER_SECRET); never printed.
    cluster_secret: str = field(default="", repr=False)
    # TLS on the gRPC port (lib/tls.py; all empty: plaintext): this server's certificate
    # and key (PEM files), the CA its peers' and clients' certificates chain to, and whether
    # every client must present one (mutual TLS: the certificate's CN is the principal).
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""
    tls_client_auth: bool = False

    @property
    def resolved_cluster_secret(self) -> str:
        return self.cluster_secret or os.environ.get(CLUSTER_SECRET_ENV, "")

    def validate(self) -> None:
        require(bool(self.data_dir), "MasterConfig.data_dir is required (--data-dir)")
        require(0 <= self.port < 65536, "MasterConfig.port must be in [0, 65535]")
        if self.advertised_address:
            host, _, port = self.advertised_address.rpartition(":")
            require(bool(host) and port.isdigit() and 0 < int(port) < 65536
                    and host not in ("0.0.0.0", "::", "[::]"),
                    f"MasterConfig.advertised_address: {self.advertised_address!r} is not "
                    "the host:port other hosts dial (a name or address, not 0.0.0.0)")
        require(-1 <= self.metrics_port < 65536, "MasterConfig.metrics_port must be in [-1, 65535]")
        require(self.grpc_workers >= 4, "MasterConfig.grpc_workers must be >= 4")
        require(self.stop_grace_s >= 0, "MasterConfig.stop_grace_s must be >= 0")
        require(0 < self.broker_heartbeat_interval_ms < self.broker_timeout_ms,
                "MasterConfig.broker_heartbeat_interval_ms must be > 0 and below "
                "broker_timeout_ms")
        require(self.broker_call_timeout_ms > 0, "MasterConfig.broker_call_timeout_ms must be > 0")
        require(0 < self.group_min_session_timeout_ms <= self.group_session_timeout_ms
                <= self.group_max_session_timeout_ms,
                "MasterConfig: need 0 < group_min_session_timeout_ms <= "
                "group_session_timeout_ms <= group_max_session_timeout_ms")
        problem = auth_setting_problem("MasterConfig", self.auth, self.resolved_cluster_secret)
        require(not problem, problem)
        problem = server_tls(self).problem("MasterConfig")
        require(not problem, problem)
        require(0.1 <= self.audit_refusal_window_s <= 86400,
                "MasterConfig.audit_refusal_window_s must be in [0.1, 86400]")
        require(1 <= self.audit_refusal_kinds <= 1000,
                "MasterConfig.audit_refusal_kinds must be in [1, 1000]")
        require(1 <= self.login_backoff_after <= 1000,
                "MasterConfig.login_backoff_after must be in [1, 1000]")
        require(60 <= self.token_ttl_s <= 7 * 86400,
                "MasterConfig.token_ttl_s must be in [60, 604800] (1 min to 7 days)")
        require(self.group_reaper_interval_ms > 0,
                "MasterConfig.group_reaper_interval_ms must be > 0")
        self._validate_topic_defaults()
        self._validate_transactions()
        require(self.tombstones_kept >= 1, "MasterConfig.tombstones_kept must be >= 1")
        require(self.audit_entries_kept >= 1, "MasterConfig.audit_entries_kept must be >= 1")
        require(self.lmdb_map_size >= 1 << 20, "MasterConfig.lmdb_map_size must be >= 1 MiB")
        self._validate_raft()

    @property
    def max_replication_factor(self) -> int:
        return MAX_REPLICATION_FACTOR

    @property
    def advertised_host(self) -> str:
        """The host other masters and clients know this master by (Raft node name too)."""
        return self.advertised_address.rpartition(":")[0] or self.host

    @property
    def peers(self) -> tuple[str, ...]:
        return tuple(p.strip() for p in self.raft_peers.split(",") if p.strip())

    def _validate_raft(self) -> None:
        require(0 <= self.raft_port < 65536, "MasterConfig.raft_port must be in [0, 65535]")
        require(self.raft_port > 0 or not self.peers,
                "MasterConfig.raft_port must be set when raft_peers are (peers dial it)")
        for peer in self.peers:
            host, _, port = peer.rpartition(":")
            require(bool(host) and port.isdigit() and 0 < int(port) < 65536,
                    f"MasterConfig.raft_peers: {peer!r} is not host:port")
        require(f"{self.advertised_host}:{self.raft_port}" not in self.peers,
                "MasterConfig.raft_peers must list the OTHER masters, not this one")
        require(0 < self.raft_election_min_ms < self.raft_election_max_ms,
                "MasterConfig: need 0 < raft_election_min_ms < raft_election_max_ms")
        require(self.raft_leader_fallback_ms >= self.raft_election_min_ms,
                "MasterConfig.raft_leader_fallback_ms must be >= raft_election_min_ms")
        require(self.raft_compaction_entries >= 2, "MasterConfig.raft_compaction_entries >= 2")
        require(self.raft_compaction_min_s >= 1, "MasterConfig.raft_compaction_min_s >= 1")
        require(self.command_timeout_ms > 0, "MasterConfig.command_timeout_ms must be > 0")
        require(self.failover_grace_ms >= 0, "MasterConfig.failover_grace_ms must be >= 0")

    def _validate_transactions(self) -> None:
        require(1 <= self.transaction_max_timeout_ms <= 7 * DAY_MS,
                "MasterConfig.transaction_max_timeout_ms must be in [1, 604800000]")
        require(1 <= self.transaction_timeout_ms <= self.transaction_max_timeout_ms,
                "MasterConfig.transaction_timeout_ms must be in [1, transaction_max_timeout_ms]")
        require(self.transactional_id_expiration_ms >= 60_000,
                "MasterConfig.transactional_id_expiration_ms must be >= 60000")
        require(10 <= self.transaction_check_interval_ms <= 60_000,
                "MasterConfig.transaction_check_interval_ms must be in [10, 60000]")
        require(self.transaction_end_wait_ms >= 0,
                "MasterConfig.transaction_end_wait_ms must be >= 0")
        require(self.transaction_marker_timeout_ms > 0,
                "MasterConfig.transaction_marker_timeout_ms must be > 0")
        require(10 <= self.transaction_check_back_after_ms <= self.transaction_max_timeout_ms,
                "MasterConfig.transaction_check_back_after_ms must be in [10, "
                "transaction_max_timeout_ms]")
        require(10 <= self.transaction_check_back_interval_ms <= DAY_MS,
                "MasterConfig.transaction_check_back_interval_ms must be in [10, 86400000]")
        require(1 <= self.transaction_check_back_max <= 1000,
                "MasterConfig.transaction_check_back_max must be in [1, 1000]")

    def _validate_topic_defaults(self) -> None:
        require(1_000 <= self.max_delay_ms <= 365 * DAY_MS,
                "MasterConfig.max_delay_ms must be in [1000, 365 days]")
        require(1 <= self.delay_partitions <= 256,
                "MasterConfig.delay_partitions must be in [1, 256]")
        require(0 <= self.delay_replication_factor <= 16,
                "MasterConfig.delay_replication_factor must be in [0, 16]")
        require(1 <= self.max_partitions_per_topic <= 1024,
                "MasterConfig.max_partitions_per_topic must be in [1, 1024]")
        require(self.max_topics >= 1, "MasterConfig.max_topics must be >= 1")
        require(1 <= self.default_partitions <= self.max_partitions_per_topic,
                "MasterConfig.default_partitions must be in [1, max_partitions_per_topic]")
        require(1 <= self.default_stores <= self.default_partitions,
                "MasterConfig.default_stores must be in [1, default_partitions]")
        require(self.default_durability in DURABILITIES,
                f"MasterConfig.default_durability must be one of {DURABILITIES}")
        require(self.default_retention_ms > 0 or self.default_retention_ms == -1,
                "MasterConfig.default_retention_ms must be > 0 or -1")
        require(self.default_retention_bytes > 0 or self.default_retention_bytes == -1,
                "MasterConfig.default_retention_bytes must be > 0 or -1")
        require(1 <= self.default_max_message_bytes <= MAX_MESSAGE_LIMIT,
                f"MasterConfig.default_max_message_bytes must be in [1, {MAX_MESSAGE_LIMIT}]")
        most = self.max_replication_factor
        require(1 <= self.default_replication_factor <= most,
                f"MasterConfig.default_replication_factor must be in [1, {most}]")
        require(1 <= self.default_min_insync_replicas <= self.default_replication_factor,
                "MasterConfig.default_min_insync_replicas must be in "
                "[1, default_replication_factor]")


def load(config_file: str | None = None, **overrides: Any) -> MasterConfig:
    """Build the config from an optional TOML file (``[master]`` table) and CLI overrides."""
    table = load_toml(config_file, "master") if config_file else {}
    return build(MasterConfig, table, **overrides)
