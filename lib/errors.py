"""One exception tree for the whole project.

Every error carries the data a caller needs to act on it (topic, partition, offsets, limits) and
two pieces of advice: ``retriable`` (the same call may succeed later) and ``refresh_metadata``
(routes may be stale: ask the master again before retrying). Servers map these to gRPC status
codes through one table (added with the wire protocol); nothing here does I/O.
"""
from __future__ import annotations

from typing import Any


class TubeqError(Exception):
    """Base of every error raised by tubeq."""

    code = "UNKNOWN"
    retriable = False
    refresh_metadata = False

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def __getattr__(self, name: str) -> Any:
        # Lets callers write err.earliest instead of err.details["earliest"].
        details = self.__dict__.get("details", {})
        if name in details:
            return details[name]
        raise AttributeError(name)


class InvalidArgument(TubeqError):
    """The request itself is wrong (bad name, bad value); retrying it unchanged cannot help."""

    code = "INVALID_ARGUMENT"


class InvalidName(InvalidArgument):
    code = "INVALID_NAME"


class CorruptRecord(TubeqError):
    """A batch or frame failed its CRC or structural checks."""

    code = "CORRUPT_RECORD"


class RecordTooLarge(InvalidArgument):
    code = "RECORD_TOO_LARGE"


class BatchTooLarge(InvalidArgument):
    code = "BATCH_TOO_LARGE"


class OffsetOutOfRange(TubeqError):
    """The offset is below the earliest or above the latest offset of the partition."""

    code = "OFFSET_OUT_OF_RANGE"


class UnknownPartition(TubeqError):
    code = "UNKNOWN_PARTITION"
    refresh_metadata = True


class StoreClosed(TubeqError):
    code = "STORE_CLOSED"
    retriable = True
    refresh_metadata = True


class ConfigError(TubeqError):
    """A configuration file or override is invalid; raised before anything starts."""

    code = "CONFIG_ERROR"


class StorageError(TubeqError):
    """The disk refused an operation (write, fsync); the store stops accepting appends."""

    code = "STORAGE_ERROR"


class DiskFull(StorageError):
    """The broker's disk is (nearly) full: appends are refused until space comes back.

    Nothing was acknowledged; the same append succeeds once space is freed (``free_bytes``,
    ``reserve_bytes`` and ``path`` say where and how much), so producers back off and retry.
    """

    code = "DISK_FULL"
    retriable = True


class Unavailable(TubeqError):
    """The server could not be reached or did not answer in time."""

    code = "UNAVAILABLE"
    retriable = True
    refresh_metadata = True


class RequestTimedOut(TubeqError):
    """The call did not complete within its deadline; it may or may not have taken effect."""

    code = "TIMED_OUT"
    retriable = True


class UnknownTopic(TubeqError):
    """No such topic (never created, or deleted)."""

    code = "UNKNOWN_TOPIC"
    refresh_metadata = True


class UnknownBroker(TubeqError):
    """No broker with this id ever registered with the cluster (``broker_id`` names it)."""

    code = "UNKNOWN_BROKER"


class TopicExists(InvalidArgument):
    code = "TOPIC_EXISTS"


class PartitionNotHosted(TubeqError):
    """This broker does not host the partition (placement moved, or routes are stale)."""

    code = "PARTITION_NOT_HOSTED"
    retriable = True
    refresh_metadata = True


class NotLeader(TubeqError):
    """This master is a standby; ``leader`` names the active master ("" when unknown)."""

    code = "NOT_LEADER"
    retriable = True
    refresh_metadata = True


class NotEnoughReplicas(TubeqError):
    """acks=all refused: the partition has fewer in-sync replicas than its topic's
    min_insync_replicas (nothing was stored; a retry may succeed once followers catch up)."""

    code = "NOT_ENOUGH_REPLICAS"
    retriable = True


class NotEnoughReplicasAfterAppend(NotEnoughReplicas):
    """acks=all not acknowledged: the leader stored the records, but the ISR fell below the
    topic's min_insync_replicas while they waited for it (Kafka's
    NOT_ENOUGH_REPLICAS_AFTER_APPEND). They are on fewer copies than the topic needs and may
    still appear to consumers; retry with an idempotent producer (the retry is answered
    with the same offsets, never stored twice)."""

    code = "NOT_ENOUGH_REPLICAS_AFTER_APPEND"


