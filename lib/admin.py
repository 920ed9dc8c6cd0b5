"""AdminClient: every administrative operation of the active master, as plain dataclasses
(users, API keys and logins in lib/admin_security.py).

It calls ``tubeq.admin.Admin`` through :class:`lib.rpc.MasterClient`, so it follows a standby's
NOT_LEADER hint and rotates over the master list. Results are the frozen dataclasses of
lib/types.py (never protobuf messages): the portal serialises them with ``dataclasses.asdict``.
Given a ``principal``, every call carries it as ``tubeq-principal`` metadata for the audit log.
"""
from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from lib.admin_security import SecurityCalls
from lib.auth.client import Credentials
from lib.closing import Closeable
from lib.consumer.reader import MessageReader
from lib.errors import (
    InvalidArgument,
    OffsetOutOfRange,
    TubeqError,
    UnknownTopic,
    UnknownTransactionalId,
)
from lib.message_id import MessageId
from lib.names import check_instance_id, check_name
from lib.proto import admin_pb2, admin_pb2_grpc, master_pb2, master_pb2_grpc
from lib.records import Record
from lib.rpc import MasterClient, client_pool, invoke
from lib.tls import Tls
from lib.types import (
    AuditEntry,
    BrokerInfo,
    GroupInfo,
    MasterStatus,
    MemberInfo,
    OffsetMove,
    PartitionInfo,
    PartitionLag,
    TopicInfo,
    TransactionInfo,
)

PRINCIPAL_KEY = "tubeq-principal"
MAX_BROKER_ID = 2**31 - 1  # int32 on the wire


def transaction_info(t: admin_pb2.TransactionDescription) -> TransactionInfo:
    return TransactionInfo(t.transactional_id, t.producer_id, t.producer_epoch, t.state,
                           tuple((p.topic, p.partition) for p in t.partitions), t.age_ms,
                           t.timeout_ms, t.updated_ms,
                           tuple((o.group, o.topic, o.partition, o.offset) for o in t.offsets))


def topic_info(desc: admin_pb2.TopicDescription) -> TopicInfo:
    """TopicDescription -> TopicInfo (partitions sorted by number)."""
    s = desc.settings
    parts = sorted(desc.partitions, key=lambda p: p.partition)
    return TopicInfo(
        name=desc.topic, partition_count=s.partitions or len(parts), stores=s.stores,
        durability=s.durability, retention_ms=s.retention_ms,
        retention_bytes=s.retention_bytes, max_message_bytes=s.max_message_bytes,
        topic_id=s.topic_id, created_ms=desc.created_ms,
        partitions=[PartitionInfo(p.partition, p.broker_id, p.address, p.available,
                                  p.earliest, p.latest, p.disk_bytes, p.leader_epoch,
                                  list(p.replicas), list(p.isr), list(p.replica_lags),
                                  list(p.target_replicas), p.last_stable)
                    for p in parts],
        replication_factor=s.replication_factor or 1,
        min_insync_replicas=s.min_insync_replicas or 1,
        unclean_leader_election=s.unclean_leader_election,
        owner_group=desc.owner_group, owner_role=desc.owner_role,
    )


def group_info(desc: admin_pb2.GroupDescription) -> GroupInfo:
    """GroupDescription -> GroupInfo."""
    members = [
        MemberInfo(m.member_id, m.client_host,
                   {a.topic: sorted(a.partitions) for a in m.assignments}, m.last_heartbeat_ms,
                   m.instance_id)
        for m in desc.members
    ]
    lags = [PartitionLag(p.topic, p.partition, p.committed, p.latest, p.lag, p.member_id,
                         p.instance_id)
            for p in sorted(desc.partitions, key=lambda p: (p.instance_id, p.topic, p.partition))]
    moves = [OffsetMove(m.topic, m.partition, m.from_offset, m.to_offset) for m in desc.moves]
    return GroupInfo(desc.group, desc.generation, members, lags, moves, desc.mode)


def broker_info(info: master_pb2.BrokerInfo, staying: int = 0) -> BrokerInfo:
    """BrokerInfo message -> BrokerInfo (disk fields -1 until the broker reported them)."""
    common = {"draining": info.draining, "rack": info.rack, "replicas": info.replicas,
              "leaders": info.leaders, "staying": staying}
    if not info.HasField("disk"):
        return BrokerInfo(info.broker_id, info.address, info.alive, info.last_heartbeat_ms,
                          **common)
    d = info.disk
    return BrokerInfo(info.broker_id, info.address, info.alive, info.last_heartbeat_ms,
                      disk_full=d.full, disk_free_bytes=d.free_bytes,
                      disk_reserve_bytes=d.reserve_bytes, **common)


