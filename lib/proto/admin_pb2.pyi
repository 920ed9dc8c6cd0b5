from lib.proto import master_pb2 as _master_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CreateTopicRequest(_message.Message):
    __slots__ = ("topic", "settings", "request_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    settings: _master_pb2.TopicSettings
    request_id: str
    def __init__(self, topic: _Optional[str] = ..., settings: _Optional[_Union[_master_pb2.TopicSettings, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class AlterTopicRequest(_message.Message):
    __slots__ = ("topic", "settings")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    settings: _master_pb2.TopicSettings
    def __init__(self, topic: _Optional[str] = ..., settings: _Optional[_Union[_master_pb2.TopicSettings, _Mapping]] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class PartitionDescription(_message.Message):
    __slots__ = ("partition", "broker_id", "address", "available", "earliest", "latest", "disk_bytes", "leader_epoch", "replicas", "isr", "replica_lags", "target_replicas", "last_stable")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    EARLIEST_FIELD_NUMBER: _ClassVar[int]
    LATEST_FIELD_NUMBER: _ClassVar[int]
    DISK_BYTES_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    REPLICA_LAGS_FIELD_NUMBER: _ClassVar[int]
    TARGET_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    LAST_STABLE_FIELD_NUMBER: _ClassVar[int]
    partition: int
    broker_id: int
    address: str
    available: bool
    earliest: int
    latest: int
    disk_bytes: int
    leader_epoch: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    isr: _containers.RepeatedScalarFieldContainer[int]
    replica_lags: _containers.RepeatedScalarFieldContainer[int]
    target_replicas: _containers.RepeatedScalarFieldContainer[int]
    last_stable: int
    def __init__(self, partition: _Optional[int] = ..., broker_id: _Optional[int] = ..., address: _Optional[str] = ..., available: _Optional[bool] = ..., earliest: _Optional[int] = ..., latest: _Optional[int] = ..., disk_bytes: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., isr: _Optional[_Iterable[int]] = ..., replica_lags: _Optional[_Iterable[int]] = ..., target_replicas: _Optional[_Iterable[int]] = ..., last_stable: _Optional[int] = ...) -> None: ...

class TopicDescription(_message.Message):
    __slots__ = ("topic", "settings", "partitions", "created_ms", "owner_group", "owner_role")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    OWNER_GROUP_FIELD_NUMBER: _ClassVar[int]
    OWNER_ROLE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    settings: _master_pb2.TopicSettings
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionDescription]
    created_ms: int
    owner_group: str
    owner_role: str
    def __init__(self, topic: _Optional[str] = ..., settings: _Optional[_Union[_master_pb2.TopicSettings, _Mapping]] = ..., partitions: _Optional[_Iterable[_Union[PartitionDescription, _Mapping]]] = ..., created_ms: _Optional[int] = ..., owner_group: _Optional[str] = ..., owner_role: _Optional[str] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicDescription]
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicDescription, _Mapping]]] = ...) -> None: ...

class ListBrokersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListBrokersResponse(_message.Message):
    __slots__ = ("brokers",)
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    brokers: _containers.RepeatedCompositeFieldContainer[_master_pb2.BrokerInfo]
    def __init__(self, brokers: _Optional[_Iterable[_Union[_master_pb2.BrokerInfo, _Mapping]]] = ...) -> None: ...

class SetBrokerDrainingRequest(_message.Message):
    __slots__ = ("broker_id", "draining")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    draining: bool
    def __init__(self, broker_id: _Optional[int] = ..., draining: _Optional[bool] = ...) -> None: ...

class SetBrokerDrainingResponse(_message.Message):
    __slots__ = ("broker", "changed", "moving", "staying")
    BROKER_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    MOVING_FIELD_NUMBER: _ClassVar[int]
    STAYING_FIELD_NUMBER: _ClassVar[int]
    broker: _master_pb2.BrokerInfo
    changed: bool
    moving: int
    staying: int
    def __init__(self, broker: _Optional[_Union[_master_pb2.BrokerInfo, _Mapping]] = ..., changed: _Optional[bool] = ..., moving: _Optional[int] = ..., staying: _Optional[int] = ...) -> None: ...

class PartitionReplicas(_message.Message):
    __slots__ = ("partition", "replicas")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    partition: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, partition: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ...) -> None: ...

class ReassignPartitionsRequest(_message.Message):
    __slots__ = ("topic", "partitions")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionReplicas]
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[PartitionReplicas, _Mapping]]] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, groups: _Optional[_Iterable[str]] = ...) -> None: ...

class DescribeGroupRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class MemberDescription(_message.Message):
    __slots__ = ("member_id", "client_host", "assignments", "last_heartbeat_ms", "instance_id")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_HOST_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_MS_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    client_host: str
    assignments: _containers.RepeatedCompositeFieldContainer[_master_pb2.Assignment]
    last_heartbeat_ms: int
    instance_id: str
    def __init__(self, member_id: _Optional[str] = ..., client_host: _Optional[str] = ..., assignments: _Optional[_Iterable[_Union[_master_pb2.Assignment, _Mapping]]] = ..., last_heartbeat_ms: _Optional[int] = ..., instance_id: _Optional[str] = ...) -> None: ...

class PartitionLag(_message.Message):
    __slots__ = ("topic", "partition", "committed", "latest", "lag", "member_id", "instance_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    LATEST_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    committed: int
    latest: int
    lag: int
    member_id: str
    instance_id: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., committed: _Optional[int] = ..., latest: _Optional[int] = ..., lag: _Optional[int] = ..., member_id: _Optional[str] = ..., instance_id: _Optional[str] = ...) -> None: ...

