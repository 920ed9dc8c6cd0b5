from lib.proto import security_pb2 as _security_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EnsureGroupTopicsRequest(_message.Message):
    __slots__ = ("group", "dead_letter_topic")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    group: str
    dead_letter_topic: str
    def __init__(self, group: _Optional[str] = ..., dead_letter_topic: _Optional[str] = ...) -> None: ...

class EnsureGroupTopicsResponse(_message.Message):
    __slots__ = ("retry_topic", "dead_letter_topic")
    RETRY_TOPIC_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    retry_topic: str
    dead_letter_topic: str
    def __init__(self, retry_topic: _Optional[str] = ..., dead_letter_topic: _Optional[str] = ...) -> None: ...

class RegisterBrokerRequest(_message.Message):
    __slots__ = ("broker_id", "address", "rack", "incarnation", "kafka_address")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    KAFKA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    address: str
    rack: str
    incarnation: str
    kafka_address: str
    def __init__(self, broker_id: _Optional[int] = ..., address: _Optional[str] = ..., rack: _Optional[str] = ..., incarnation: _Optional[str] = ..., kafka_address: _Optional[str] = ...) -> None: ...

class TopicSettings(_message.Message):
    __slots__ = ("partitions", "stores", "durability", "retention_ms", "retention_bytes", "max_message_bytes", "topic_id", "replication_factor", "min_insync_replicas", "unclean_leader_election")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    STORES_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    MIN_INSYNC_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    UNCLEAN_LEADER_ELECTION_FIELD_NUMBER: _ClassVar[int]
    partitions: int
    stores: int
    durability: str
    retention_ms: int
    retention_bytes: int
    max_message_bytes: int
    topic_id: int
    replication_factor: int
    min_insync_replicas: int
    unclean_leader_election: bool
    def __init__(self, partitions: _Optional[int] = ..., stores: _Optional[int] = ..., durability: _Optional[str] = ..., retention_ms: _Optional[int] = ..., retention_bytes: _Optional[int] = ..., max_message_bytes: _Optional[int] = ..., topic_id: _Optional[int] = ..., replication_factor: _Optional[int] = ..., min_insync_replicas: _Optional[int] = ..., unclean_leader_election: _Optional[bool] = ...) -> None: ...

class PartitionPlacement(_message.Message):
    __slots__ = ("topic", "partition", "broker_id", "leader", "leader_epoch", "replicas", "isr", "leader_address", "target_replicas")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TARGET_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    broker_id: int
    leader: int
    leader_epoch: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    isr: _containers.RepeatedScalarFieldContainer[int]
    leader_address: str
    target_replicas: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., broker_id: _Optional[int] = ..., leader: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., isr: _Optional[_Iterable[int]] = ..., leader_address: _Optional[str] = ..., target_replicas: _Optional[_Iterable[int]] = ...) -> None: ...

class RegisterBrokerResponse(_message.Message):
    __slots__ = ("term", "topics", "placements", "heartbeat_interval_ms", "signing_keys", "acls", "quotas", "ip_rules")
    class TopicsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: TopicSettings
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[TopicSettings, _Mapping]] = ...) -> None: ...
    TERM_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    PLACEMENTS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    SIGNING_KEYS_FIELD_NUMBER: _ClassVar[int]
    ACLS_FIELD_NUMBER: _ClassVar[int]
    QUOTAS_FIELD_NUMBER: _ClassVar[int]
    IP_RULES_FIELD_NUMBER: _ClassVar[int]
    term: int
    topics: _containers.MessageMap[str, TopicSettings]
    placements: _containers.RepeatedCompositeFieldContainer[PartitionPlacement]
    heartbeat_interval_ms: int
    signing_keys: _containers.RepeatedCompositeFieldContainer[SigningKey]
    acls: _security_pb2.AclSet
    quotas: _security_pb2.QuotaSet
    ip_rules: _security_pb2.IpRuleSet
    def __init__(self, term: _Optional[int] = ..., topics: _Optional[_Mapping[str, TopicSettings]] = ..., placements: _Optional[_Iterable[_Union[PartitionPlacement, _Mapping]]] = ..., heartbeat_interval_ms: _Optional[int] = ..., signing_keys: _Optional[_Iterable[_Union[SigningKey, _Mapping]]] = ..., acls: _Optional[_Union[_security_pb2.AclSet, _Mapping]] = ..., quotas: _Optional[_Union[_security_pb2.QuotaSet, _Mapping]] = ..., ip_rules: _Optional[_Union[_security_pb2.IpRuleSet, _Mapping]] = ...) -> None: ...

