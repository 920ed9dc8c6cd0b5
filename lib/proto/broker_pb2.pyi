from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SyncTxnPartition(_message.Message):
    __slots__ = ("partition", "records")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    partition: int
    records: int
    def __init__(self, partition: _Optional[int] = ..., records: _Optional[int] = ...) -> None: ...

class SyncTxnRequest(_message.Message):
    __slots__ = ("topic", "producer_id", "producer_epoch", "partitions")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    producer_id: int
    producer_epoch: int
    partitions: _containers.RepeatedCompositeFieldContainer[SyncTxnPartition]
    def __init__(self, topic: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[SyncTxnPartition, _Mapping]]] = ...) -> None: ...

class SyncTxnResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[TxnMarkerResult]
    def __init__(self, results: _Optional[_Iterable[_Union[TxnMarkerResult, _Mapping]]] = ...) -> None: ...

class ProduceRequest(_message.Message):
    __slots__ = ("topic", "partition", "batch", "acks_all", "topic_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    ACKS_ALL_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    batch: bytes
    acks_all: bool
    topic_id: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., batch: _Optional[bytes] = ..., acks_all: _Optional[bool] = ..., topic_id: _Optional[int] = ...) -> None: ...

class ProduceResponse(_message.Message):
    __slots__ = ("base_offset", "last_offset", "throttle_ms", "stream_port")
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_MS_FIELD_NUMBER: _ClassVar[int]
    STREAM_PORT_FIELD_NUMBER: _ClassVar[int]
    base_offset: int
    last_offset: int
    throttle_ms: int
    stream_port: int
    def __init__(self, base_offset: _Optional[int] = ..., last_offset: _Optional[int] = ..., throttle_ms: _Optional[int] = ..., stream_port: _Optional[int] = ...) -> None: ...

class ProduceManyRequest(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[ProduceRequest]
    def __init__(self, entries: _Optional[_Iterable[_Union[ProduceRequest, _Mapping]]] = ...) -> None: ...

class ProduceEntryResult(_message.Message):
    __slots__ = ("base_offset", "last_offset", "error_code", "error_message", "error_details")
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ERROR_DETAILS_FIELD_NUMBER: _ClassVar[int]
    base_offset: int
    last_offset: int
    error_code: str
    error_message: str
    error_details: str
    def __init__(self, base_offset: _Optional[int] = ..., last_offset: _Optional[int] = ..., error_code: _Optional[str] = ..., error_message: _Optional[str] = ..., error_details: _Optional[str] = ...) -> None: ...

class ProduceManyResponse(_message.Message):
    __slots__ = ("results", "throttle_ms", "stream_port")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_MS_FIELD_NUMBER: _ClassVar[int]
    STREAM_PORT_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ProduceEntryResult]
    throttle_ms: int
    stream_port: int
    def __init__(self, results: _Optional[_Iterable[_Union[ProduceEntryResult, _Mapping]]] = ..., throttle_ms: _Optional[int] = ..., stream_port: _Optional[int] = ...) -> None: ...

class PartitionFetch(_message.Message):
    __slots__ = ("partition", "offset", "max_bytes")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    partition: int
    offset: int
    max_bytes: int
    def __init__(self, partition: _Optional[int] = ..., offset: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class FetchRequest(_message.Message):
    __slots__ = ("topic", "partitions", "max_wait_ms", "tags", "max_total_bytes", "group", "read_committed", "topic_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    READ_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionFetch]
    max_wait_ms: int
    tags: _containers.RepeatedScalarFieldContainer[str]
    max_total_bytes: int
    group: str
    read_committed: bool
    topic_id: int
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[PartitionFetch, _Mapping]]] = ..., max_wait_ms: _Optional[int] = ..., tags: _Optional[_Iterable[str]] = ..., max_total_bytes: _Optional[int] = ..., group: _Optional[str] = ..., read_committed: _Optional[bool] = ..., topic_id: _Optional[int] = ...) -> None: ...

