"""Answers that refuse a whole request with one Kafka error code: an unsupported version of a
served API, or a request before authentication. Kafka's clients read the code where the
API's answer carries it (per partition, per topic, or at the top) and act on it."""
from __future__ import annotations

from typing import Any

from kafka.protocol.admin import (
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
    DescribeConfigsResponse,
    DescribeGroupsResponse,
    ListGroupsResponse,
)
from kafka.protocol.consumer import (
    FetchResponse,
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    ListOffsetsResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorResponse, MetadataResponse
from kafka.protocol.producer import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    EndTxnResponse,
    InitProducerIdResponse,
    ProduceResponse,
    TxnOffsetCommitResponse,
)
from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse


def _produce(request: Any, code: int) -> Any:
    return ProduceResponse(throttle_time_ms=0, responses=[
        ProduceResponse.TopicProduceResponse(name=t.name, partition_responses=[
            ProduceResponse.TopicProduceResponse.PartitionProduceResponse(
                index=p.index, error_code=code, base_offset=-1, log_append_time_ms=-1,
                log_start_offset=-1, record_errors=[], error_message=None)
            for p in t.partition_data]) for t in request.topic_data])


def _fetch(request: Any, code: int) -> Any:
    return FetchResponse(throttle_time_ms=0, error_code=code, session_id=0, responses=[
        FetchResponse.FetchableTopicResponse(topic=t.topic, partitions=[
            FetchResponse.FetchableTopicResponse.PartitionData(
                partition_index=p.partition, error_code=code, high_watermark=-1,
                last_stable_offset=-1, log_start_offset=-1, aborted_transactions=None,
                preferred_read_replica=-1, records=None)
            for p in t.partitions]) for t in request.topics])


def _list_offsets(request: Any, code: int) -> Any:
    return ListOffsetsResponse(throttle_time_ms=0, topics=[
        ListOffsetsResponse.ListOffsetsTopicResponse(name=t.name, partitions=[
            ListOffsetsResponse.ListOffsetsTopicResponse.ListOffsetsPartitionResponse(
                partition_index=p.partition_index, error_code=code, old_style_offsets=[],
                timestamp=-1, offset=-1, leader_epoch=-1)
            for p in t.partitions]) for t in request.topics])


def _metadata(request: Any, code: int) -> Any:
    return MetadataResponse(throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=-1,
                            topics=[MetadataResponse.MetadataResponseTopic(
                                error_code=code, name=t.name, partitions=[])
                                for t in request.topics or ()])


def _init_producer_id(request: Any, code: int) -> Any:
    return InitProducerIdResponse(error_code=code, producer_id=-1, producer_epoch=-1,
                                  throttle_time_ms=0)


def _sasl_handshake(request: Any, code: int) -> Any:
    return SaslHandshakeResponse(error_code=code, mechanisms=[])


def _sasl_authenticate(request: Any, code: int) -> Any:
    return SaslAuthenticateResponse(error_code=code, error_message=None, auth_bytes=b"",
                                    session_lifetime_ms=0)


def _find_coordinator(request: Any, code: int) -> Any:
    if request.API_VERSION >= 4:
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=[
            FindCoordinatorResponse.Coordinator(key=k, node_id=-1, host="", port=-1,
                                                error_code=code, error_message=None)
            for k in request.coordinator_keys])
    return FindCoordinatorResponse(throttle_time_ms=0, error_code=code, error_message=None,
                                   node_id=-1, host="", port=-1)


def _join_group(request: Any, code: int) -> Any:
    return JoinGroupResponse(throttle_time_ms=0, error_code=code, generation_id=-1,
                             protocol_type=None, protocol_name=None, leader="",
                             skip_assignment=False, member_id="", members=[])


def _sync_group(request: Any, code: int) -> Any:
    return SyncGroupResponse(throttle_time_ms=0, error_code=code, protocol_type=None,
                             protocol_name=None, assignment=b"")


def _heartbeat(request: Any, code: int) -> Any:
    return HeartbeatResponse(throttle_time_ms=0, error_code=code)