class SigningKey(_message.Message):
    __slots__ = ("key_id", "secret")
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    key_id: str
    secret: bytes
    def __init__(self, key_id: _Optional[str] = ..., secret: _Optional[bytes] = ...) -> None: ...

class PartitionStats(_message.Message):
    __slots__ = ("topic", "partition", "earliest", "latest", "bytes_in", "messages_in", "bytes_out", "messages_out", "disk_bytes", "last_stable")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    EARLIEST_FIELD_NUMBER: _ClassVar[int]
    LATEST_FIELD_NUMBER: _ClassVar[int]
    BYTES_IN_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_IN_FIELD_NUMBER: _ClassVar[int]
    BYTES_OUT_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_OUT_FIELD_NUMBER: _ClassVar[int]
    DISK_BYTES_FIELD_NUMBER: _ClassVar[int]
    LAST_STABLE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    earliest: int
    latest: int
    bytes_in: int
    messages_in: int
    bytes_out: int
    messages_out: int
    disk_bytes: int
    last_stable: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., earliest: _Optional[int] = ..., latest: _Optional[int] = ..., bytes_in: _Optional[int] = ..., messages_in: _Optional[int] = ..., bytes_out: _Optional[int] = ..., messages_out: _Optional[int] = ..., disk_bytes: _Optional[int] = ..., last_stable: _Optional[int] = ...) -> None: ...

class DiskStatus(_message.Message):
    __slots__ = ("free_bytes", "reserve_bytes", "full")
    FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    RESERVE_BYTES_FIELD_NUMBER: _ClassVar[int]
    FULL_FIELD_NUMBER: _ClassVar[int]
    free_bytes: int
    reserve_bytes: int
    full: bool
    def __init__(self, free_bytes: _Optional[int] = ..., reserve_bytes: _Optional[int] = ..., full: _Optional[bool] = ...) -> None: ...

class BrokerHeartbeatRequest(_message.Message):
    __slots__ = ("broker_id", "stats", "disk", "committed", "acl_version", "refusals", "quota_version", "ip_version", "unreachable_brokers", "metadata_digest", "stats_partial")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    DISK_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    ACL_VERSION_FIELD_NUMBER: _ClassVar[int]
    REFUSALS_FIELD_NUMBER: _ClassVar[int]
    QUOTA_VERSION_FIELD_NUMBER: _ClassVar[int]
    IP_VERSION_FIELD_NUMBER: _ClassVar[int]
    UNREACHABLE_BROKERS_FIELD_NUMBER: _ClassVar[int]
    METADATA_DIGEST_FIELD_NUMBER: _ClassVar[int]
    STATS_PARTIAL_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    stats: _containers.RepeatedCompositeFieldContainer[PartitionStats]
    disk: DiskStatus
    committed: _containers.RepeatedCompositeFieldContainer[GroupTopic]
    acl_version: int
    refusals: _containers.RepeatedCompositeFieldContainer[Refusal]
    quota_version: int
    ip_version: int
    unreachable_brokers: _containers.RepeatedScalarFieldContainer[int]
    metadata_digest: bytes
    stats_partial: bool
    def __init__(self, broker_id: _Optional[int] = ..., stats: _Optional[_Iterable[_Union[PartitionStats, _Mapping]]] = ..., disk: _Optional[_Union[DiskStatus, _Mapping]] = ..., committed: _Optional[_Iterable[_Union[GroupTopic, _Mapping]]] = ..., acl_version: _Optional[int] = ..., refusals: _Optional[_Iterable[_Union[Refusal, _Mapping]]] = ..., quota_version: _Optional[int] = ..., ip_version: _Optional[int] = ..., unreachable_brokers: _Optional[_Iterable[int]] = ..., metadata_digest: _Optional[bytes] = ..., stats_partial: _Optional[bool] = ...) -> None: ...