class PartitionData(_message.Message):
    __slots__ = ("partition", "frames", "offsets", "next_offset", "earliest", "latest", "error_code", "error_message", "sizes", "aborted", "last_stable", "transactional")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EARLIEST_FIELD_NUMBER: _ClassVar[int]
    LATEST_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SIZES_FIELD_NUMBER: _ClassVar[int]
    ABORTED_FIELD_NUMBER: _ClassVar[int]
    LAST_STABLE_FIELD_NUMBER: _ClassVar[int]
    TRANSACTIONAL_FIELD_NUMBER: _ClassVar[int]
    partition: int
    frames: bytes
    offsets: bytes
    next_offset: int
    earliest: int
    latest: int
    error_code: str
    error_message: str
    sizes: bytes
    aborted: bytes
    last_stable: int
    transactional: bool
    def __init__(self, partition: _Optional[int] = ..., frames: _Optional[bytes] = ..., offsets: _Optional[bytes] = ..., next_offset: _Optional[int] = ..., earliest: _Optional[int] = ..., latest: _Optional[int] = ..., error_code: _Optional[str] = ..., error_message: _Optional[str] = ..., sizes: _Optional[bytes] = ..., aborted: _Optional[bytes] = ..., last_stable: _Optional[int] = ..., transactional: _Optional[bool] = ...) -> None: ...

class FetchResponse(_message.Message):
    __slots__ = ("partitions", "throttle_ms", "stream_port")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_MS_FIELD_NUMBER: _ClassVar[int]
    STREAM_PORT_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionData]
    throttle_ms: int
    stream_port: int
    def __init__(self, partitions: _Optional[_Iterable[_Union[PartitionData, _Mapping]]] = ..., throttle_ms: _Optional[int] = ..., stream_port: _Optional[int] = ...) -> None: ...

class SubscribeStart(_message.Message):
    __slots__ = ("topic", "partitions", "tags", "group", "read_committed", "topic_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    READ_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionFetch]
    tags: _containers.RepeatedScalarFieldContainer[str]
    group: str
    read_committed: bool
    topic_id: int
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[PartitionFetch, _Mapping]]] = ..., tags: _Optional[_Iterable[str]] = ..., group: _Optional[str] = ..., read_committed: _Optional[bool] = ..., topic_id: _Optional[int] = ...) -> None: ...

