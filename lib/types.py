"""Plain value types of the public client API.

They are frozen dataclasses of JSON-friendly fields (str, int, bool, lists, dicts, None) so the
portal can serialise them with ``dataclasses.asdict`` and the CLI can print them, and so no gRPC
message leaks out of the client library. ``TopicPartition`` is a NamedTuple: it is used as a dict
key and unpacked as ``topic, partition`` everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple


class TopicPartition(NamedTuple):
    """One partition of one topic."""

    topic: str
    partition: int


@dataclass(frozen=True)
class GroupMetadata:
    """A group member's identity as a consumer holds it now (Kafka's ConsumerGroupMetadata):
    what a transactional producer's ``send_offsets`` passes on, so the broker fences the
    offsets of a member that lost its partitions in a rebalance."""

    group: str
    member_id: str = ""  # "": a consumer outside group coordination (never fenced)
    generation: int = -1


@dataclass(frozen=True, slots=True)  # slots: one per produced record, keep it small
class RecordMetadata:
    """Where the broker stored a produced record (the result of ``Producer.send``)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


@dataclass(frozen=True)
class BulkMetadata:
    """Where the broker stored the records of one ``Producer.send_batch`` call: record ``i``
    of the call is at ``partitions[i]``, ``offsets[i]`` (numpy int64 arrays, input order)."""

    topic: str
    partitions: Any
    offsets: Any
    timestamp: int

    def __len__(self) -> int:
        return len(self.offsets)


@dataclass(frozen=True)
class PartitionInfo:
    """One partition of a topic: its leader (``broker_id``, ``address``: where produce and
    fetch go) and offsets (-1 when the broker did not report).

    ``disk_bytes``: its flushed records in the shared data log plus its index, as of the
    broker's last heartbeat (a few seconds old; what is still in the memory cache is not
    counted). ``replicas``: every broker holding a copy (the preferred leader first); ``isr``:
    the in-sync ones; ``leader_epoch``: bumped at every leader change."""

    partition: int
    broker_id: int
    address: str
    available: bool
    earliest: int = -1
    latest: int = -1
    disk_bytes: int = -1
    leader_epoch: int = 0
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)
    replica_lags: list[int] = field(default_factory=list)  # per replica: offsets behind (-1: ?)
    # A reassignment in progress moves the partition to these replicas ([]: none).
    target_replicas: list[int] = field(default_factory=list)
    # Where read_committed readers stop (the oldest open transaction's first offset, else
    # ``latest``); -1 when not known.
    last_stable: int = -1


@dataclass(frozen=True)
class TopicInfo:
    """A topic's settings and its partitions (``partitions``: one PartitionInfo each)."""

    name: str
    partition_count: int
    stores: int
    durability: str
    retention_ms: int
    retention_bytes: int
    max_message_bytes: int
    topic_id: int = 0
    created_ms: int = 0
    partitions: list[PartitionInfo] = field(default_factory=list)
    replication_factor: int = 1
    min_insync_replicas: int = 1
    # no live in-sync replica: another live replica may lead (what only the ISR held is lost)
    unclean_leader_election: bool = False
    owner_group: str = ""  # a group's own topic (docs/retry.md) ...
    owner_role: str = ""  # ... "retry" or "dlq"


@dataclass(frozen=True)
class BrokerInfo:
    """A registered broker, whether the master currently considers it alive, and whether it
    is draining."""

    broker_id: int
    address: str
    alive: bool
    last_heartbeat_ms: int
    rack: str = ""  # as the broker declared it: a partition's replicas go to distinct racks
    # Its data dir as of the last heartbeat (-1: not reported yet). disk_full: appends are
    # refused with DiskFull until space is freed.
    disk_full: bool = False
    disk_free_bytes: int = -1
    disk_reserve_bytes: int = -1
    # Drained by an admin (AdminClient.drain_broker): no new partition is placed on it, and
    # reassignments move the replicas it holds to other brokers.
    draining: bool = False
    replicas: int = 0  # partitions it holds a copy of (or is copying), leader or follower
    leaders: int = 0  # partitions it leads
    # In the answer to a drain: its replicas that no other live broker can take now (they
    # stay; drain again once more brokers run).
    staying: int = 0


@dataclass(frozen=True)
class MemberInfo:
    """One consumer of a group with its assigned partitions (topic -> partition numbers)."""

    member_id: str
    client_host: str
    assignments: dict[str, list[int]]
    last_heartbeat_ms: int
    instance_id: str = ""  # a broadcast member's (docs/broadcast.md)


@dataclass(frozen=True)
class PartitionLag:
    """Committed offset vs. latest offset of one partition for a group (committed -1: none);
    with ``instance_id``, a broadcast instance's own (docs/broadcast.md)."""

    topic: str
    partition: int
    committed: int
    latest: int
    lag: int
    member_id: str = ""
    instance_id: str = ""


@dataclass(frozen=True)
class OffsetMove:
    """One partition's committed offset moved (or, in a dry run, to be moved) by a reset."""

    topic: str
    partition: int
    from_offset: int  # -1: nothing was committed
    to_offset: int


@dataclass(frozen=True)
class GroupInfo:
    """A consumer group: its generation, members and per-partition lag, and after a reset the
    moves it made (a dry run gives only the moves)."""

    group: str
    generation: int
    members: list[MemberInfo] = field(default_factory=list)
    partitions: list[PartitionLag] = field(default_factory=list)
    moves: list[OffsetMove] = field(default_factory=list)
    # of the live members: "clustering", "broadcast", "kafka" (Kafka clients: docs/kafka.md),
    # "" (none live)
    mode: str = ""


@dataclass(frozen=True)
class AuditEntry:
    """One administrative change recorded by the master."""

    time_ms: int
    principal: str
    action: str
    target: str
    details: str
    peer: str = ""


@dataclass(frozen=True)
class TransactionInfo:
    """A transactional_id's transaction as the coordinator holds it (docs/transactions.md)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str  # EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT
    partitions: tuple[tuple[str, int], ...]
    age_ms: int  # since it began (0: none open)
    timeout_ms: int
    updated_ms: int
    offsets: tuple[tuple[str, str, int, int], ...] = ()  # (group, topic, partition, offset)


@dataclass(frozen=True)
class MasterStatus:
    """One master's view of the Raft group (``role`` "unreachable" when it did not answer).

    ``lag`` is how many committed log entries this master has not applied yet, against the
    highest commit index any master reported in the same call.
    """

    address: str
    role: str
    leader: str = ""
    term: int = 0
    epoch: int = 0
    commit_index: int = 0
    applied_index: int = 0
    lag: int = 0
    raft_node: str = ""
    log_entries: int = 0
    has_quorum: bool = False
    error: str = ""


@dataclass(frozen=True)
class UserInfo:
    """A user (logs in with a password) or service account (with API keys only)."""

    name: str
    kind: str
    roles: tuple[str, ...]
    created_ms: int
    updated_ms: int


@dataclass(frozen=True)
class ApiKeyInfo:
    """An API key as listed: never its secret (shown once, at creation)."""

    key_id: str
    principal: str
    description: str
    created_ms: int


@dataclass(frozen=True)
class LoginResult:
    """A signed token and when it expires; present it as ``authorization: Bearer <token>``."""

    token: str
    expires_ms: int
    principal: str
    roles: tuple[str, ...]