def check_broker_id(broker_id: int) -> int:
    """``broker_id`` if it is a valid broker id (an integer in 0 .. 2**31 - 1)."""
    if isinstance(broker_id, bool) or not isinstance(broker_id, int) \
            or not 0 <= broker_id <= MAX_BROKER_ID:
        raise InvalidArgument(f"broker_id must be an integer in 0..{MAX_BROKER_ID}, got "
                              f"{broker_id!r:.40}")
    return broker_id


def settings_of(partitions: int | None = None, stores: int | None = None,
                durability: str | None = None, retention_ms: int | None = None,
                retention_bytes: int | None = None,
                max_message_bytes: int | None = None, replication_factor: int | None = None,
                min_insync_replicas: int | None = None,
                unclean_leader_election: bool | None = None) -> master_pb2.TopicSettings:
    """TopicSettings with unset (None) fields left at zero (or absent): "master default" /
    "keep"."""
    if durability is not None and durability not in ("async", "sync"):
        raise InvalidArgument(f"durability must be 'async' or 'sync', got {durability!r}")
    for name, value, low in (("partitions", partitions, 1), ("stores", stores, 1),
                             ("max_message_bytes", max_message_bytes, 1),
                             ("retention_ms", retention_ms, -1),
                             ("retention_bytes", retention_bytes, -1),
                             ("replication_factor", replication_factor, 1),
                             ("min_insync_replicas", min_insync_replicas, 1)):
        if value is not None and (not isinstance(value, int) or value < low):
            raise InvalidArgument(f"{name} must be an integer >= {low}, got {value!r}")
    if unclean_leader_election is not None and not isinstance(unclean_leader_election, bool):
        raise InvalidArgument("unclean_leader_election must be True or False, got "
                              f"{unclean_leader_election!r}")
    settings = master_pb2.TopicSettings(
        partitions=partitions or 0, stores=stores or 0, durability=durability or "",
        retention_ms=retention_ms or 0, retention_bytes=retention_bytes or 0,
        max_message_bytes=max_message_bytes or 0, replication_factor=replication_factor or 0,
        min_insync_replicas=min_insync_replicas or 0)
    if unclean_leader_election is not None:
        settings.unclean_leader_election = unclean_leader_election
    return settings