class Credit(_message.Message):
    __slots__ = ("messages", "bytes")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    messages: int
    bytes: int
    def __init__(self, messages: _Optional[int] = ..., bytes: _Optional[int] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("start", "credit")
    START_FIELD_NUMBER: _ClassVar[int]
    CREDIT_FIELD_NUMBER: _ClassVar[int]
    start: SubscribeStart
    credit: Credit
    def __init__(self, start: _Optional[_Union[SubscribeStart, _Mapping]] = ..., credit: _Optional[_Union[Credit, _Mapping]] = ...) -> None: ...

class SubscribeResponse(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: PartitionData
    def __init__(self, data: _Optional[_Union[PartitionData, _Mapping]] = ...) -> None: ...

class OffsetCommit(_message.Message):
    __slots__ = ("partition", "offset", "metadata")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    partition: int
    offset: int
    metadata: bytes
    def __init__(self, partition: _Optional[int] = ..., offset: _Optional[int] = ..., metadata: _Optional[bytes] = ...) -> None: ...

class CommitOffsetsRequest(_message.Message):
    __slots__ = ("group", "topic", "member_id", "generation", "offsets", "producer_id", "producer_epoch", "instance_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    member_id: str
    generation: int
    offsets: _containers.RepeatedCompositeFieldContainer[OffsetCommit]
    producer_id: int
    producer_epoch: int
    instance_id: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., member_id: _Optional[str] = ..., generation: _Optional[int] = ..., offsets: _Optional[_Iterable[_Union[OffsetCommit, _Mapping]]] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., instance_id: _Optional[str] = ...) -> None: ...

class CommitOffsetsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class FetchOffsetsRequest(_message.Message):
    __slots__ = ("group", "topic", "partitions", "member_id", "generation", "instance_id", "all_instances")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    ALL_INSTANCES_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    member_id: str
    generation: int
    instance_id: str
    all_instances: bool
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ..., member_id: _Optional[str] = ..., generation: _Optional[int] = ..., instance_id: _Optional[str] = ..., all_instances: _Optional[bool] = ...) -> None: ...

class CommittedOffset(_message.Message):
    __slots__ = ("partition", "offset", "metadata", "commit_time_ms", "instance_id")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    partition: int
    offset: int
    metadata: bytes
    commit_time_ms: int
    instance_id: str
    def __init__(self, partition: _Optional[int] = ..., offset: _Optional[int] = ..., metadata: _Optional[bytes] = ..., commit_time_ms: _Optional[int] = ..., instance_id: _Optional[str] = ...) -> None: ...

class FetchOffsetsResponse(_message.Message):
    __slots__ = ("offsets",)
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedCompositeFieldContainer[CommittedOffset]
    def __init__(self, offsets: _Optional[_Iterable[_Union[CommittedOffset, _Mapping]]] = ...) -> None: ...

class ListOffsetsRequest(_message.Message):
    __slots__ = ("topic", "partitions", "timestamp_ms", "topic_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    timestamp_ms: int
    topic_id: int
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ..., timestamp_ms: _Optional[int] = ..., topic_id: _Optional[int] = ...) -> None: ...

class PartitionOffsets(_message.Message):
    __slots__ = ("partition", "earliest", "latest", "for_time", "last_stable")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    EARLIEST_FIELD_NUMBER: _ClassVar[int]
    LATEST_FIELD_NUMBER: _ClassVar[int]
    FOR_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_STABLE_FIELD_NUMBER: _ClassVar[int]
    partition: int
    earliest: int
    latest: int
    for_time: int
    last_stable: int
    def __init__(self, partition: _Optional[int] = ..., earliest: _Optional[int] = ..., latest: _Optional[int] = ..., for_time: _Optional[int] = ..., last_stable: _Optional[int] = ...) -> None: ...

class ListOffsetsResponse(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionOffsets]
    def __init__(self, partitions: _Optional[_Iterable[_Union[PartitionOffsets, _Mapping]]] = ...) -> None: ...

class QueryMessagesRequest(_message.Message):
    __slots__ = ("topic", "partition", "start_offset", "end_offset", "max_bytes")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    start_offset: int
    end_offset: int
    max_bytes: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., start_offset: _Optional[int] = ..., end_offset: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class FindByKeyRequest(_message.Message):
    __slots__ = ("topic", "partition", "key", "since_ms", "until_ms", "limit", "from_offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    FROM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    key: bytes
    since_ms: int
    until_ms: int
    limit: int
    from_offset: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., key: _Optional[bytes] = ..., since_ms: _Optional[int] = ..., until_ms: _Optional[int] = ..., limit: _Optional[int] = ..., from_offset: _Optional[int] = ...) -> None: ...

class ResetOffsetsRequest(_message.Message):
    __slots__ = ("group", "topic", "offsets", "term", "instance_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    offsets: _containers.RepeatedCompositeFieldContainer[OffsetCommit]
    term: int
    instance_id: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., offsets: _Optional[_Iterable[_Union[OffsetCommit, _Mapping]]] = ..., term: _Optional[int] = ..., instance_id: _Optional[str] = ...) -> None: ...

class ResetOffsetsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SinkStageRequest(_message.Message):
    __slots__ = ("sink", "batch_id", "task", "piece", "topic", "partition", "batch", "copy")
    SINK_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    PIECE_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    COPY_FIELD_NUMBER: _ClassVar[int]
    sink: str
    batch_id: int
    task: str
    piece: int
    topic: str
    partition: int
    batch: bytes
    copy: bool
    def __init__(self, sink: _Optional[str] = ..., batch_id: _Optional[int] = ..., task: _Optional[str] = ..., piece: _Optional[int] = ..., topic: _Optional[str] = ..., partition: _Optional[int] = ..., batch: _Optional[bytes] = ..., copy: _Optional[bool] = ...) -> None: ...

class SinkStageResponse(_message.Message):
    __slots__ = ("committed",)
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    committed: bool
    def __init__(self, committed: _Optional[bool] = ...) -> None: ...

class SinkTask(_message.Message):
    __slots__ = ("task", "pieces")
    TASK_FIELD_NUMBER: _ClassVar[int]
    PIECES_FIELD_NUMBER: _ClassVar[int]
    task: str
    pieces: int
    def __init__(self, task: _Optional[str] = ..., pieces: _Optional[int] = ...) -> None: ...

class SinkCommitRequest(_message.Message):
    __slots__ = ("sink", "batch_id", "tasks", "partitions")
    SINK_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    sink: str
    batch_id: int
    tasks: _containers.RepeatedCompositeFieldContainer[SinkTask]
    partitions: _containers.RepeatedCompositeFieldContainer[SinkPartition]
    def __init__(self, sink: _Optional[str] = ..., batch_id: _Optional[int] = ..., tasks: _Optional[_Iterable[_Union[SinkTask, _Mapping]]] = ..., partitions: _Optional[_Iterable[_Union[SinkPartition, _Mapping]]] = ...) -> None: ...

class SinkPartition(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class SinkCommitResponse(_message.Message):
    __slots__ = ("already", "records", "last_committed")
    ALREADY_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    LAST_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    already: bool
    records: int
    last_committed: int
    def __init__(self, already: _Optional[bool] = ..., records: _Optional[int] = ..., last_committed: _Optional[int] = ...) -> None: ...

class SinkAbortRequest(_message.Message):
    __slots__ = ("sink", "batch_id")
    SINK_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    sink: str
    batch_id: int
    def __init__(self, sink: _Optional[str] = ..., batch_id: _Optional[int] = ...) -> None: ...

class SinkAbortResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReplicaFetchPartition(_message.Message):
    __slots__ = ("topic", "partition", "topic_id", "fetch_offset", "leader_epoch", "last_fetched_epoch", "producer_state", "offsets_incarnation", "offsets_version")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    FETCH_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LAST_FETCHED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_STATE_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_INCARNATION_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_VERSION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    topic_id: int
    fetch_offset: int
    leader_epoch: int
    last_fetched_epoch: int
    producer_state: bool
    offsets_incarnation: int
    offsets_version: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., topic_id: _Optional[int] = ..., fetch_offset: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., last_fetched_epoch: _Optional[int] = ..., producer_state: _Optional[bool] = ..., offsets_incarnation: _Optional[int] = ..., offsets_version: _Optional[int] = ...) -> None: ...

class ReplicaFetchRequest(_message.Message):
    __slots__ = ("replica_id", "partitions", "max_wait_ms", "max_bytes")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    replica_id: int
    partitions: _containers.RepeatedCompositeFieldContainer[ReplicaFetchPartition]
    max_wait_ms: int
    max_bytes: int
    def __init__(self, replica_id: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[ReplicaFetchPartition, _Mapping]]] = ..., max_wait_ms: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class EpochStart(_message.Message):
    __slots__ = ("epoch", "start_offset")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    start_offset: int
    def __init__(self, epoch: _Optional[int] = ..., start_offset: _Optional[int] = ...) -> None: ...