class NotEnoughBrokers(TubeqError):
    """No live broker can take the partitions (placement needs at least one that is not
    draining)."""

    code = "NOT_ENOUGH_BROKERS"
    retriable = True


class UnknownMember(TubeqError):
    """The group does not know this member (its session expired): join again."""

    code = "UNKNOWN_MEMBER"


class Fenced(TubeqError):
    """A newer generation owns the partition: this member may not commit or fetch it."""

    code = "FENCED"


class GroupNotEmpty(TubeqError):
    """The operation needs a group without live members (e.g. resetting offsets)."""

    code = "GROUP_NOT_EMPTY"


class InstanceInUse(TubeqError):
    """A live member of a broadcast group already has this instance id (another process uses
    it, or a previous one died and its session has not ended yet: ``expires_in_ms``)."""

    code = "INSTANCE_IN_USE"


class GroupModeConflict(TubeqError):
    """A group has live members consuming in the other mode (clustering vs. broadcast)."""

    code = "GROUP_MODE_CONFLICT"


class ProducerFenced(TubeqError):
    """An idempotent producer with a newer epoch took over this producer id."""

    code = "PRODUCER_FENCED"


class ConcurrentTransactions(TubeqError):
    """The transactional_id's last transaction is still ending (its commit or abort markers
    are being written): retry the same call after a short backoff (Kafka's
    CONCURRENT_TRANSACTIONS). From EndTxn: the decision is recorded and final; retry the
    same EndTxn to learn when every marker is written."""

    code = "CONCURRENT_TRANSACTIONS"
    retriable = True


class InvalidTxnState(TubeqError):
    """The call does not fit the transaction's state (``state`` names it), e.g. an abort of a
    transaction that committed: retrying it cannot help."""

    code = "INVALID_TXN_STATE"


class UnknownTransactionalId(TubeqError):
    """No InitProducerId ever named this transactional_id (or it expired unused): call
    InitProducerId with it first."""

    code = "UNKNOWN_TRANSACTIONAL_ID"


class TxnRecordsLost(TubeqError):
    """A partition holds fewer of an open transaction's records than the producer had
    acknowledged there (a crash of its only copy lost the rest, or a leader change did): the
    transaction cannot commit whole; abort it (``partition``, ``held``, ``acknowledged``)."""

    code = "TXN_RECORDS_LOST"


class UnstableOffsetCommit(TubeqError):
    """A transaction holds offsets of this group and partition pending (Kafka's
    UNSTABLE_OFFSET_COMMIT): the committed offset is about to change; retry once its
    commit or abort marker lands (consumers do, within their rpc timeout)."""

    code = "UNSTABLE_OFFSET_COMMIT"
    retriable = True


class OutOfOrderSequence(TubeqError):
    """An idempotent batch skipped sequence numbers: earlier batches were lost."""

    code = "OUT_OF_ORDER_SEQUENCE"


class SinkStagingLost(TubeqError):
    """A sink commit found fewer staged batches than its tasks staged (the broker restarted or
    the staging expired): nothing of that micro-batch was applied; run it again (Spark replays
    it when the query restarts)."""

    code = "SINK_STAGING_LOST"


class SinkStagingFull(TubeqError):
    """A broker holds as many staged sink bytes as ``sink_staging_bytes`` allows."""

    code = "SINK_STAGING_FULL"
    retriable = True


class QuotaExceeded(TubeqError):
    """A byte-rate quota is further in debt than a broker allows (the client did not wait the
    ``throttle_ms`` it was told): retry after ``retry_after_ms``; nothing was stored or read."""

    code = "QUOTA_EXCEEDED"
    retriable = True


class Unauthenticated(TubeqError):
    """No credentials, wrong ones, or a token that is malformed, expired or signed with a key
    the cluster no longer accepts. Messages say which, never echo a secret."""

    code = "UNAUTHENTICATED"


class PermissionDenied(TubeqError):
    """Authenticated, but no ACL entry allows the operation (or one denies it)."""

    code = "PERMISSION_DENIED"


class UnknownPrincipal(InvalidArgument):
    """No such user or API key."""

    code = "UNKNOWN_PRINCIPAL"


class PrincipalExists(InvalidArgument):
    code = "PRINCIPAL_EXISTS"


class ClientClosed(TubeqError):
    """The client (producer, consumer) was closed: it takes no more calls. Never on the wire."""

    code = "CLIENT_CLOSED"
