"""Kafka's admin APIs on the Kafka port: CreateTopics, DeleteTopics, CreatePartitions and
DescribeConfigs, as calls of the active master's admin API made *as the client's principal*
(its token from SASL), so the master checks the ACLs (create, delete, alter, describe) and the
audit log names the user, exactly as for ``tubeq topic create``.

Topic configs map onto tubeq's settings: ``retention.ms``, ``retention.bytes``,
``max.message.bytes``, ``min.insync.replicas``, ``unclean.leader.election.enable``, and
tubeq's own ``tubeq.durability`` (async | sync) and ``tubeq.stores``; any other key is refused
with INVALID_CONFIG naming it (``cleanup.policy`` is accepted as ``delete``, the only policy).
Manual replica assignments are refused (placement is the master's).
"""
from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from kafka.protocol.admin import (
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
    DescribeConfigsResponse,
)

from broker.kafka import wire
from broker.kafka.session import Session
from lib.admin import settings_of
from lib.errors import InvalidArgument, TubeqError
from lib.proto import admin_pb2, admin_pb2_grpc

INVALID_CONFIG = 40
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
_INTS = {"retention.ms": "retention_ms", "retention.bytes": "retention_bytes",
         "max.message.bytes": "max_message_bytes",
         "min.insync.replicas": "min_insync_replicas", "tubeq.stores": "stores"}
_ADMIN_CODES = {"TOPIC_EXISTS": wire.TOPIC_ALREADY_EXISTS,
                "INVALID_PARTITIONS": wire.INVALID_PARTITIONS,
                "NOT_ENOUGH_BROKERS": wire.INVALID_REPLICATION_FACTOR,
                "INVALID_ARGUMENT": INVALID_CONFIG}


def _code(err: TubeqError) -> int:
    return _ADMIN_CODES.get(err.code) or wire.kafka_code(err.code)


def topic_settings(configs: dict[str, str | None], partitions: int = -1,
                   replication: int = -1) -> Any:
    """tubeq's TopicSettings of a Kafka topic's configs; InvalidArgument naming a bad key."""
    values: dict[str, Any] = {}
    for key, value in configs.items():
        if value is None:
            continue
        if key in _INTS:
            try:
                values[_INTS[key]] = int(value)
            except ValueError:
                raise InvalidArgument(f"config {key}={value!r} is not an integer") from None
        elif key == "unclean.leader.election.enable":
            values["unclean_leader_election"] = value.lower() == "true"
        elif key == "tubeq.durability":
            values["durability"] = value
        elif key == "cleanup.policy" and value == "delete":
            continue
        else:
            raise InvalidArgument(f"config {key!r} is not one tubeq maps (docs/kafka.md)")
    return settings_of(partitions=partitions if partitions > 0 else None,
                       replication_factor=replication if replication > 0 else None, **values)


async def _admin(gw: Any, session: Session, method: str, request: Any) -> Any:
    return await gw.run(gw.master, admin_pb2_grpc.AdminStub, method, request, session.token)


async def _outcome(work: Awaitable[Any]) -> tuple[int, str | None]:
    """(error code, message) of one topic's admin call: NONE, or its refusal."""
    try:
        await work
    except TubeqError as err:
        return _code(err), err.message[:500]
    return wire.NONE, None


async def create_topics(gw: Any, session: Session, request: Any) -> Any:
    async def create(t: Any) -> None:
        if t.assignments:
            raise InvalidArgument("manual replica assignments: placement is tubeq's")
        settings = topic_settings({c.name: c.value for c in t.configs}, t.num_partitions,
                                  t.replication_factor)
        if not getattr(request, "validate_only", False):
            await _admin(gw, session, "CreateTopic", admin_pb2.CreateTopicRequest(
                topic=t.name, settings=settings))

    results = []
    for t in request.topics:
        code, message = await _outcome(create(t))
        results.append(CreateTopicsResponse.CreatableTopicResult(
            name=t.name, error_code=code, error_message=message, num_partitions=-1,
            replication_factor=-1, configs=None))
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)


async def delete_topics(gw: Any, session: Session, request: Any) -> Any:
    results = []
    for name in request.topic_names:
        code, message = await _outcome(_admin(gw, session, "DeleteTopic",
                                              admin_pb2.DeleteTopicRequest(topic=name)))
        results.append(DeleteTopicsResponse.DeletableTopicResult(name=name, error_code=code,
                                                                 error_message=message))
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)


async def create_partitions(gw: Any, session: Session, request: Any) -> Any:
    async def grow(t: Any) -> None:
        if t.assignments:
            raise InvalidArgument("manual replica assignments: placement is tubeq's")
        now = await _admin(gw, session, "DescribeTopic",
                           admin_pb2.DescribeTopicRequest(topic=t.name))
        if t.count <= now.settings.partitions:
            raise _TooFew(f"topic {t.name} has {now.settings.partitions} partitions: ask "
                          "for more")
        if not request.validate_only:
            await _admin(gw, session, "AlterTopic", admin_pb2.AlterTopicRequest(
                topic=t.name, settings=settings_of(partitions=t.count)))

    results = []
    for t in request.topics:
        code, message = await _outcome(grow(t))
        results.append(CreatePartitionsResponse.CreatePartitionsTopicResult(
            name=t.name, error_code=code, error_message=message))
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)


class _TooFew(TubeqError):
    code = "INVALID_PARTITIONS"


async def describe_configs(gw: Any, session: Session, request: Any) -> Any:
    results = []
    for r in request.resources:
        code, message, configs = wire.NONE, None, []
        try:
            if r.resource_type == TOPIC_RESOURCE:
                topic = await _admin(gw, session, "DescribeTopic",
                                     admin_pb2.DescribeTopicRequest(topic=r.resource_name))
                configs = _configs(topic.settings, r.configuration_keys)
            elif r.resource_type != BROKER_RESOURCE:
                code, message = wire.INVALID_REQUEST, f"resource type {r.resource_type}"
        except TubeqError as err:
            code, message = _code(err), err.message[:500]
        results.append(DescribeConfigsResponse.DescribeConfigsResult(
            error_code=code, error_message=message, resource_type=r.resource_type,
            resource_name=r.resource_name, configs=configs))
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)


def _configs(settings: Any, keys: list[str] | None) -> list[Any]:
    values = {"retention.ms": settings.retention_ms, "retention.bytes": settings.retention_bytes,
              "max.message.bytes": settings.max_message_bytes,
              "min.insync.replicas": settings.min_insync_replicas,
              "unclean.leader.election.enable": str(settings.unclean_leader_election).lower(),
              "tubeq.durability": settings.durability, "tubeq.stores": settings.stores,
              "cleanup.policy": "delete"}
    Result = DescribeConfigsResponse.DescribeConfigsResult.DescribeConfigsResourceResult
    return [Result(name=k, value=str(v), read_only=k == "cleanup.policy", config_source=1,
                   is_default=False, is_sensitive=False, synonyms=[], config_type=0,
                   documentation=None)
            for k, v in values.items() if keys is None or k in keys]