class ReplicaFetchData(_message.Message):
    __slots__ = ("topic", "partition", "error_code", "error_message", "high_watermark", "log_start", "log_end", "base_offset", "frames", "sizes", "epochs", "diverging_end_offset", "producer_batches", "group_offsets", "offsets_incarnation", "offsets_version", "sink_marks", "has_sink_marks", "sink_intents", "frames_crc")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LOG_START_FIELD_NUMBER: _ClassVar[int]
    LOG_END_FIELD_NUMBER: _ClassVar[int]
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    SIZES_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    DIVERGING_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_BATCHES_FIELD_NUMBER: _ClassVar[int]
    GROUP_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_INCARNATION_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_VERSION_FIELD_NUMBER: _ClassVar[int]
    SINK_MARKS_FIELD_NUMBER: _ClassVar[int]
    HAS_SINK_MARKS_FIELD_NUMBER: _ClassVar[int]
    SINK_INTENTS_FIELD_NUMBER: _ClassVar[int]
    FRAMES_CRC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    error_code: str
    error_message: str
    high_watermark: int
    log_start: int
    log_end: int
    base_offset: int
    frames: bytes
    sizes: bytes
    epochs: _containers.RepeatedCompositeFieldContainer[EpochStart]
    diverging_end_offset: int
    producer_batches: _containers.RepeatedCompositeFieldContainer[ProducerBatch]
    group_offsets: _containers.RepeatedCompositeFieldContainer[GroupOffset]
    offsets_incarnation: int
    offsets_version: int
    sink_marks: _containers.RepeatedCompositeFieldContainer[SinkMark]
    has_sink_marks: bool
    sink_intents: _containers.RepeatedCompositeFieldContainer[SinkIntent]
    frames_crc: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., error_code: _Optional[str] = ..., error_message: _Optional[str] = ..., high_watermark: _Optional[int] = ..., log_start: _Optional[int] = ..., log_end: _Optional[int] = ..., base_offset: _Optional[int] = ..., frames: _Optional[bytes] = ..., sizes: _Optional[bytes] = ..., epochs: _Optional[_Iterable[_Union[EpochStart, _Mapping]]] = ..., diverging_end_offset: _Optional[int] = ..., producer_batches: _Optional[_Iterable[_Union[ProducerBatch, _Mapping]]] = ..., group_offsets: _Optional[_Iterable[_Union[GroupOffset, _Mapping]]] = ..., offsets_incarnation: _Optional[int] = ..., offsets_version: _Optional[int] = ..., sink_marks: _Optional[_Iterable[_Union[SinkMark, _Mapping]]] = ..., has_sink_marks: _Optional[bool] = ..., sink_intents: _Optional[_Iterable[_Union[SinkIntent, _Mapping]]] = ..., frames_crc: _Optional[int] = ...) -> None: ...