class AdminClient(SecurityCalls, Closeable):
    """Admin operations against the active master. Thread-safe; call ``close()`` when done."""

    def __init__(self, masters: str | Sequence[str], timeout: float = 10.0,
                 principal: str | None = None, credentials: Credentials | None = None,
                 tls: Tls | None = None) -> None:
        """``credentials`` (else TUBEQ_USER/TUBEQ_PASSWORD, TUBEQ_API_KEY or TUBEQ_TOKEN from
        the environment) log in on the first call; the token renews by itself. ``tls`` (else
        TUBEQ_TLS_CA ...) reaches TLS ports."""
        self.timeout = timeout
        self._reach = (masters, credentials, tls)  # for the MessageReader of lookups
        self._reader: MessageReader | None = None
        self._reader_lock = threading.Lock()
        self._pool = client_pool(masters, credentials, timeout, tls)
        self._master = MasterClient(masters, pool=self._pool, timeout=timeout)
        self._metadata = ((PRINCIPAL_KEY, principal),) if principal else None

    def _call(self, method: str, request: Any) -> Any:
        return self._master.call(admin_pb2_grpc.AdminStub, method, request,
                                 timeout=self.timeout, metadata=self._metadata)

    # ------------------------------------------------------------------ topics

    def create_topic(self, name: str, partitions: int | None = None, stores: int | None = None,
                     durability: str | None = None, retention_ms: int | None = None,
                     retention_bytes: int | None = None,
                     max_message_bytes: int | None = None,
                     replication_factor: int | None = None,
                     min_insync_replicas: int | None = None,
                     unclean_leader_election: bool | None = None) -> TopicInfo:
        """Create a topic; unset settings take the master's defaults. TopicExists if it is."""
        settings = settings_of(partitions, stores, durability, retention_ms, retention_bytes,
                               max_message_bytes, replication_factor, min_insync_replicas,
                               unclean_leader_election)
        request = admin_pb2.CreateTopicRequest(topic=check_name(name), settings=settings,
                                               request_id=uuid.uuid4().hex)
        return topic_info(self._call("CreateTopic", request))

    def alter_topic(self, name: str, partitions: int | None = None, stores: int | None = None,
                    durability: str | None = None, retention_ms: int | None = None,
                    retention_bytes: int | None = None,
                    max_message_bytes: int | None = None,
                    replication_factor: int | None = None,
                    min_insync_replicas: int | None = None,
                    unclean_leader_election: bool | None = None) -> TopicInfo:
        """Change settings; unset ones keep their value. Partitions can only grow."""
        settings = settings_of(partitions, stores, durability, retention_ms, retention_bytes,
                               max_message_bytes, replication_factor, min_insync_replicas,
                               unclean_leader_election)
        request = admin_pb2.AlterTopicRequest(topic=check_name(name), settings=settings)
        return topic_info(self._call("AlterTopic", request))

    def delete_topic(self, name: str) -> None:
        """Delete a topic and (through the brokers' heartbeats) its data."""
        self._call("DeleteTopic", admin_pb2.DeleteTopicRequest(topic=check_name(name)))

    def describe_topic(self, name: str) -> TopicInfo:
        """Settings plus, per partition, its broker and earliest/latest offsets."""
        request = admin_pb2.DescribeTopicRequest(topic=check_name(name))
        return topic_info(self._call("DescribeTopic", request))

    def list_topics(self) -> list[TopicInfo]:
        response = self._call("ListTopics", admin_pb2.ListTopicsRequest())
        return sorted((topic_info(t) for t in response.topics), key=lambda t: t.name)

    # ------------------------------------------------------------------ brokers, groups

    def list_brokers(self) -> list[BrokerInfo]:
        response = self._call("ListBrokers", admin_pb2.ListBrokersRequest())
        return sorted((broker_info(b) for b in response.brokers), key=lambda b: b.broker_id)

    def drain_broker(self, broker_id: int) -> BrokerInfo:
        """Place no new partitions on this broker and move the replicas it holds to other
        brokers (needs admin on the cluster): each partition keeps serving while its new
        replica copies it. Idempotent (draining again retries the replicas that could not
        move: ``staying``); UnknownBroker if no broker with this id ever registered. Returns
        the broker as it is now (``draining`` True; ``replicas`` falls to 0 as moves end)."""
        return self._set_draining(broker_id, True)

    def reassign_partitions(self, topic: str, replicas: dict[int, Sequence[int]]) -> TopicInfo:
        """Move partitions to other brokers (partition -> broker ids, the preferred leader
        first, as many as the topic's replication factor; needs admin on the cluster). The
        new replicas copy the partition, join the in-sync replicas, then the others leave;
        ``target_replicas`` of :meth:`describe_topic` is empty once a partition is done.
        Reassigning a partition to its current replicas cancels a move in progress."""
        if not replicas:
            raise InvalidArgument("reassign_partitions needs at least one partition")
        parts = []
        for p, ids in sorted(replicas.items()):
            if isinstance(p, bool) or not isinstance(p, int) or p < 0:
                raise InvalidArgument(f"partition must be an integer >= 0, got {p!r:.40}")
            parts.append(admin_pb2.PartitionReplicas(
                partition=p, replicas=[check_broker_id(b) for b in ids]))
        request = admin_pb2.ReassignPartitionsRequest(topic=check_name(topic), partitions=parts)
        return topic_info(self._call("ReassignPartitions", request))

    def undrain_broker(self, broker_id: int) -> BrokerInfo:
        """Let placement use this broker again (the reverse of :meth:`drain_broker`)."""
        return self._set_draining(broker_id, False)

    def _set_draining(self, broker_id: int, draining: bool) -> BrokerInfo:
        request = admin_pb2.SetBrokerDrainingRequest(broker_id=check_broker_id(broker_id),
                                                     draining=draining)
        response = self._call("SetBrokerDraining", request)
        return broker_info(response.broker, response.staying)

    def list_groups(self) -> list[str]:
        return sorted(self._call("ListGroups", admin_pb2.ListGroupsRequest()).groups)

    def describe_group(self, group: str) -> GroupInfo:
        """Members, their assignment, and committed offset and lag per partition."""
        request = admin_pb2.DescribeGroupRequest(group=check_name(group, "group"))
        return group_info(self._call("DescribeGroup", request))

    def reset_group_offsets(self, group: str, topic: str, *, to_earliest: bool = False,
                            to_latest: bool = False, to_offset: int | None = None,
                            to_timestamp: int | None = None,
                            partitions: Iterable[int] | None = None,
                            dry_run: bool = False, instance_id: str = "") -> GroupInfo:
        """Move a group's committed offsets; give exactly one target. The group must have no
        live members (GroupNotEmpty otherwise). ``moves`` of the answer says what moved; with
        ``dry_run`` the master checks everything and answers only ``moves``, changing nothing
        (a preview; not audited). ``instance_id``: move that broadcast instance's offsets
        instead (only it must not be live; docs/broadcast.md)."""
        targets = {"earliest": to_earliest or None, "latest": to_latest or None,
                   "offset": to_offset, "timestamp_ms": to_timestamp}
        chosen = {k: v for k, v in targets.items() if v is not None}
        if len(chosen) != 1:
            raise InvalidArgument(
                "reset_group_offsets needs exactly one of to_earliest, to_latest, to_offset, "
                f"to_timestamp; got {sorted(chosen) or 'none'}")
        parts = sorted(set(partitions or ()))
        if any(not isinstance(p, int) or p < 0 for p in parts):
            raise InvalidArgument(f"partitions must be integers >= 0, got {parts}")
        request = admin_pb2.ResetGroupOffsetsRequest(
            group=check_name(group, "group"), topic=check_name(topic), partitions=parts,
            dry_run=bool(dry_run), instance_id=check_instance_id(instance_id) if instance_id
            else "", **chosen)
        return group_info(self._call("ResetGroupOffsets", request))

    def audit_log(self, limit: int = 100) -> list[AuditEntry]:
        """The newest ``limit`` admin changes, newest first as the master returns them."""
        if not isinstance(limit, int) or limit < 1:
            raise InvalidArgument(f"limit must be an integer >= 1, got {limit!r}")
        response = self._call("AuditLog", admin_pb2.AuditLogRequest(limit=limit))
        return [AuditEntry(e.time_ms, e.principal, e.action, e.target, e.details, e.peer)
                for e in response.entries]

    # ------------------------------------------------------------------ transactions

    def list_transactions(self, every: bool = False) -> list[TransactionInfo]:
        """Transactions open or ending (``every``: also the transactional ids with none open),
        of the ids the caller may describe."""
        response = self._call("ListTransactions", admin_pb2.ListTransactionsRequest(all=every))
        return [transaction_info(t) for t in response.transactions]

    def describe_transaction(self, transactional_id: str) -> TransactionInfo:
        """One transactional_id's transaction (UnknownTransactionalId when the coordinator
        holds no such id, or the caller may not describe it)."""
        tid = check_name(transactional_id, "transactional_id")
        for t in self.list_transactions(every=True):
            if t.transactional_id == tid:
                return t
        raise UnknownTransactionalId(f"unknown transactional_id {tid!r} (or not yours to "
                                     "describe)", transactional_id=tid)

    def abort_transaction(self, transactional_id: str) -> TransactionInfo:
        """Abort a transactional_id's open transaction, fencing its producer (admin only);
        answers once its abort markers are written (ConcurrentTransactions, retriable, if
        they take longer than about 10 s: the abort is decided and goes on)."""
        request = admin_pb2.AbortTransactionRequest(
            transactional_id=check_name(transactional_id, "transactional_id"))
        return transaction_info(self._call("AbortTransaction", request).transaction)

    # ------------------------------------------------------------------ lifecycle

    # ------------------------------------------------------------------ masters

    def master_status(self) -> list[MasterStatus]:
        """Every master of the list, asked directly (standbys too): role, term, log position.

        Not routed to the leader: this is how an operator sees the standbys and their lag.
        """
        answers: list[tuple[str, Any]] = []
        for address in self._master.masters:
            stub = admin_pb2_grpc.AdminStub(self._master.pool.get(address))
            try:
                answers.append((address, invoke(stub.MasterStatus,
                                                admin_pb2.MasterStatusRequest(),
                                                min(self.timeout, 3.0), self._metadata)))
            except TubeqError as err:
                answers.append((address, err))
        top = max((a.commit_index for _, a in answers if not isinstance(a, TubeqError)),
                  default=0)
        return [MasterStatus(address, "unreachable", error=a.message)
                if isinstance(a, TubeqError) else
                MasterStatus(a.address or address, a.role, a.leader, a.term, a.epoch,
                             a.commit_index, a.applied_index, max(0, top - a.applied_index),
                             a.raft_node, a.log_entries, a.has_quorum)
                for address, a in answers]

    def ensure_group_topics(self, group: str, dead_letter_topic: str = "") -> tuple[str, str]:
        """The group's retry and dead-letter topics, made when missing (docs/retry.md)."""
        response = self._master.call(
            master_pb2_grpc.MasterStub, "EnsureGroupTopics",
            master_pb2.EnsureGroupTopicsRequest(group=group, dead_letter_topic=dead_letter_topic),
            timeout=self.timeout, metadata=self._metadata)
        return response.retry_topic, response.dead_letter_topic

    def audit_dead_letters(self, group: str, action: str, details: str) -> None:
        """Write what was done with ``group``'s dead letters to the audit log
        (lib/dead_letters.py calls it)."""
        self._call("AuditDeadLetters", admin_pb2.AuditDeadLettersRequest(
            group=group, action=action, details=details))

    # ----------------------------------------------------------------- lookups

    def find_by_key(self, topic: str, key: bytes | str, *, since: int | datetime | None = None,
                    until: int | datetime | None = None, limit: int = 64,
                    partitions: Iterable[int] | None = None) -> list[Record]:
        """Records of ``topic`` whose key is ``key``, timestamps within [since, until] (epoch
        ms or aware datetimes) when given: the oldest ``limit`` (1..1000), answered from each
        partition's key index without a scan (docs/lookup.md). The brokers check the
        caller's ``consume`` right on the topic. :meth:`message_id` gives a record's id."""
        return self._lookups().find_by_key(topic, key, partitions=partitions,
                                           since_ms=_epoch_ms("since", since),
                                           until_ms=_epoch_ms("until", until), limit=limit)

    def message_id(self, record: Record) -> str:
        """The id of a record read back (its topic, partition and offset; lib/message_id.py)."""
        return str(MessageId(self._lookups().topic_id(record.topic), record.partition,
                             record.offset))

    def find_by_id(self, message_id: str) -> Record:
        """The record with this id (:meth:`message_id`). InvalidArgument for a malformed id,
        UnknownTopic when no topic has its topic id (deleted), OffsetOutOfRange when
        retention deleted the record or the offset was never written."""
        mid = MessageId.parse(message_id)
        topic = next((t.name for t in self.list_topics() if t.topic_id == mid.topic_id), None)
        if topic is None:
            raise UnknownTopic(f"message id {message_id}: no topic has id {mid.topic_id} "
                               f"(deleted?)", topic_id=mid.topic_id)
        try:
            got = self._lookups().read(topic, mid.partition, mid.offset, mid.offset + 1)
            hit = [r for r in got.records if r.offset == mid.offset]
            earliest, latest = got.earliest, got.latest
        except OffsetOutOfRange as exc:
            hit, earliest, latest = [], exc.details.get("earliest"), exc.details.get("latest")
        if not hit:
            raise OffsetOutOfRange(f"message id {message_id}: {topic}[{mid.partition}] holds "
                                   f"no record at offset {mid.offset} (deleted by retention, "
                                   f"or not written yet: earliest {earliest}, latest "
                                   f"{latest})", topic=topic, partition=mid.partition,
                                   offset=mid.offset, earliest=earliest, latest=latest)
        return hit[0]

    def _lookups(self) -> MessageReader:
        with self._reader_lock:
            if self._reader is None:
                masters, credentials, tls = self._reach
                self._reader = MessageReader(masters, credentials=credentials, tls=tls,
                                             rpc_timeout_s=self.timeout)
            return self._reader

    def close(self) -> None:
        with self._reader_lock:
            if self._reader is not None:
                self._reader.close()
        self._master.close()
        self._pool.close()



def _epoch_ms(name: str, value: int | datetime | None) -> int | None:
    """Epoch milliseconds of a lookup bound (an int as is, an aware datetime converted)."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InvalidArgument(f"{name} must be timezone-aware, got {value!r}")
        return int(value.timestamp() * 1000)
    raise InvalidArgument(f"{name} must be epoch milliseconds or a datetime, got {value!r}")