class Refusal(_message.Message):
    __slots__ = ("principal", "method", "reason", "peer", "count", "first_ms")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    FIRST_MS_FIELD_NUMBER: _ClassVar[int]
    principal: str
    method: str
    reason: str
    peer: str
    count: int
    first_ms: int
    def __init__(self, principal: _Optional[str] = ..., method: _Optional[str] = ..., reason: _Optional[str] = ..., peer: _Optional[str] = ..., count: _Optional[int] = ..., first_ms: _Optional[int] = ...) -> None: ...

class GroupTopic(_message.Message):
    __slots__ = ("group", "topic")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ...) -> None: ...

class BrokerHeartbeatResponse(_message.Message):
    __slots__ = ("term", "reregister", "topics", "placements", "deleted", "signing_keys", "acls", "quotas", "ip_rules", "metadata_unchanged", "metadata_digest")
    class TopicsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: TopicSettings
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[TopicSettings, _Mapping]] = ...) -> None: ...
    TERM_FIELD_NUMBER: _ClassVar[int]
    REREGISTER_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    PLACEMENTS_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    SIGNING_KEYS_FIELD_NUMBER: _ClassVar[int]
    ACLS_FIELD_NUMBER: _ClassVar[int]
    QUOTAS_FIELD_NUMBER: _ClassVar[int]
    IP_RULES_FIELD_NUMBER: _ClassVar[int]
    METADATA_UNCHANGED_FIELD_NUMBER: _ClassVar[int]
    METADATA_DIGEST_FIELD_NUMBER: _ClassVar[int]
    term: int
    reregister: bool
    topics: _containers.MessageMap[str, TopicSettings]
    placements: _containers.RepeatedCompositeFieldContainer[PartitionPlacement]
    deleted: _containers.RepeatedCompositeFieldContainer[DeletedTopic]
    signing_keys: _containers.RepeatedCompositeFieldContainer[SigningKey]
    acls: _security_pb2.AclSet
    quotas: _security_pb2.QuotaSet
    ip_rules: _security_pb2.IpRuleSet
    metadata_unchanged: bool
    metadata_digest: bytes
    def __init__(self, term: _Optional[int] = ..., reregister: _Optional[bool] = ..., topics: _Optional[_Mapping[str, TopicSettings]] = ..., placements: _Optional[_Iterable[_Union[PartitionPlacement, _Mapping]]] = ..., deleted: _Optional[_Iterable[_Union[DeletedTopic, _Mapping]]] = ..., signing_keys: _Optional[_Iterable[_Union[SigningKey, _Mapping]]] = ..., acls: _Optional[_Union[_security_pb2.AclSet, _Mapping]] = ..., quotas: _Optional[_Union[_security_pb2.QuotaSet, _Mapping]] = ..., ip_rules: _Optional[_Union[_security_pb2.IpRuleSet, _Mapping]] = ..., metadata_unchanged: _Optional[bool] = ..., metadata_digest: _Optional[bytes] = ...) -> None: ...

class DeletedTopic(_message.Message):
    __slots__ = ("topic", "topic_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    topic_id: int
    def __init__(self, topic: _Optional[str] = ..., topic_id: _Optional[int] = ...) -> None: ...

class BrokerInfo(_message.Message):
    __slots__ = ("broker_id", "address", "alive", "last_heartbeat_ms", "disk", "draining", "rack", "replicas", "leaders")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_MS_FIELD_NUMBER: _ClassVar[int]
    DISK_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    LEADERS_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    address: str
    alive: bool
    last_heartbeat_ms: int
    disk: DiskStatus
    draining: bool
    rack: str
    replicas: int
    leaders: int
    def __init__(self, broker_id: _Optional[int] = ..., address: _Optional[str] = ..., alive: _Optional[bool] = ..., last_heartbeat_ms: _Optional[int] = ..., disk: _Optional[_Union[DiskStatus, _Mapping]] = ..., draining: _Optional[bool] = ..., rack: _Optional[str] = ..., replicas: _Optional[int] = ..., leaders: _Optional[int] = ...) -> None: ...

class PartitionRoute(_message.Message):
    __slots__ = ("partition", "broker_id", "address", "available", "leader_epoch", "replicas", "isr", "target_replicas", "replica_addresses")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    TARGET_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    partition: int
    broker_id: int
    address: str
    available: bool
    leader_epoch: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    isr: _containers.RepeatedScalarFieldContainer[int]
    target_replicas: _containers.RepeatedScalarFieldContainer[int]
    replica_addresses: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, partition: _Optional[int] = ..., broker_id: _Optional[int] = ..., address: _Optional[str] = ..., available: _Optional[bool] = ..., leader_epoch: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., isr: _Optional[_Iterable[int]] = ..., target_replicas: _Optional[_Iterable[int]] = ..., replica_addresses: _Optional[_Iterable[str]] = ...) -> None: ...