class SinkIntent(_message.Message):
    __slots__ = ("sink", "intent")
    SINK_FIELD_NUMBER: _ClassVar[int]
    INTENT_FIELD_NUMBER: _ClassVar[int]
    sink: str
    intent: str
    def __init__(self, sink: _Optional[str] = ..., intent: _Optional[str] = ...) -> None: ...

class SinkMark(_message.Message):
    __slots__ = ("sink", "batch_id", "end_offset", "leader_epoch")
    SINK_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    sink: str
    batch_id: int
    end_offset: int
    leader_epoch: int
    def __init__(self, sink: _Optional[str] = ..., batch_id: _Optional[int] = ..., end_offset: _Optional[int] = ..., leader_epoch: _Optional[int] = ...) -> None: ...

class GroupOffset(_message.Message):
    __slots__ = ("group", "offset", "metadata", "commit_time_ms")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    group: str
    offset: int
    metadata: bytes
    commit_time_ms: int
    def __init__(self, group: _Optional[str] = ..., offset: _Optional[int] = ..., metadata: _Optional[bytes] = ..., commit_time_ms: _Optional[int] = ...) -> None: ...

class ProducerBatch(_message.Message):
    __slots__ = ("producer_id", "producer_epoch", "base_sequence", "count", "base_offset", "attrs")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    BASE_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ATTRS_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    producer_epoch: int
    base_sequence: int
    count: int
    base_offset: int
    attrs: int
    def __init__(self, producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., base_sequence: _Optional[int] = ..., count: _Optional[int] = ..., base_offset: _Optional[int] = ..., attrs: _Optional[int] = ...) -> None: ...

class ReplicaFetchResponse(_message.Message):
    __slots__ = ("partitions", "stream_port")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    STREAM_PORT_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[ReplicaFetchData]
    stream_port: int
    def __init__(self, partitions: _Optional[_Iterable[_Union[ReplicaFetchData, _Mapping]]] = ..., stream_port: _Optional[int] = ...) -> None: ...

class TxnMarkerPartition(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class WriteTxnMarkersRequest(_message.Message):
    __slots__ = ("producer_id", "producer_epoch", "commit", "partitions", "offsets")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: _containers.RepeatedCompositeFieldContainer[TxnMarkerPartition]
    offsets: _containers.RepeatedCompositeFieldContainer[TxnMarkerOffset]
    def __init__(self, producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., commit: _Optional[bool] = ..., partitions: _Optional[_Iterable[_Union[TxnMarkerPartition, _Mapping]]] = ..., offsets: _Optional[_Iterable[_Union[TxnMarkerOffset, _Mapping]]] = ...) -> None: ...

class TxnMarkerOffset(_message.Message):
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

class TxnMarkerResult(_message.Message):
    __slots__ = ("topic", "partition", "offset", "error_code", "error_message", "group")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    error_code: str
    error_message: str
    group: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., error_code: _Optional[str] = ..., error_message: _Optional[str] = ..., group: _Optional[str] = ...) -> None: ...

class WriteTxnMarkersResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[TxnMarkerResult]
    def __init__(self, results: _Optional[_Iterable[_Union[TxnMarkerResult, _Mapping]]] = ...) -> None: ...