def _leave_group(request: Any, code: int) -> Any:
    return LeaveGroupResponse(throttle_time_ms=0, error_code=code, members=[])


def _offset_commit(request: Any, code: int) -> Any:
    return OffsetCommitResponse(throttle_time_ms=0, topics=[
        OffsetCommitResponse.OffsetCommitResponseTopic(name=t.name, partitions=[
            OffsetCommitResponse.OffsetCommitResponseTopic.OffsetCommitResponsePartition(
                partition_index=p.partition_index, error_code=code) for p in t.partitions])
        for t in request.topics])


def _offset_fetch(request: Any, code: int) -> Any:
    return OffsetFetchResponse(throttle_time_ms=0, error_code=code, topics=[])


def _create_topics(request: Any, code: int) -> Any:
    return CreateTopicsResponse(throttle_time_ms=0, topics=[
        CreateTopicsResponse.CreatableTopicResult(
            name=t.name, error_code=code, error_message=None, num_partitions=-1,
            replication_factor=-1, configs=None) for t in request.topics])


def _delete_topics(request: Any, code: int) -> Any:
    return DeleteTopicsResponse(throttle_time_ms=0, responses=[
        DeleteTopicsResponse.DeletableTopicResult(name=n, error_code=code, error_message=None)
        for n in request.topic_names or ()])


def _create_partitions(request: Any, code: int) -> Any:
    return CreatePartitionsResponse(throttle_time_ms=0, results=[
        CreatePartitionsResponse.CreatePartitionsTopicResult(name=t.name, error_code=code,
                                                             error_message=None)
        for t in request.topics])


def _describe_configs(request: Any, code: int) -> Any:
    return DescribeConfigsResponse(throttle_time_ms=0, results=[
        DescribeConfigsResponse.DescribeConfigsResult(
            error_code=code, error_message=None, resource_type=r.resource_type,
            resource_name=r.resource_name, configs=[]) for r in request.resources])


def _add_partitions(request: Any, code: int) -> Any:
    Topic = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
    return AddPartitionsToTxnResponse(throttle_time_ms=0, results_by_topic_v3_and_below=[
        Topic(name=t.name, results_by_partition=[
            Topic.AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=code)
            for p in t.partitions]) for t in request.v3_and_below_topics or ()])


def _add_offsets(request: Any, code: int) -> Any:
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=code)


def _end_txn(request: Any, code: int) -> Any:
    return EndTxnResponse(throttle_time_ms=0, error_code=code)


def _txn_offset_commit(request: Any, code: int) -> Any:
    Topic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
    return TxnOffsetCommitResponse(throttle_time_ms=0, topics=[
        Topic(name=t.name, partitions=[
            Topic.TxnOffsetCommitResponsePartition(partition_index=p.partition_index,
                                                   error_code=code) for p in t.partitions])
        for t in request.topics])


def _list_groups(request: Any, code: int) -> Any:
    return ListGroupsResponse(throttle_time_ms=0, error_code=code, groups=[])


def _describe_groups(request: Any, code: int) -> Any:
    return DescribeGroupsResponse(throttle_time_ms=0, groups=[
        DescribeGroupsResponse.DescribedGroup(
            error_code=code, error_message=None, group_id=g, group_state="", protocol_type="",
            protocol_data="", members=[], authorized_operations=None)
        for g in request.groups])


_REFUSALS = {0: _produce, 1: _fetch, 2: _list_offsets, 3: _metadata, 22: _init_producer_id,
             17: _sasl_handshake, 36: _sasl_authenticate, 10: _find_coordinator,
             11: _join_group, 14: _sync_group, 12: _heartbeat, 13: _leave_group,
             8: _offset_commit, 9: _offset_fetch, 19: _create_topics, 20: _delete_topics,
             37: _create_partitions, 32: _describe_configs, 24: _add_partitions,
             25: _add_offsets, 26: _end_txn, 28: _txn_offset_commit, 16: _list_groups,
             15: _describe_groups}


def refuse(api_key: int, request: Any, code: int) -> Any:
    return _REFUSALS[api_key](request, code)