class TopicRoute(_message.Message):
    __slots__ = ("topic", "partitions", "settings")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionRoute]
    settings: TopicSettings
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[PartitionRoute, _Mapping]]] = ..., settings: _Optional[_Union[TopicSettings, _Mapping]] = ...) -> None: ...

class GetRoutesRequest(_message.Message):
    __slots__ = ("topics", "brokers_only")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    BROKERS_ONLY_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    brokers_only: bool
    def __init__(self, topics: _Optional[_Iterable[str]] = ..., brokers_only: _Optional[bool] = ...) -> None: ...

class GetRoutesResponse(_message.Message):
    __slots__ = ("routes", "kafka_addresses")
    class KafkaAddressesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: str
        def __init__(self, key: _Optional[int] = ..., value: _Optional[str] = ...) -> None: ...
    ROUTES_FIELD_NUMBER: _ClassVar[int]
    KAFKA_ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    routes: _containers.RepeatedCompositeFieldContainer[TopicRoute]
    kafka_addresses: _containers.ScalarMap[int, str]
    def __init__(self, routes: _Optional[_Iterable[_Union[TopicRoute, _Mapping]]] = ..., kafka_addresses: _Optional[_Mapping[int, str]] = ...) -> None: ...

class Assignment(_message.Message):
    __slots__ = ("topic", "partitions")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class JoinGroupRequest(_message.Message):
    __slots__ = ("group", "topics", "member_id", "client_host", "session_timeout_ms", "owned", "mode", "instance_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_HOST_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    OWNED_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    member_id: str
    client_host: str
    session_timeout_ms: int
    owned: _containers.RepeatedCompositeFieldContainer[Assignment]
    mode: str
    instance_id: str
    def __init__(self, group: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ..., member_id: _Optional[str] = ..., client_host: _Optional[str] = ..., session_timeout_ms: _Optional[int] = ..., owned: _Optional[_Iterable[_Union[Assignment, _Mapping]]] = ..., mode: _Optional[str] = ..., instance_id: _Optional[str] = ...) -> None: ...

class GroupHeartbeatRequest(_message.Message):
    __slots__ = ("group", "member_id", "generation")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    generation: int
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ..., generation: _Optional[int] = ...) -> None: ...

class GroupState(_message.Message):
    __slots__ = ("member_id", "generation", "assignments", "routes", "heartbeat_interval_ms")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    ROUTES_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    generation: int
    assignments: _containers.RepeatedCompositeFieldContainer[Assignment]
    routes: _containers.RepeatedCompositeFieldContainer[TopicRoute]
    heartbeat_interval_ms: int
    def __init__(self, member_id: _Optional[str] = ..., generation: _Optional[int] = ..., assignments: _Optional[_Iterable[_Union[Assignment, _Mapping]]] = ..., routes: _Optional[_Iterable[_Union[TopicRoute, _Mapping]]] = ..., heartbeat_interval_ms: _Optional[int] = ...) -> None: ...

class LeaveGroupRequest(_message.Message):
    __slots__ = ("group", "member_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ...) -> None: ...

class LeaveGroupResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AlterIsrRequest(_message.Message):
    __slots__ = ("broker_id", "topic", "topic_id", "partition", "leader_epoch", "isr", "complete_reassignment")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_REASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    topic: str
    topic_id: int
    partition: int
    leader_epoch: int
    isr: _containers.RepeatedScalarFieldContainer[int]
    complete_reassignment: bool
    def __init__(self, broker_id: _Optional[int] = ..., topic: _Optional[str] = ..., topic_id: _Optional[int] = ..., partition: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., isr: _Optional[_Iterable[int]] = ..., complete_reassignment: _Optional[bool] = ...) -> None: ...

class AlterIsrResponse(_message.Message):
    __slots__ = ("isr", "leader", "leader_epoch", "replicas")
    ISR_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    isr: _containers.RepeatedScalarFieldContainer[int]
    leader: int
    leader_epoch: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, isr: _Optional[_Iterable[int]] = ..., leader: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ...) -> None: ...

