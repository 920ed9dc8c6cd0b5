"""The master's configuration: one frozen dataclass, read from TOML (``[master]``) + CLI overrides.

Topic defaults (``default_*``) fill the zero fields of a CreateTopic request; the limits bound
what any request may ask for. Everything is validated once, then the object is passed down.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lib.config import build, load_toml, require

MiB = 1 << 20
DAY_MS = 24 * 3600 * 1000
MAX_MESSAGE_LIMIT = 16 * MiB  # largest max_message_bytes a topic may ask for
DURABILITIES = ("async", "sync")


@dataclass(frozen=True)
class MasterConfig:
    """Everything :class:`master.server.Master` needs."""

    data_dir: str = ""
    host: str = "127.0.0.1"
    port: int = 8715
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
    max_partitions_per_topic: int = 1024
    max_topics: int = 10_000
    tombstones_kept: int = 1000
    audit_entries_kept: int = 100_000
    lmdb_map_size: int = 1 << 30

    def validate(self) -> None:
        require(bool(self.data_dir), "MasterConfig.data_dir is required (--data-dir)")
        require(0 <= self.port < 65536, "MasterConfig.port must be in [0, 65535]")
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
        require(self.group_reaper_interval_ms > 0,
                "MasterConfig.group_reaper_interval_ms must be > 0")
        self._validate_topic_defaults()
        require(self.tombstones_kept >= 1, "MasterConfig.tombstones_kept must be >= 1")
        require(self.audit_entries_kept >= 1, "MasterConfig.audit_entries_kept must be >= 1")
        require(self.lmdb_map_size >= 1 << 20, "MasterConfig.lmdb_map_size must be >= 1 MiB")

    def _validate_topic_defaults(self) -> None:
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


def load(config_file: str | None = None, **overrides: Any) -> MasterConfig:
    """Build the config from an optional TOML file (``[master]`` table) and CLI overrides."""
    table = load_toml(config_file, "master") if config_file else {}
    return build(MasterConfig, table, **overrides)