class GroupDescription(_message.Message):
    __slots__ = ("group", "generation", "members", "partitions", "moves", "mode")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    MOVES_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    group: str
    generation: int
    members: _containers.RepeatedCompositeFieldContainer[MemberDescription]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionLag]
    moves: _containers.RepeatedCompositeFieldContainer[OffsetMove]
    mode: str
    def __init__(self, group: _Optional[str] = ..., generation: _Optional[int] = ..., members: _Optional[_Iterable[_Union[MemberDescription, _Mapping]]] = ..., partitions: _Optional[_Iterable[_Union[PartitionLag, _Mapping]]] = ..., moves: _Optional[_Iterable[_Union[OffsetMove, _Mapping]]] = ..., mode: _Optional[str] = ...) -> None: ...

class OffsetMove(_message.Message):
    __slots__ = ("topic", "partition", "from_offset", "to_offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    FROM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TO_OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    from_offset: int
    to_offset: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., from_offset: _Optional[int] = ..., to_offset: _Optional[int] = ...) -> None: ...

class ResetGroupOffsetsRequest(_message.Message):
    __slots__ = ("group", "topic", "earliest", "latest", "offset", "timestamp_ms", "partitions", "dry_run", "instance_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    EARLIEST_FIELD_NUMBER: _ClassVar[int]
    LATEST_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    earliest: bool
    latest: bool
    offset: int
    timestamp_ms: int
    partitions: _containers.RepeatedScalarFieldContainer[int]
    dry_run: bool
    instance_id: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., earliest: _Optional[bool] = ..., latest: _Optional[bool] = ..., offset: _Optional[int] = ..., timestamp_ms: _Optional[int] = ..., partitions: _Optional[_Iterable[int]] = ..., dry_run: _Optional[bool] = ..., instance_id: _Optional[str] = ...) -> None: ...

class AuditLogRequest(_message.Message):
    __slots__ = ("limit",)
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    limit: int
    def __init__(self, limit: _Optional[int] = ...) -> None: ...

class AuditEntry(_message.Message):
    __slots__ = ("time_ms", "principal", "action", "target", "details", "peer")
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    time_ms: int
    principal: str
    action: str
    target: str
    details: str
    peer: str
    def __init__(self, time_ms: _Optional[int] = ..., principal: _Optional[str] = ..., action: _Optional[str] = ..., target: _Optional[str] = ..., details: _Optional[str] = ..., peer: _Optional[str] = ...) -> None: ...

class AuditLogResponse(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[AuditEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[AuditEntry, _Mapping]]] = ...) -> None: ...

class MasterStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MasterStatusResponse(_message.Message):
    __slots__ = ("address", "raft_node", "role", "leader", "term", "epoch", "commit_index", "applied_index", "log_entries", "has_quorum", "peers")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RAFT_NODE_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    LOG_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    HAS_QUORUM_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    address: str
    raft_node: str
    role: str
    leader: str
    term: int
    epoch: int
    commit_index: int
    applied_index: int
    log_entries: int
    has_quorum: bool
    peers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, address: _Optional[str] = ..., raft_node: _Optional[str] = ..., role: _Optional[str] = ..., leader: _Optional[str] = ..., term: _Optional[int] = ..., epoch: _Optional[int] = ..., commit_index: _Optional[int] = ..., applied_index: _Optional[int] = ..., log_entries: _Optional[int] = ..., has_quorum: _Optional[bool] = ..., peers: _Optional[_Iterable[str]] = ...) -> None: ...

class ListTransactionsRequest(_message.Message):
    __slots__ = ("all",)
    ALL_FIELD_NUMBER: _ClassVar[int]
    all: bool
    def __init__(self, all: _Optional[bool] = ...) -> None: ...

class TransactionDescription(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch", "state", "partitions", "age_ms", "timeout_ms", "updated_ms", "offsets")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    AGE_MS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_MS_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    partitions: _containers.RepeatedCompositeFieldContainer[_master_pb2.TxnTopicPartition]
    age_ms: int
    timeout_ms: int
    updated_ms: int
    offsets: _containers.RepeatedCompositeFieldContainer[TxnGroupOffset]
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., state: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[_master_pb2.TxnTopicPartition, _Mapping]]] = ..., age_ms: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., updated_ms: _Optional[int] = ..., offsets: _Optional[_Iterable[_Union[TxnGroupOffset, _Mapping]]] = ...) -> None: ...

class TxnGroupOffset(_message.Message):
    __slots__ = ("group", "topic", "partition", "offset")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    partition: int
    offset: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class ListTransactionsResponse(_message.Message):
    __slots__ = ("transactions",)
    TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    transactions: _containers.RepeatedCompositeFieldContainer[TransactionDescription]
    def __init__(self, transactions: _Optional[_Iterable[_Union[TransactionDescription, _Mapping]]] = ...) -> None: ...

class AbortTransactionRequest(_message.Message):
    __slots__ = ("transactional_id",)
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    def __init__(self, transactional_id: _Optional[str] = ...) -> None: ...

class AbortTransactionResponse(_message.Message):
    __slots__ = ("transaction",)
    TRANSACTION_FIELD_NUMBER: _ClassVar[int]
    transaction: TransactionDescription
    def __init__(self, transaction: _Optional[_Union[TransactionDescription, _Mapping]] = ...) -> None: ...

class AuditDeadLettersRequest(_message.Message):
    __slots__ = ("group", "action", "details")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    group: str
    action: str
    details: str
    def __init__(self, group: _Optional[str] = ..., action: _Optional[str] = ..., details: _Optional[str] = ...) -> None: ...

class AuditDeadLettersResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