class BrokerShutdownRequest(_message.Message):
    __slots__ = ("broker_id",)
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    def __init__(self, broker_id: _Optional[int] = ...) -> None: ...

class BrokerShutdownResponse(_message.Message):
    __slots__ = ("still_led",)
    STILL_LED_FIELD_NUMBER: _ClassVar[int]
    still_led: int
    def __init__(self, still_led: _Optional[int] = ...) -> None: ...

class InitProducerIdRequest(_message.Message):
    __slots__ = ("client_id", "transactional_id", "transaction_timeout_ms")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    transactional_id: str
    transaction_timeout_ms: int
    def __init__(self, client_id: _Optional[str] = ..., transactional_id: _Optional[str] = ..., transaction_timeout_ms: _Optional[int] = ...) -> None: ...

class InitProducerIdResponse(_message.Message):
    __slots__ = ("producer_id", "producer_epoch")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    producer_epoch: int
    def __init__(self, producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ...) -> None: ...

class TxnTopicPartition(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class AddPartitionsToTxnRequest(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch", "partitions")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: _containers.RepeatedCompositeFieldContainer[TxnTopicPartition]
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[TxnTopicPartition, _Mapping]]] = ...) -> None: ...

class AddPartitionsToTxnResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TxnOffset(_message.Message):
    __slots__ = ("topic", "partition", "offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class AddOffsetsToTxnRequest(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch", "group", "offsets")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    group: str
    offsets: _containers.RepeatedCompositeFieldContainer[TxnOffset]
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., group: _Optional[str] = ..., offsets: _Optional[_Iterable[_Union[TxnOffset, _Mapping]]] = ...) -> None: ...

class AddOffsetsToTxnResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class OpenTxnQuery(_message.Message):
    __slots__ = ("producer_id", "producer_epoch", "topic", "partition")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    producer_epoch: int
    topic: str
    partition: int
    def __init__(self, producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class CheckOpenTxnsRequest(_message.Message):
    __slots__ = ("queries",)
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    queries: _containers.RepeatedCompositeFieldContainer[OpenTxnQuery]
    def __init__(self, queries: _Optional[_Iterable[_Union[OpenTxnQuery, _Mapping]]] = ...) -> None: ...

class CheckOpenTxnsResponse(_message.Message):
    __slots__ = ("open",)
    OPEN_FIELD_NUMBER: _ClassVar[int]
    open: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, open: _Optional[_Iterable[bool]] = ...) -> None: ...

