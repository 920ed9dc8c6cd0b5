"""gRPC servicer of ``tubeq.admin.Admin``: topic and group administration, brokers, audit log,
transactions.

Thin: requests are checked and turned into calls of :class:`TopicOps` / :class:`GroupOps` /
:class:`BrokerOps`;
every change carries the caller (principal from metadata ``tubeq-principal``, gRPC peer) into
its audit entry, written in the same state transaction as the change.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import grpc

from lib.auth.access import current_access
from lib.errors import InvalidArgument
from lib.names import check_name
from lib.proto import admin_pb2 as apb
from lib.proto import admin_pb2_grpc
from lib.proto import master_pb2 as mpb
from master.broker_ops import BrokerOps
from master.brokers import BrokerRegistry, wall_ms
from master.group_ops import GroupOps
from master.guard import Leadership, any_master, audited, caller, guarded
from master.state import MetaState
from master.state_txns import OPEN
from master.topic_ops import TopicOps
from master.transactions import TransactionCoordinator

DEFAULT_AUDIT_LIMIT = 100
MAX_AUDIT_LIMIT = 10_000
DEAD_LETTER_ACTIONS = frozenset({"dlq_replay", "dlq_purge"})
MAX_AUDIT_DETAILS = 4000
ABORT_WAIT_S = 10.0  # AbortTransaction waits this long (at most) for the abort's markers


class AdminService(admin_pb2_grpc.AdminServicer):
    def __init__(self, state: MetaState, registry: BrokerRegistry, topics: TopicOps,
                 groups: GroupOps, brokers: BrokerOps, leadership: Leadership,
                 status: Callable[[], dict[str, Any]], txns: TransactionCoordinator) -> None:
        self.state, self.registry = state, registry
        self.topics, self.group_ops, self.leadership = topics, groups, leadership
        self.brokers = brokers
        self.status = status
        self.txns = txns

    @any_master
    def MasterStatus(self, request, context):  # noqa: N802
        s = self.status()
        return apb.MasterStatusResponse(
            address=s["address"], raft_node=s["node"], role=s["role"],
            leader=s["leader_address"], term=s["term"], epoch=s["epoch"],
            commit_index=s["commit_index"], applied_index=s["applied_index"],
            log_entries=s["log_entries"], has_quorum=s["has_quorum"], peers=s["peers"])

    @guarded
    def CreateTopic(self, request, context):  # noqa: N802
        settings = request.settings if request.HasField("settings") else None
        self.topics.create(request.topic, settings, caller(context), request.request_id[:64])
        audited("create_topic", topic=request.topic)
        return self.topics.describe(request.topic, live=False)

    @guarded
    def AlterTopic(self, request, context):  # noqa: N802
        settings = request.settings if request.HasField("settings") else None
        self.topics.alter(request.topic, settings, caller(context))
        audited("alter_topic", topic=request.topic)
        return self.topics.describe(request.topic, live=False)

    @guarded
    def DeleteTopic(self, request, context):  # noqa: N802
        self.topics.delete(request.topic, caller(context))
        audited("delete_topic", topic=request.topic)
        return apb.DeleteTopicResponse()

    @guarded
    def DescribeTopic(self, request, context):  # noqa: N802
        return self.topics.describe(request.topic)

    @guarded
    def ListTopics(self, request, context):  # noqa: N802
        return apb.ListTopicsResponse(topics=[self.topics.describe(name, live=False)
                                              for name in visible("topic", self.state.topics())])

    @guarded
    def ListBrokers(self, request, context):  # noqa: N802
        return apb.ListBrokersResponse(brokers=self.brokers.list())

    @guarded
    def SetBrokerDraining(self, request, context):  # noqa: N802
        info, changed, moving, staying = self.brokers.set_draining(
            request.broker_id, request.draining, caller(context))
        audited("drain_broker" if request.draining else "undrain_broker",
                broker_id=request.broker_id, changed=changed, moving=moving)
        return apb.SetBrokerDrainingResponse(broker=info, changed=changed, moving=moving,
                                             staying=staying)

    @guarded
    def ReassignPartitions(self, request, context):  # noqa: N802
        wanted: dict[int, list[int]] = {}
        for part in request.partitions:
            if part.partition in wanted:
                raise InvalidArgument(f"partition {part.partition} named twice in one "
                                      "reassignment", partition=part.partition)
            wanted[part.partition] = list(part.replicas)
        self.topics.reassign(request.topic, wanted, caller(context))
        audited("reassign_partitions", topic=request.topic, partitions=sorted(wanted))
        return self.topics.describe(request.topic, live=False)

    @guarded
    def ListGroups(self, request, context):  # noqa: N802
        return apb.ListGroupsResponse(groups=visible("group", self.group_ops.list()))

    @guarded
    def DescribeGroup(self, request, context):  # noqa: N802
        return self.group_ops.describe(request.group)

    @guarded
    def ResetGroupOffsets(self, request, context):  # noqa: N802
        result = self.group_ops.reset(request, self.group_ops.groups.epoch, caller(context))
        if not request.dry_run:
            audited("reset_group_offsets", group=request.group, topic=request.topic)
        return result

    @guarded
    def AuditLog(self, request, context):  # noqa: N802
        limit = min(request.limit or DEFAULT_AUDIT_LIMIT, MAX_AUDIT_LIMIT)
        return apb.AuditLogResponse(entries=[
            apb.AuditEntry(time_ms=e["time_ms"], principal=e.get("principal", ""),
                           action=e.get("action", ""), target=e.get("target", ""),
                           details=e.get("details", ""), peer=e.get("peer", ""))
            for e in self.state.audit(limit)])


    @guarded
    def AuditDeadLetters(self, request, context):  # noqa: N802
        group = check_name(request.group, "group")
        if request.action not in DEAD_LETTER_ACTIONS:
            raise InvalidArgument(f"action must be one of {sorted(DEAD_LETTER_ACTIONS)}, got "
                                  f"{request.action[:64]!r}")
        if len(request.details) > MAX_AUDIT_DETAILS:
            raise InvalidArgument(f"details are at most {MAX_AUDIT_DETAILS} characters")
        self.topics.write({"op": "audit", "time_ms": wall_ms(), "audit": {
            **caller(context), "action": request.action, "target": group,
            "details": request.details}})
        return apb.AuditDeadLettersResponse()

    @guarded
    def ListTransactions(self, request, context):  # noqa: N802
        records = self.state.txns()
        chosen = [t for t in visible("transactional_id", records)
                  if request.all or records[t]["state"] in OPEN]
        now = wall_ms()
        return apb.ListTransactionsResponse(
            transactions=[txn_pb(t, records[t], now) for t in chosen])

    @guarded
    def AbortTransaction(self, request, context):  # noqa: N802
        tid = request.transactional_id
        left = context.time_remaining()
        wait = ABORT_WAIT_S if left is None else max(0.0, min(ABORT_WAIT_S, left - 0.2))
        record = self.txns.abort(tid, wait, caller(context))
        audited("abort_transaction", transactional_id=tid)
        return apb.AbortTransactionResponse(transaction=txn_pb(tid, record, wall_ms()))


def txn_pb(tid: str, record: dict[str, Any], now_ms: int) -> apb.TransactionDescription:
    return apb.TransactionDescription(
        transactional_id=tid, producer_id=record["producer_id"],
        producer_epoch=record["epoch"], state=record["state"],
        partitions=[mpb.TxnTopicPartition(topic=t, partition=p)
                    for t, p in record["partitions"]],
        age_ms=max(0, now_ms - record["began_ms"]) if record["began_ms"] else 0,
        timeout_ms=record["timeout_ms"], updated_ms=record["updated_ms"],
        offsets=[apb.TxnGroupOffset(group=g, topic=t, partition=p, offset=o)
                 for g, t, p, o in record.get("offsets", [])])


def visible(resource: str, names: Iterable[str]) -> list[str]:
    """The names (sorted) the caller may describe: a listing shows only those (Kafka's rule)."""
    access = current_access.get()
    return [n for n in sorted(names) if access.allowed("describe", resource, n)]


def add_to(server: grpc.Server, service: AdminService) -> None:
    admin_pb2_grpc.add_AdminServicer_to_server(service, server)
