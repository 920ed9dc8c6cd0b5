"""Which ACL every gRPC method needs: the one table masters and brokers enforce.

Each method of every service has a rule here, and a unit test walks the service descriptors
to keep it so; a method without a rule is refused (fail closed), so a method added later is
never open by mistake. A rule is one of:

- public: no credentials (a login, health checks, master status);
- cluster: brokers and masters only (the cluster credential), never a client;
- needs: the operations on the resources the request names, checked by the server's
  interceptor on the decoded request before the handler runs;
- handler: any identified caller; the handler checks per item (streams, whose first message
  names the topic; listings, which show only what the caller may describe; sink commits,
  which need produce on the topics staged).

A "needs" rule's handler may check more than the rule says, where the names are not plain
string fields: a producer id needs produce on at least one topic, and AddPartitionsToTxn
produce on the topic of every partition it adds.

Resource names come from the request fields named in the rule, so the check and the handler
read the same names.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from lib.auth.acl import CLUSTER_NAME
from lib.delay import DELAY_TOPIC


@dataclass(frozen=True)
class Need:
    """``operation`` on every ``resource`` whose name ``names(request)`` gives."""

    operation: str
    resource: str
    names: Callable[[Any], Iterable[str]]


@dataclass(frozen=True)
class Rule:
    kind: str  # public, cluster, needs, handler
    needs: tuple[Need, ...] = ()
    own: Callable[[Any], str] | None = None  # passes too when it names the caller (own password)


PUBLIC = Rule("public")
CLUSTER_ONLY = Rule("cluster")
IN_HANDLER = Rule("handler")


def _field(name: str) -> Callable[[Any], Iterable[str]]:
    """The names in request field ``name``: one string, or a repeated one. ``group?``: the
    field ``group`` may be empty (then nothing is checked); any other empty name is checked
    as it is, and refused."""
    optional = name.endswith("?")
    name = name.removesuffix("?")

    def names(request: Any) -> Iterable[str]:
        value = getattr(request, name)
        if isinstance(value, str):
            return () if optional and not value else (value,)
        return value
    return names


def _not_delay(names: Callable[[Any], Iterable[str]]) -> Callable[[Any], Iterable[str]]:
    """``names`` without the delay topic: a producer's delayed records go there, and the
    broker checks produce on each record's target topic instead (broker/delayed_produce.py);
    its routes say no more than where its partitions are."""
    def names_but_delay(request: Any) -> Iterable[str]:
        return [n for n in names(request) if n != DELAY_TOPIC]
    return names_but_delay


def _cluster(_request: Any) -> Iterable[str]:
    return (CLUSTER_NAME,)


def needs(*pairs: tuple[str, str, str]) -> Rule:
    """A rule from (operation, resource, request field) triples; the field of a cluster need
    is ignored."""
    return Rule("needs", tuple(Need(op, resource, _cluster if resource == "cluster"
                                    else _field(field)) for op, resource, field in pairs))


ADMIN_CLUSTER = needs(("admin", "cluster", ""))
_PRODUCE_BUT_DELAY = Rule("needs", (Need("produce", "topic", _not_delay(_field("topic"))),))
_M, _A, _S, _B = "/tubeq.master.Master/", "/tubeq.admin.Admin/", "/tubeq.security.Security/", \
    "/tubeq.broker.Broker/"

RULES: dict[str, Rule] = {
    "/grpc.health.v1.Health/Check": PUBLIC,
    "/grpc.health.v1.Health/Watch": PUBLIC,
    "/grpc.health.v1.Health/List": PUBLIC,
    # masters: brokers, routes, groups
    _M + "RegisterBroker": CLUSTER_ONLY,
    _M + "BrokerHeartbeat": CLUSTER_ONLY,
    _M + "AlterIsr": CLUSTER_ONLY,
    _M + "KafkaGroup": CLUSTER_ONLY,  # a broker's Kafka port, having checked its client
    _M + "BrokerShutdown": CLUSTER_ONLY,
    _M + "GetRoutes": Rule("needs", (Need("describe", "topic", _not_delay(_field("topics"))),)),
    _M + "JoinGroup": needs(("consume", "group", "group"), ("consume", "topic", "topics")),
    _M + "GroupHeartbeat": needs(("consume", "group", "group")),
    _M + "LeaveGroup": needs(("consume", "group", "group")),
    # produce on at least one topic (Kafka's KIP-679), checked by the handler; write on the
    # transactional_id when one is given
    _M + "InitProducerId": needs(("write", "transactional_id", "transactional_id?")),
    # the handler checks produce on every topic of the request's partitions too
    _M + "AddPartitionsToTxn": needs(("write", "transactional_id", "transactional_id")),
    _M + "EndTxn": needs(("write", "transactional_id", "transactional_id")),
    _M + "EnsureGroupTopics": needs(("consume", "group", "group")),
    _M + "AddOffsetsToTxn": needs(("write", "transactional_id", "transactional_id"),
                                  ("consume", "group", "group")),
    _M + "CheckOpenTxns": CLUSTER_ONLY,  # brokers ask about transactions open too long
    # RocketMQ's half messages: the producer group names the transactional_id resource
    _M + "BeginHalfMessage": needs(("write", "transactional_id", "producer_group"),
                                   ("produce", "topic", "topic")),
    _M + "EndHalfMessage": needs(("write", "transactional_id", "producer_group")),
    _M + "PollTxnChecks": needs(("write", "transactional_id", "producer_group")),
    _M + "ResolveTxnCheck": needs(("write", "transactional_id", "producer_group")),
    # masters: administration
    _A + "MasterStatus": PUBLIC,
    _A + "CreateTopic": needs(("create", "topic", "topic")),
    _A + "AlterTopic": needs(("alter", "topic", "topic")),
    _A + "DeleteTopic": needs(("delete", "topic", "topic")),
    _A + "DescribeTopic": needs(("describe", "topic", "topic")),
    _A + "ListTopics": IN_HANDLER,
    _A + "ListBrokers": needs(("describe", "cluster", "")),
    _A + "SetBrokerDraining": ADMIN_CLUSTER,
    _A + "ReassignPartitions": ADMIN_CLUSTER,
    _A + "ListGroups": IN_HANDLER,
    _A + "DescribeGroup": needs(("describe", "group", "group")),
    _A + "ResetGroupOffsets": needs(("alter", "group", "group"), ("describe", "topic", "topic")),
    _A + "AuditLog": ADMIN_CLUSTER,
    _A + "AuditDeadLetters": needs(("consume", "group", "group")),
    _A + "ListTransactions": IN_HANDLER,  # lists the transactional ids the caller may describe
    _A + "AbortTransaction": ADMIN_CLUSTER,
    # masters: security
    _S + "Login": PUBLIC,
    _S + "ScramStep": CLUSTER_ONLY,  # a broker's Kafka port, for its client
    _S + "AddUser": ADMIN_CLUSTER,
    _S + "ListUsers": ADMIN_CLUSTER,
    _S + "SetPassword": Rule("needs", ADMIN_CLUSTER.needs, own=lambda request: request.name),
    _S + "SetRoles": ADMIN_CLUSTER,
    _S + "DeleteUser": ADMIN_CLUSTER,
    _S + "CreateApiKey": ADMIN_CLUSTER,
    _S + "ListApiKeys": ADMIN_CLUSTER,
    _S + "RevokeApiKey": ADMIN_CLUSTER,
    _S + "RotateSigningKey": ADMIN_CLUSTER,
    _S + "AddAcl": ADMIN_CLUSTER,
    _S + "RemoveAcl": ADMIN_CLUSTER,
    _S + "ListAcls": ADMIN_CLUSTER,
    _S + "SetQuota": ADMIN_CLUSTER,
    _S + "RemoveQuota": ADMIN_CLUSTER,
    _S + "ListQuotas": ADMIN_CLUSTER,
    _S + "AddIpRule": ADMIN_CLUSTER,
    _S + "RemoveIpRule": ADMIN_CLUSTER,
    _S + "ListIpRules": ADMIN_CLUSTER,
    # brokers
    _B + "Produce": _PRODUCE_BUT_DELAY,
    _B + "ProduceMany": IN_HANDLER,  # produce on each entry's topic, entry by entry
    _B + "SyncTxn": _PRODUCE_BUT_DELAY,  # a transactional producer's
    _B + "Fetch": needs(("consume", "topic", "topic"), ("consume", "group", "group?")),
    _B + "Subscribe": IN_HANDLER,  # the stream's first message names the topic
    _B + "CommitOffsets": needs(("consume", "group", "group"), ("consume", "topic", "topic")),
    _B + "FetchOffsets": needs(("describe", "group", "group"), ("describe", "topic", "topic")),
    _B + "ListOffsets": needs(("describe", "topic", "topic")),
    _B + "QueryMessages": needs(("consume", "topic", "topic")),
    _B + "FindByKey": needs(("consume", "topic", "topic")),  # records, as QueryMessages
    _B + "ResetOffsets": CLUSTER_ONLY,  # masters relay an admin's reset
    _B + "ReplicaFetch": CLUSTER_ONLY,  # followers copy a leader's records
    _B + "WriteTxnMarkers": CLUSTER_ONLY,  # the transaction coordinator (active master)
    _B + "SinkStage": needs(("produce", "topic", "topic")),
    _B + "SinkCommit": IN_HANDLER,  # produce on every topic the batch staged
    _B + "SinkAbort": IN_HANDLER,
}

PUBLIC_METHODS = frozenset(m for m, r in RULES.items() if r.kind == "public")
CLUSTER_METHODS = frozenset(m for m, r in RULES.items() if r.kind == "cluster")