class BeginHalfMessageRequest(_message.Message):
    __slots__ = ("producer_group", "topic", "partition")
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    topic: str
    partition: int
    def __init__(self, producer_group: _Optional[str] = ..., topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class BeginHalfMessageResponse(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ...) -> None: ...

class EndHalfMessageRequest(_message.Message):
    __slots__ = ("producer_group", "transactional_id", "producer_id", "producer_epoch", "commit")
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    def __init__(self, producer_group: _Optional[str] = ..., transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., commit: _Optional[bool] = ...) -> None: ...

class PollTxnChecksRequest(_message.Message):
    __slots__ = ("producer_group", "wait_ms")
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    wait_ms: int
    def __init__(self, producer_group: _Optional[str] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class TxnCheck(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch", "topic", "partition", "attempt")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    topic: str
    partition: int
    attempt: int
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., topic: _Optional[str] = ..., partition: _Optional[int] = ..., attempt: _Optional[int] = ...) -> None: ...

class PollTxnChecksResponse(_message.Message):
    __slots__ = ("checks",)
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    checks: _containers.RepeatedCompositeFieldContainer[TxnCheck]
    def __init__(self, checks: _Optional[_Iterable[_Union[TxnCheck, _Mapping]]] = ...) -> None: ...

class ResolveTxnCheckRequest(_message.Message):
    __slots__ = ("producer_group", "transactional_id", "producer_id", "producer_epoch", "outcome")
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    transactional_id: str
    producer_id: int
    producer_epoch: int
    outcome: str
    def __init__(self, producer_group: _Optional[str] = ..., transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., outcome: _Optional[str] = ...) -> None: ...

class ResolveTxnCheckResponse(_message.Message):
    __slots__ = ("step",)
    STEP_FIELD_NUMBER: _ClassVar[int]
    step: str
    def __init__(self, step: _Optional[str] = ...) -> None: ...

class EndTxnRequest(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch", "commit", "keep_epoch")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    KEEP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    keep_epoch: bool
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., commit: _Optional[bool] = ..., keep_epoch: _Optional[bool] = ...) -> None: ...

class EndTxnResponse(_message.Message):
    __slots__ = ("producer_id", "producer_epoch")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    producer_epoch: int
    def __init__(self, producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ...) -> None: ...

class KafkaGroupProtocol(_message.Message):
    __slots__ = ("name", "metadata")
    NAME_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    metadata: bytes
    def __init__(self, name: _Optional[str] = ..., metadata: _Optional[bytes] = ...) -> None: ...

class KafkaGroupRequest(_message.Message):
    __slots__ = ("op", "group", "member_id", "generation", "client_id", "client_host", "protocol_type", "protocols", "session_timeout_ms", "rebalance_timeout_ms", "leaving", "again")
    OP_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_HOST_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOLS_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    LEAVING_FIELD_NUMBER: _ClassVar[int]
    AGAIN_FIELD_NUMBER: _ClassVar[int]
    op: str
    group: str
    member_id: str
    generation: int
    client_id: str
    client_host: str
    protocol_type: str
    protocols: _containers.RepeatedCompositeFieldContainer[KafkaGroupProtocol]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    leaving: _containers.RepeatedScalarFieldContainer[str]
    again: bool
    def __init__(self, op: _Optional[str] = ..., group: _Optional[str] = ..., member_id: _Optional[str] = ..., generation: _Optional[int] = ..., client_id: _Optional[str] = ..., client_host: _Optional[str] = ..., protocol_type: _Optional[str] = ..., protocols: _Optional[_Iterable[_Union[KafkaGroupProtocol, _Mapping]]] = ..., session_timeout_ms: _Optional[int] = ..., rebalance_timeout_ms: _Optional[int] = ..., leaving: _Optional[_Iterable[str]] = ..., again: _Optional[bool] = ...) -> None: ...

class KafkaGroupResponse(_message.Message):
    __slots__ = ("error_code", "pending", "member_id", "generation", "protocol", "leader", "members", "assignment", "fencing_generation", "message", "state", "protocol_type", "described", "groups", "group")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    FENCING_GENERATION_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    DESCRIBED_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    pending: bool
    member_id: str
    generation: int
    protocol: str
    leader: str
    members: _containers.RepeatedCompositeFieldContainer[KafkaGroupProtocol]
    assignment: bytes
    fencing_generation: int
    message: str
    state: str
    protocol_type: str
    described: _containers.RepeatedCompositeFieldContainer[KafkaGroupMember]
    groups: _containers.RepeatedCompositeFieldContainer[KafkaGroupResponse]
    group: str
    def __init__(self, error_code: _Optional[int] = ..., pending: _Optional[bool] = ..., member_id: _Optional[str] = ..., generation: _Optional[int] = ..., protocol: _Optional[str] = ..., leader: _Optional[str] = ..., members: _Optional[_Iterable[_Union[KafkaGroupProtocol, _Mapping]]] = ..., assignment: _Optional[bytes] = ..., fencing_generation: _Optional[int] = ..., message: _Optional[str] = ..., state: _Optional[str] = ..., protocol_type: _Optional[str] = ..., described: _Optional[_Iterable[_Union[KafkaGroupMember, _Mapping]]] = ..., groups: _Optional[_Iterable[_Union[KafkaGroupResponse, _Mapping]]] = ..., group: _Optional[str] = ...) -> None: ...

class KafkaGroupMember(_message.Message):
    __slots__ = ("member_id", "client_id", "client_host", "metadata", "assignment")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_HOST_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes
    def __init__(self, member_id: _Optional[str] = ..., client_id: _Optional[str] = ..., client_host: _Optional[str] = ..., metadata: _Optional[bytes] = ..., assignment: _Optional[bytes] = ...) -> None: ...
