"""Kafka's wire: size-prefixed frames, request headers, and the message classes by API key.

The request and response structures are kafka-python's protocol module (kafka-python >= 3),
generated from Kafka's own JSON message definitions, flexible versions and tagged fields
included: one maintained source for every API and version, where a hand-written codec here
would have to track Kafka's ~20 definitions the clients negotiate. It runs per request (a few
dozen fields), never per record: record batches are ``bytes`` to it and broker/kafka/batches.py
reads them.

Versions: :data:`SERVED` is what ``ApiVersions`` answers, per API the versions a handler in
broker/kafka/handlers.py implements. Topic-id versions (Produce and Fetch 13+) are not served:
tubeq's topic ids are 64-bit incarnations, not Kafka's UUIDs.
"""
from __future__ import annotations

import re
import struct
from types import SimpleNamespace
from typing import Any

from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeConfigsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
)
from kafka.protocol.api_header import ResponseClassRegistry
from kafka.protocol.consumer import (
    FetchRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListOffsetsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
)
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest
from kafka.protocol.schemas.fields.base import BaseField

# Kafka's error codes (org.apache.kafka.common.protocol.Errors) that tubeq answers with.
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
MESSAGE_TOO_LARGE = 10
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_TOPIC_EXCEPTION = 17
RECORD_LIST_TOO_LARGE = 18
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
INVALID_REQUIRED_ACKS = 21
ILLEGAL_GENERATION = 22
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
REBALANCE_IN_PROGRESS = 27
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REQUEST = 42
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
POLICY_VIOLATION = 44
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
KAFKA_STORAGE_ERROR = 56
SASL_AUTHENTICATION_FAILED = 58
UNKNOWN_PRODUCER_ID = 59
UNSUPPORTED_COMPRESSION_TYPE = 76
PRODUCER_FENCED = 90
INVALID_RECORD = 87
UNSTABLE_OFFSET_COMMIT = 88
THROTTLING_QUOTA_EXCEEDED = 89
UNKNOWN_SERVER_ERROR = -1

# api key -> (request class, lowest served version, highest served version)
REQUESTS: dict[int, Any] = {cls.API_KEY: cls for cls in (
    ProduceRequest, FetchRequest, ListOffsetsRequest, MetadataRequest, OffsetCommitRequest,
    OffsetFetchRequest, FindCoordinatorRequest, JoinGroupRequest, HeartbeatRequest,
    LeaveGroupRequest, SyncGroupRequest, SaslHandshakeRequest, ApiVersionsRequest,
    CreateTopicsRequest, DeleteTopicsRequest, InitProducerIdRequest, DescribeConfigsRequest,
    SaslAuthenticateRequest, CreatePartitionsRequest, AddPartitionsToTxnRequest,
    AddOffsetsToTxnRequest, EndTxnRequest, TxnOffsetCommitRequest, ListGroupsRequest,
    DescribeGroupsRequest)}
API_VERSIONS_KEY = ApiVersionsRequest.API_KEY


def response_class(api_key: int) -> Any:
    """kafka-python's response class of ``api_key`` (None: not a Kafka API): an API this
    port does not serve is answered with its own, empty (broker/kafka/gateway.py)."""
    versioned = ResponseClassRegistry.get_response_class(
        SimpleNamespace(request_api_key=api_key, request_api_version=0))
    return None if versioned is None else versioned[None]

# Served versions, filled in by the handlers that implement them (broker/kafka/handlers.py).
SERVED: dict[int, tuple[int, int]] = {}

HEADER = struct.Struct(">hhi")  # api key, api version, correlation id: every request's start
SIZE = struct.Struct(">i")


class Malformed(Exception):
    """A frame that is not a request this broker can read: the connection is closed (Kafka's
    own answer to bytes it cannot parse), after the reason is logged."""


def peek_header(payload: bytes) -> tuple[int, int, int]:
    """(api key, api version, correlation id) of a request, without decoding the rest."""
    if len(payload) < HEADER.size:
        raise Malformed(f"a request of {len(payload)} bytes is shorter than its header")
    return HEADER.unpack_from(payload)


def decode_request(payload: bytes, api_key: int, version: int) -> Any:
    """The request in ``payload`` (header included), at ``version``; Malformed when its bytes
    do not parse as that API and version."""
    cls = REQUESTS.get(api_key)
    if cls is None or not 0 <= version <= cls.max_version:
        raise Malformed(f"api key {api_key} version {version} is not a request tubeq knows")
    try:
        request = cls.decode(payload, version=version, header=True)
    except Exception as exc:  # noqa: BLE001 - any parse failure of untrusted bytes
        raise Malformed(f"{cls.name} v{version} does not parse: {exc!r}"[:300]) from None
    null = _null_field(request, cls.json["fields"], version)
    if null:
        raise Malformed(f"{cls.name} v{version}: {null} is null, which it may not be")
    return request


