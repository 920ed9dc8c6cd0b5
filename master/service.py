"""gRPC servicer of ``tubeq.master.Master``: brokers register and heartbeat, clients get routes,
coordinate consumer groups, get producer ids (master/producer_ids.py) and run transactions
(master/transactions.py).

Every response to a broker carries ``term`` = the master epoch, so a broker can ignore a
deposed master. Heartbeat responses carry the whole desired state (topic settings, this
broker's placements, deleted incarnations), or "unchanged" when the broker names the digest of
the one it applied (master/broker_views.py): a broker that missed one catches up with the next.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import grpc

from lib.auth.access import current_access
from lib.auth.acl import to_pb
from lib.auth.identities import CLUSTER
from lib.delay import DELAY_TOPIC
from lib.errors import InvalidArgument, TubeqError, UnknownTopic, UnknownTransactionalId
from lib.logs import event
from lib.names import check_name
from lib.proto import master_pb2 as mpb
from lib.proto import master_pb2_grpc
from lib.proto import security_pb2 as spb
from master import election, security
from master.broker_views import BrokerViews
from master.brokers import BrokerRegistry, DiskState, PartitionStat, wall_ms
from master.config import MasterConfig
from master.groups import GroupCoordinator, MemberView
from master.guard import Leadership, caller, guarded
from master.kafka_groups import kafka_group_call
from master.producer_ids import PRODUCER_EPOCH, ProducerIdBlocks
from master.routes import RouteBook
from master.state import MetaState
from master.topic_ops import TopicOps
from master.transactions import TransactionCoordinator

log = logging.getLogger(__name__)

MAX_ROUTE_TOPICS = 10_000
MAX_REFUSALS = 1001  # per heartbeat: a broker sends at most audit_refusal_kinds + 1
MAX_CLIENT_ID_LOGGED = 256
MAX_TXN_PARTITIONS_PER_CALL = 10_000
WAIT_MARGIN_S = 0.2  # answer this long before the caller's deadline


class MasterService(master_pb2_grpc.MasterServicer):
    def __init__(self, config: MasterConfig, state: MetaState, registry: BrokerRegistry,
                 groups: GroupCoordinator, routes: RouteBook, leadership: Leadership,
                 write: Callable[[dict[str, Any]], Any], producer_ids: ProducerIdBlocks,
                 txns: TransactionCoordinator, topic_ops: TopicOps | None = None) -> None:
        self.config, self.state, self.registry = config, state, registry
        self.topic_ops = topic_ops  # internal and group topics, made on first use
        self.groups, self.routes, self.leadership = groups, routes, leadership
        self.write = write  # replicates a state command (Raft)
        self.producer_ids, self.txns = producer_ids, txns
        self.views = BrokerViews(state, routes)

    @property
    def term(self) -> int:
        return self.groups.epoch

    # -- brokers -------------------------------------------------------------------------

    @guarded
    def RegisterBroker(self, request, context):  # noqa: N802
        broker = request.broker_id
        self.registry.register(broker, request.address, request.rack, request.kafka_address)
        known = self.state.incarnation(broker)
        if self.state.brokers().get(broker) != request.address or \
                known != request.incarnation:
            self.write({"op": "register_broker", "time_ms": wall_ms(), "broker_id": broker,
                        "address": request.address, "incarnation": request.incarnation})
        if known and request.incarnation and known != request.incarnation:
            self._move_off(broker, "broker_restarted")  # before it is sent any placement
        view = self.views.view(request.broker_id)
        return mpb.RegisterBrokerResponse(
            term=self.term, topics=view.topics, placements=view.placements,
            heartbeat_interval_ms=self.config.broker_heartbeat_interval_ms,
            signing_keys=self._signing_keys(), acls=self._acls(-1), quotas=self._quotas(-1),
            ip_rules=self._ip_rules(-1))

    @guarded
    def BrokerHeartbeat(self, request, context):  # noqa: N802
        stats = [(s.topic, s.partition, PartitionStat(
            s.earliest, s.latest, s.bytes_in, s.messages_in, s.bytes_out, s.messages_out,
            s.disk_bytes, s.last_stable))
            for s in request.stats]
        disk = (DiskState(request.disk.free_bytes, request.disk.reserve_bytes, request.disk.full)
                if request.HasField("disk") else None)
        if not self.registry.heartbeat(request.broker_id, stats, disk,
                                       request.unreachable_brokers, request.stats_partial):
            return mpb.BrokerHeartbeatResponse(term=self.term, reregister=True)
        self._record_committed(request.committed)
        for refusal in request.refusals[:MAX_REFUSALS]:
            self.write(security.refusal_audit(refusal, f"broker {request.broker_id}"))
        view = self.views.view(request.broker_id)
        unchanged = view.unchanged_for(request.metadata_digest)
        sent = {} if unchanged else {"topics": view.topics, "placements": view.placements,
                                     "deleted": view.deleted}
        return mpb.BrokerHeartbeatResponse(term=self.term, metadata_unchanged=unchanged,
                                           metadata_digest=view.digest, **sent,
                                           signing_keys=self._signing_keys(),
                                           acls=self._acls(request.acl_version),
                                           quotas=self._quotas(request.quota_version),
                                           ip_rules=self._ip_rules(request.ip_version))

    def _signing_keys(self) -> list[mpb.SigningKey]:
        """The keyring, for a caller that presented the cluster credential only (with
        auth = "none" nobody is identified, and nobody gets keys)."""
        if current_access.get().identity.kind != CLUSTER:
            return []
        return [mpb.SigningKey(key_id=k, secret=v)
                for k, v in self.state.principals.keyring().items()]

    def _acls(self, held: int) -> spb.AclSet | None:
        """The ACLs, to the cluster identity only, when the version the broker holds differs."""
        principals = self.state.principals
        if current_access.get().identity.kind != CLUSTER or held == principals.acl_version:
            return None
        version, entries = principals.acls()
        return spb.AclSet(version=version, entries=[to_pb(e) for e in entries])

    def _quotas(self, held: int) -> spb.QuotaSet | None:
        """The quotas, when the version the broker holds differs (not secret: to anyone the
        heartbeat's rule lets in, so also with auth = "none")."""
        if held == self.state.principals.quota_version:
            return None
        return security.quota_set(self.state.principals)

    def _ip_rules(self, held: int) -> spb.IpRuleSet | None:
        """The IP lists, when the version the broker holds differs."""
        if held == self.state.principals.ip_version:
            return None
        return security.ip_rule_set(self.state.principals)

    def _record_committed(self, pairs) -> None:
        """Record the topics that groups committed offsets of on a broker, so describe_group
        lists them even for consumers that never joined (a manual assignment, a Spark query's
        ``groupId``). Only new pairs cost a replicated write."""
        known = self.state.groups()
        new: dict[str, set[str]] = {}
        for pair in pairs:
            try:
                check_name(pair.group, "group")
            except InvalidArgument:
                continue  # brokers check names on commit: never expected
            if self.state.topic(pair.topic) is None:
                continue  # a topic deleted since: nothing to list
            if pair.topic not in known.get(pair.group, {}).get("topics", ()):
                new.setdefault(pair.group, set()).add(pair.topic)
        for group, topics in sorted(new.items()):
            self.write({"op": "record_group", "time_ms": wall_ms(), "group": group,
                        "topics": sorted(topics)})

    @guarded
    def AlterIsr(self, request, context):  # noqa: N802
        before = self.state.topic(request.topic)
        record = self.write({
            "op": "alter_isr", "time_ms": wall_ms(), "broker_id": request.broker_id,
            "topic": request.topic, "topic_id": request.topic_id,
            "partition": request.partition, "leader_epoch": request.leader_epoch,
            "isr": list(request.isr), "complete": request.complete_reassignment})
        p = request.partition
        event(log, "partition.isr_changed", topic=request.topic, partition=p,
              leader=request.broker_id, isr=list(request.isr),
              replicas=record["replicas"][p], now_led_by=record["placement"][p])
        if before is not None and p < len(before["replicas"]) \
                and before["replicas"][p] != record["replicas"][p]:
            self._audit_reassigned(request, before, record)
        return mpb.AlterIsrResponse(isr=record["isr"][p], leader=record["placement"][p],
                                    leader_epoch=record["leader_epochs"][p],
                                    replicas=record["replicas"][p])

    def _audit_reassigned(self, request, before: dict, after: dict) -> None:
        """A reassignment finished (its leader's AlterIsr): the audit log says so."""
        p = request.partition
        details = {"from": before["replicas"][p], "to": after["replicas"][p],
                   "leader": after["placement"][p], "leader_epoch": after["leader_epochs"][p]}
        try:
            self.write({"op": "audit", "time_ms": wall_ms(), "audit": {
                "principal": "controller", "peer": f"broker {request.broker_id}",
                "action": "reassignment_done", "target": f"{request.topic}/{p}",
                "details": json.dumps(details, sort_keys=True)}})
        except TubeqError as err:
            event(log, "master.audit_failed", logging.WARNING, error=err.message)

    @guarded
    def BrokerShutdown(self, request, context):  # noqa: N802
        broker = request.broker_id
        self._move_off(broker, "broker_shutdown")
        still = sum(1 for record in self.state.topics().values()
                    for p, leader in enumerate(record["placement"])
                    if leader == broker and len(record["replicas"][p]) > 1)
        return mpb.BrokerShutdownResponse(still_led=still)

    def _move_off(self, broker: int, action: str) -> None:
        """Its leaderships to in-sync followers and it out of the ISRs (master/election.py
        handoff): a broker stopping cleanly, or one that restarted (a crash may have cost it
        the unflushed tail its followers hold: it must not lead them back over it)."""
        changes = election.handoff(self.state.topics(), broker, self.registry.alive_ids())
        if not changes:
            return
        applied = self.write({
            "op": "elect_leaders", "time_ms": wall_ms(), "changes": changes,
            "audit": {"principal": "controller", "peer": f"broker {broker}", "action": action,
                      "target": f"broker {broker}",
                      "details": json.dumps(changes, sort_keys=True)[:4000]}})
        event(log, "broker.moved_off", broker_id=broker, reason=action, changes=len(applied))

    # -- clients -------------------------------------------------------------------------

    @guarded
    def GetRoutes(self, request, context):  # noqa: N802
        if request.brokers_only:
            return mpb.GetRoutesResponse(kafka_addresses=self.registry.kafka_addresses())
        names = list(dict.fromkeys(request.topics))
        if len(names) > MAX_ROUTE_TOPICS:
            raise InvalidArgument(f"at most {MAX_ROUTE_TOPICS} topics per GetRoutes call")
        for name in names:
            check_name(name, "topic")
            if name == DELAY_TOPIC and self.topic_ops is not None:
                self.topic_ops.ensure_delay_topic()
            if self.state.topic(name) is None:
                raise UnknownTopic(f"unknown topic {name!r}", topic=name)
        return mpb.GetRoutesResponse(routes=self.routes.routes(names),
                                     kafka_addresses=self.registry.kafka_addresses())

    @guarded
    def EnsureGroupTopics(self, request, context):  # noqa: N802
        """The group's retry and dead-letter topics (docs/retry.md)."""
        if self.topic_ops is None:
            raise InvalidArgument("this master makes no group topics")
        retry, dead = self.topic_ops.ensure_group_topics(
            request.group, request.dead_letter_topic, caller(context))
        return mpb.EnsureGroupTopicsResponse(retry_topic=retry, dead_letter_topic=dead)

    @guarded
    def JoinGroup(self, request, context):  # noqa: N802
        owned = {a.topic: list(a.partitions) for a in request.owned} \
            if request.owned or request.member_id else None
        view = self.groups.join(request.group, list(request.topics), request.member_id,
                                request.client_host, request.session_timeout_ms, owned,
                                request.mode, request.instance_id)
        recorded = self.state.groups().get(request.group, {}).get("topics", [])
        if not set(view.topics) <= set(recorded):
            self.write({"op": "record_group", "time_ms": wall_ms(),
                              "group": request.group, "topics": list(view.topics)})
        return self._group_state(view)

    @guarded
    def GroupHeartbeat(self, request, context):  # noqa: N802
        return self._group_state(self.groups.heartbeat(request.group, request.member_id))

    @guarded
    def LeaveGroup(self, request, context):  # noqa: N802
        check_name(request.group, "group")
        self.groups.leave(request.group, request.member_id)
        return mpb.LeaveGroupResponse()

    @guarded
    def KafkaGroup(self, request, context):  # noqa: N802
        """A broker's Kafka port forwarding a group call (cluster credential only: the broker
        checked its client's ACLs); never waits (master/kafka_groups.py)."""
        return kafka_group_call(self.groups.kafka, request)

    @guarded
    def InitProducerId(self, request, context):  # noqa: N802
        """Without a transactional_id: a fresh producer id (epoch 0), for a caller that may
        produce to at least one topic (Kafka's rule since KIP-679; the admin role and the
        cluster credential pass). With one (write on it: the access rule): its new
        instance's id and epoch (master/transactions.py)."""
        if request.transactional_id:
            tid = check_name(request.transactional_id, "transactional_id")
            producer_id, epoch = self.txns.init(tid, request.transaction_timeout_ms,
                                                self._wait_s(context))
        else:
            current_access.get().check_somewhere("produce", "topic", "a producer id")
            producer_id, epoch = self.producer_ids.take(), PRODUCER_EPOCH
        event(log, "master.producer_id", logging.DEBUG, producer_id=producer_id, epoch=epoch,
              transactional_id=request.transactional_id,
              client_id=request.client_id[:MAX_CLIENT_ID_LOGGED], **caller(context))
        return mpb.InitProducerIdResponse(producer_id=producer_id, producer_epoch=epoch)

    @guarded
    def AddPartitionsToTxn(self, request, context):  # noqa: N802
        """Write on the transactional_id (the access rule) and produce on every topic."""
        tid = check_name(request.transactional_id, "transactional_id")
        if len(request.partitions) > MAX_TXN_PARTITIONS_PER_CALL:
            raise InvalidArgument(f"at most {MAX_TXN_PARTITIONS_PER_CALL} partitions per "
                                  "AddPartitionsToTxn call")
        access = current_access.get()
        for topic in sorted({tp.topic for tp in request.partitions}):
            check_name(topic, "topic")
            if topic != DELAY_TOPIC:  # a delayed record's broker checks its target topic
                access.check("produce", "topic", topic)
        self.txns.add_partitions(tid, request.producer_id, request.producer_epoch,
                                 [(tp.topic, tp.partition) for tp in request.partitions])
        return mpb.AddPartitionsToTxnResponse()

    @guarded
    def AddOffsetsToTxn(self, request, context):  # noqa: N802
        """Write on the transactional_id and consume on the group (the access rule)."""
        tid = check_name(request.transactional_id, "transactional_id")
        group = check_name(request.group, "group")
        if len(request.offsets) > MAX_TXN_PARTITIONS_PER_CALL:
            raise InvalidArgument(f"at most {MAX_TXN_PARTITIONS_PER_CALL} offsets per "
                                  "AddOffsetsToTxn call")
        for o in request.offsets:
            check_name(o.topic, "topic")
            if o.offset < 0:
                raise InvalidArgument(f"offset {o.offset} of {o.topic}/{o.partition} is "
                                      "negative", topic=o.topic, partition=o.partition)
        self.txns.add_offsets(tid, request.producer_id, request.producer_epoch, group,
                              [(o.topic, o.partition, o.offset) for o in request.offsets])
        return mpb.AddOffsetsToTxnResponse()

    @guarded
    def CheckOpenTxns(self, request, context):  # noqa: N802
        """Brokers only (the access rule); answered by the active master alone (guarded)."""
        if len(request.queries) > MAX_TXN_PARTITIONS_PER_CALL:
            raise InvalidArgument(f"at most {MAX_TXN_PARTITIONS_PER_CALL} queries per "
                                  "CheckOpenTxns call")
        return mpb.CheckOpenTxnsResponse(open=self.txns.open_on(
            [(q.producer_id, q.producer_epoch, q.topic, q.partition)
             for q in request.queries]))

    @guarded
    def BeginHalfMessage(self, request, context):  # noqa: N802
        group = check_name(request.producer_group, "producer_group")
        tid, producer_id, epoch = self.txns.begin_half(group, check_name(request.topic),
                                                       request.partition)
        return mpb.BeginHalfMessageResponse(transactional_id=tid, producer_id=producer_id,
                                            producer_epoch=epoch)

    @guarded
    def EndHalfMessage(self, request, context):  # noqa: N802
        group, tid = self._half_of(request)
        producer_id, epoch = self.txns.end(tid, request.producer_id, request.producer_epoch,
                                           request.commit, self._wait_s(context))
        return mpb.EndTxnResponse(producer_id=producer_id, producer_epoch=epoch)

    @guarded
    def PollTxnChecks(self, request, context):  # noqa: N802
        group = check_name(request.producer_group, "producer_group")
        left = context.time_remaining()
        wait = min(request.wait_ms / 1000, 10.0, 10.0 if left is None else max(0.0, left - 0.2))
        return mpb.PollTxnChecksResponse(checks=[
            mpb.TxnCheck(**check) for check in self.txns.poll_checks(group, wait)])

    @guarded
    def ResolveTxnCheck(self, request, context):  # noqa: N802
        _group, tid = self._half_of(request)
        if request.outcome not in ("commit", "rollback", "unknown"):
            raise InvalidArgument(f"outcome must be commit, rollback or unknown, got "
                                  f"{request.outcome!r:.40}")
        return mpb.ResolveTxnCheckResponse(step=self.txns.resolve_check(
            tid, request.producer_id, request.producer_epoch, request.outcome))

    def _half_of(self, request) -> tuple[str, str]:
        """(group, transactional_id) of a half message the request's group owns."""
        group = check_name(request.producer_group, "producer_group")
        tid = check_name(request.transactional_id, "transactional_id")
        if self.txns.half_group(tid) != group:
            raise UnknownTransactionalId(f"no half message {tid!r} of producer group "
                                         f"{group!r} (ended, or another group's)",
                                         transactional_id=tid)
        return group, tid

    @guarded
    def EndTxn(self, request, context):  # noqa: N802
        tid = check_name(request.transactional_id, "transactional_id")
        producer_id, epoch = self.txns.end(tid, request.producer_id, request.producer_epoch,
                                           request.commit, self._wait_s(context),
                                           request.keep_epoch)
        return mpb.EndTxnResponse(producer_id=producer_id, producer_epoch=epoch)

    def _wait_s(self, context) -> float:
        """How long a transactional call may wait for markers: the configured wait, within
        the caller's deadline."""
        most = self.config.transaction_end_wait_ms / 1000
        left = context.time_remaining()
        return most if left is None else max(0.0, min(most, left - WAIT_MARGIN_S))

    def _group_state(self, view: MemberView) -> mpb.GroupState:
        return mpb.GroupState(
            member_id=view.member_id, generation=view.generation,
            assignments=[mpb.Assignment(topic=t, partitions=ps)
                         for t, ps in sorted(view.assignments.items())],
            routes=self.routes.routes(view.topics),
            heartbeat_interval_ms=view.heartbeat_interval_ms)


def add_to(server: grpc.Server, service: MasterService) -> None:
    master_pb2_grpc.add_MasterServicer_to_server(service, server)