_MISSING = object()
_NULLABLE_TYPES = ("string", "bytes", "records")


def _null_field(obj: Any, fields: list[dict], version: int) -> str:
    """The first field (by Kafka's name) that came null where the API's definition says it
    may not, "" when none: the codec reads a -1 length as null whatever the definition says,
    and handlers iterate arrays and read strings as given."""
    for f in fields:
        low, high = BaseField.parse_versions(f["versions"]) or (0, -1)
        if not low <= version <= high:
            continue
        value = getattr(obj, _snake(f["name"]), _MISSING)
        if value is _MISSING:
            continue
        if value is None:
            nullable = BaseField.parse_versions(f.get("nullableVersions"))
            kind = f["type"]
            if (kind in _NULLABLE_TYPES or kind.startswith("[]")) and \
                    not (nullable and nullable[0] <= version <= nullable[1]):
                return f["name"]
            continue
        if "fields" in f:
            for item in value if f["type"].startswith("[]") else [value]:
                inner = _null_field(item, f["fields"], version)
                if inner:
                    return f"{f['name']}.{inner}"
    return ""


def _snake(name: str) -> str:
    """kafka-python's attribute name of a field: TopicData -> topic_data."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def encode_response(response: Any, correlation_id: int) -> bytes:
    """The size-prefixed frame of ``response`` (its version already set) for the request
    ``correlation_id``."""
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True, framed=True))


# tubeq's error codes (lib/errors.py) as Kafka's: clients retry exactly the retriable ones.
_KAFKA_CODES = {
    "OFFSET_OUT_OF_RANGE": OFFSET_OUT_OF_RANGE,
    "CORRUPT_RECORD": CORRUPT_MESSAGE,
    "UNKNOWN_TOPIC": UNKNOWN_TOPIC_OR_PARTITION,
    "UNKNOWN_PARTITION": UNKNOWN_TOPIC_OR_PARTITION,
    "INVALID_NAME": INVALID_TOPIC_EXCEPTION,
    "PARTITION_NOT_HOSTED": NOT_LEADER_OR_FOLLOWER,
    "NOT_LEADER": NOT_LEADER_OR_FOLLOWER,
    "STORE_CLOSED": NOT_LEADER_OR_FOLLOWER,
    "UNAVAILABLE": LEADER_NOT_AVAILABLE,
    "TIMED_OUT": REQUEST_TIMED_OUT,
    "RECORD_TOO_LARGE": MESSAGE_TOO_LARGE,
    "BATCH_TOO_LARGE": RECORD_LIST_TOO_LARGE,
    "INVALID_ARGUMENT": INVALID_RECORD,
    "NOT_ENOUGH_REPLICAS": NOT_ENOUGH_REPLICAS,
    "NOT_ENOUGH_REPLICAS_AFTER_APPEND": NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    "STORAGE_ERROR": KAFKA_STORAGE_ERROR,
    "DISK_FULL": KAFKA_STORAGE_ERROR,
    "OUT_OF_ORDER_SEQUENCE": OUT_OF_ORDER_SEQUENCE_NUMBER,
    "PRODUCER_FENCED": INVALID_PRODUCER_EPOCH,
    "INVALID_TXN_STATE": INVALID_TXN_STATE,
    "QUOTA_EXCEEDED": THROTTLING_QUOTA_EXCEEDED,
    "PERMISSION_DENIED": TOPIC_AUTHORIZATION_FAILED,
    "UNAUTHENTICATED": SASL_AUTHENTICATION_FAILED,
    "UNSUPPORTED_FORMAT": UNSUPPORTED_FOR_MESSAGE_FORMAT,
    "UNSUPPORTED_COMPRESSION": UNSUPPORTED_COMPRESSION_TYPE,
    "TOPIC_EXISTS": TOPIC_ALREADY_EXISTS,
    "FENCED": ILLEGAL_GENERATION,  # a commit of an older generation (broker/claims.py)
    "UNSTABLE_OFFSET_COMMIT": UNSTABLE_OFFSET_COMMIT,
}


def kafka_code(code: str) -> int:
    """Kafka's error code for tubeq's ``code`` (UNKNOWN_SERVER_ERROR when none fits)."""
    return _KAFKA_CODES.get(code, UNKNOWN_SERVER_ERROR)
