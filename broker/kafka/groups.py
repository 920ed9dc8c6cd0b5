"""Kafka consumer groups on the Kafka port: coordinator lookup, membership and offsets.

Membership (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) is coordinated by the active master
(master/kafka_groups.py): this broker checks the client's ACLs (consume on the group) and
forwards; a join or sync that must wait is asked again every :data:`POLL_S` on the event loop
until it completes or the client's rebalance timeout passes, so a waiting member holds no
thread here or on the master. Every broker answers FindCoordinator with itself: whichever
broker a client reached forwards to the same coordinator.

Offsets live where tubeq keeps them, on the broker that leads each partition (broker/offsets.py):
an OffsetCommit is checked with the coordinator (member and generation, Kafka's
ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID / REBALANCE_IN_PROGRESS) and then sent to each
partition's leader as a ``CommitOffsets`` fenced with the coordinator's 64-bit generation,
which is what tubeq's own consumers commit with: a group's committed offsets are the same
through both APIs (a tubeq consumer of a group and a Kafka one, one after the other).
"""
from __future__ import annotations

import asyncio
import time
import zlib
from collections import defaultdict
from typing import Any

from kafka.protocol.admin import DescribeGroupsResponse, ListGroupsResponse
from kafka.protocol.consumer import (
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorResponse

from broker.kafka import wire
from broker.kafka.session import Session
from lib.errors import TubeqError
from lib.names import check_name
from lib.proto import broker_pb2 as pb
from lib.proto import master_pb2 as mpb
from lib.proto import master_pb2_grpc

POLL_S = 0.1
MAX_JOIN_WAIT_S = 300.0
PEER_TIMEOUT_S = 10.0
CommitPartition = OffsetCommitResponse.OffsetCommitResponseTopic.OffsetCommitResponsePartition
FetchPartition = OffsetFetchResponse.OffsetFetchResponseTopic.OffsetFetchResponsePartition


async def find_coordinator(gw: Any, session: Session, request: Any) -> Any:
    """The live broker ``crc32(key) mod n`` of those with a Kafka port, by id: every broker
    answers the same for a key (a client told two coordinators in turn would abandon its
    join half way), and spreads groups over them. Any broker could serve a group (all
    forward to the master); this only keeps each client on one."""
    keys = request.coordinator_keys if request.API_VERSION >= 4 else [request.key]
    try:
        brokers = await gw.kafka_brokers()
    except TubeqError:
        brokers = {}
    found = []
    for key in keys:
        ids = sorted(brokers)
        node = ids[zlib.crc32(key.encode()) % len(ids)] if ids else -1
        host, _, port = brokers.get(node, ":-1").rpartition(":")
        found.append((key, node, host, int(port),
                      wire.NONE if ids else wire.COORDINATOR_NOT_AVAILABLE))
    if request.API_VERSION >= 4:
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=[
            FindCoordinatorResponse.Coordinator(key=k, node_id=n, host=h, port=p, error_code=c,
                                                error_message=None)
            for k, n, h, p, c in found])
    _, node, host, port, code = found[0]
    return FindCoordinatorResponse(throttle_time_ms=0, error_code=code, error_message=None,
                                   node_id=node, host=host, port=port)


def _group_refusal(session: Session, group: str, operation: str = "consume") -> int | None:
    try:
        check_name(group, "group")
        session.access.check(operation, "group", group)
    except TubeqError as err:
        return wire.GROUP_AUTHORIZATION_FAILED if err.code == "PERMISSION_DENIED" \
            else wire.INVALID_GROUP_ID
    return None


async def _ask(gw: Any, request: mpb.KafkaGroupRequest) -> mpb.KafkaGroupResponse:
    try:
        return await gw.run(gw.master, master_pb2_grpc.MasterStub, "KafkaGroup", request)
    except TubeqError as err:
        return mpb.KafkaGroupResponse(error_code=wire.COORDINATOR_NOT_AVAILABLE,
                                      message=err.message)


async def _until_done(gw: Any, session: Session, request: mpb.KafkaGroupRequest,
                      wait_s: float) -> mpb.KafkaGroupResponse:
    """Ask until the answer is not pending (the member id the first answer gave is kept)."""
    deadline = time.monotonic() + min(wait_s, MAX_JOIN_WAIT_S)
    while True:
        if session.gone():  # the client hung up: stop joining for it (its session ends)
            return mpb.KafkaGroupResponse(error_code=wire.REBALANCE_IN_PROGRESS)
        answer = await _ask(gw, request)
        if not answer.pending:
            return answer
        if time.monotonic() > deadline:
            return mpb.KafkaGroupResponse(error_code=wire.REBALANCE_IN_PROGRESS,
                                          member_id=answer.member_id)
        request.member_id = answer.member_id or request.member_id
        request.again = True
        await asyncio.sleep(POLL_S)


async def join_group(gw: Any, session: Session, request: Any) -> Any:
    refused = _group_refusal(session, request.group_id)
    if refused is not None:
        return _join_answer(mpb.KafkaGroupResponse(error_code=refused), request)
    rebalance_ms = request.rebalance_timeout_ms if request.API_VERSION >= 1 \
        else request.session_timeout_ms
    answer = await _until_done(gw, session, mpb.KafkaGroupRequest(
        op="join", group=request.group_id, member_id=request.member_id,
        client_id=(request.header.client_id or "")[:255], client_host=session.peer,
        protocol_type=request.protocol_type,
        protocols=[mpb.KafkaGroupProtocol(name=p.name, metadata=p.metadata)
                   for p in request.protocols],
        session_timeout_ms=max(0, request.session_timeout_ms),
        rebalance_timeout_ms=max(0, rebalance_ms)), max(rebalance_ms, 1000) / 1000 + 5)
    return _join_answer(answer, request)


def _join_answer(answer: mpb.KafkaGroupResponse, request: Any) -> Any:
    return JoinGroupResponse(
        throttle_time_ms=0, error_code=answer.error_code,
        generation_id=answer.generation if not answer.error_code else -1,
        protocol_type=request.protocol_type, protocol_name=answer.protocol or None,
        leader=answer.leader, skip_assignment=False, member_id=answer.member_id,
        members=[JoinGroupResponse.JoinGroupResponseMember(
            member_id=m.name, group_instance_id=None, metadata=m.metadata)
            for m in answer.members])


async def sync_group(gw: Any, session: Session, request: Any) -> Any:
    refused = _group_refusal(session, request.group_id)
    if refused is not None:
        answer = mpb.KafkaGroupResponse(error_code=refused)
    else:
        answer = await _until_done(gw, session, mpb.KafkaGroupRequest(
            op="sync", group=request.group_id, member_id=request.member_id,
            generation=request.generation_id,
            protocols=[mpb.KafkaGroupProtocol(name=a.member_id, metadata=a.assignment)
                       for a in request.assignments]), MAX_JOIN_WAIT_S)
    return SyncGroupResponse(throttle_time_ms=0, error_code=answer.error_code,
                             protocol_type=getattr(request, "protocol_type", None),
                             protocol_name=answer.protocol or None,
                             assignment=answer.assignment)


async def heartbeat(gw: Any, session: Session, request: Any) -> Any:
    refused = _group_refusal(session, request.group_id)
    if refused is not None:
        return HeartbeatResponse(throttle_time_ms=0, error_code=refused)
    answer = await _ask(gw, mpb.KafkaGroupRequest(op="heartbeat", group=request.group_id,
                                                  member_id=request.member_id,
                                                  generation=request.generation_id))
    return HeartbeatResponse(throttle_time_ms=0, error_code=answer.error_code)


async def leave_group(gw: Any, session: Session, request: Any) -> Any:
    ids = [m.member_id for m in request.members] if request.API_VERSION >= 3 \
        else [request.member_id]
    refused = _group_refusal(session, request.group_id)
    code = refused
    if refused is None:
        code = (await _ask(gw, mpb.KafkaGroupRequest(op="leave", group=request.group_id,
                                                     leaving=ids))).error_code
    return LeaveGroupResponse(throttle_time_ms=0, error_code=code, members=[
        LeaveGroupResponse.MemberResponse(member_id=m, group_instance_id=None, error_code=code)
        for m in ids])


async def offset_commit(gw: Any, session: Session, request: Any) -> Any:
    group = request.group_id
    member = getattr(request, "member_id", "") or ""
    generation = getattr(request, "generation_id_or_member_epoch", -1)
    code = _group_refusal(session, group)
    fencing = 0
    if code is None:
        answer = await _ask(gw, mpb.KafkaGroupRequest(op="check", group=group, member_id=member,
                                                      generation=generation))
        code, fencing = answer.error_code or None, answer.fencing_generation
    topics = []
    for t in request.topics:
        codes = {p.partition_index: code for p in t.partitions}
        if code is None:
            codes = await _commit_topic(gw, session, group, member, fencing, t)
        topics.append(OffsetCommitResponse.OffsetCommitResponseTopic(name=t.name, partitions=[
            CommitPartition(partition_index=p, error_code=c or wire.NONE)
            for p, c in codes.items()]))
    return OffsetCommitResponse(throttle_time_ms=0, topics=topics)


async def _commit_topic(gw: Any, session: Session, group: str, member: str, fencing: int,
                        topic: Any) -> dict[int, int | None]:
    codes: dict[int, int | None] = {p.partition_index: None for p in topic.partitions}
    try:
        check_name(topic.name, "topic")
        session.access.check("consume", "topic", topic.name)
        leaders = await gw.leaders(topic.name)
    except TubeqError as err:
        return dict.fromkeys(codes, wire.kafka_code(err.code))
    by_leader: dict[str, list[Any]] = defaultdict(list)
    for p in topic.partitions:
        address = leaders.get(p.partition_index)
        if address is None:
            codes[p.partition_index] = wire.UNKNOWN_TOPIC_OR_PARTITION
        else:
            by_leader[address].append(p)
    for address, parts in by_leader.items():
        req = pb.CommitOffsetsRequest(
            group=group, topic=topic.name, member_id=member, generation=fencing,
            offsets=[pb.OffsetCommit(partition=p.partition_index, offset=p.committed_offset,
                                     metadata=(p.committed_metadata or "").encode()[:4096])
                     for p in parts])
        try:
            await gw.run(gw.peer, address, "CommitOffsets", req)
        except TubeqError as err:
            codes.update({p.partition_index: wire.kafka_code(err.code) for p in parts})
    return codes


async def offset_fetch(gw: Any, session: Session, request: Any) -> Any:
    group = request.group_id
    code = _group_refusal(session, group)
    topics = []
    for t in request.topics or ():
        parts = await _fetch_topic(gw, session, group, t, code)
        topics.append(OffsetFetchResponse.OffsetFetchResponseTopic(name=t.name,
                                                                   partitions=parts))
    return OffsetFetchResponse(throttle_time_ms=0, topics=topics, error_code=code or wire.NONE)


async def _fetch_topic(gw: Any, session: Session, group: str, topic: Any,
                       code: int | None) -> list[Any]:
    found: dict[int, tuple[int, str, int]] = {
        p: (-1, "", code or wire.NONE) for p in topic.partition_indexes}
    if code is None:
        try:
            check_name(topic.name, "topic")
            session.access.check("consume", "topic", topic.name)
            leaders = await gw.leaders(topic.name)
            by_leader: dict[str, list[int]] = defaultdict(list)
            for p in topic.partition_indexes:
                if p in leaders:
                    by_leader[leaders[p]].append(p)
                else:
                    found[p] = (-1, "", wire.UNKNOWN_TOPIC_OR_PARTITION)
            for address, parts in by_leader.items():
                res = await gw.run(gw.peer, address, "FetchOffsets", pb.FetchOffsetsRequest(
                    group=group, topic=topic.name, partitions=parts))
                for o in res.offsets:
                    found[o.partition] = (o.offset, o.metadata.decode("utf-8", "replace"),
                                          wire.NONE)
        except TubeqError as err:
            found = {p: (-1, "", wire.kafka_code(err.code)) for p in found}
    return [FetchPartition(partition_index=p, committed_offset=off, committed_leader_epoch=-1,
                           metadata=meta, error_code=c)
            for p, (off, meta, c) in found.items()]


async def list_groups(gw: Any, session: Session, request: Any) -> Any:
    """The live Kafka-managed groups the client may describe (tubeq-managed groups are
    tubeq's: ``tubeq group list``)."""
    answer = await _ask(gw, mpb.KafkaGroupRequest(op="list"))
    states = set(getattr(request, "states_filter", None) or ())
    listed = [g for g in answer.groups
              if session.access.allowed("describe", "group", g.group)
              and (not states or g.state in states)]
    return ListGroupsResponse(
        throttle_time_ms=0, error_code=answer.error_code,
        groups=[ListGroupsResponse.ListedGroup(group_id=g.group, protocol_type=g.protocol_type,
                                               group_state=g.state, group_type="classic")
                for g in listed])


async def describe_groups(gw: Any, session: Session, request: Any) -> Any:
    out = []
    for group in request.groups:
        code = _group_refusal(session, group, "describe")
        answer = mpb.KafkaGroupResponse(group=group, state="Dead")
        if code is None:
            answer = await _ask(gw, mpb.KafkaGroupRequest(op="describe", group=group))
            code = answer.error_code
        Member = DescribeGroupsResponse.DescribedGroup.DescribedGroupMember
        out.append(DescribeGroupsResponse.DescribedGroup(
            error_code=code or wire.NONE, error_message=None, group_id=group,
            group_state=answer.state, protocol_type=answer.protocol_type,
            protocol_data=answer.protocol, authorized_operations=None,
            members=[Member(member_id=m.member_id, group_instance_id=None,
                            client_id=m.client_id, client_host=m.client_host,
                            member_metadata=m.metadata, member_assignment=m.assignment)
                     for m in answer.described]))
    return DescribeGroupsResponse(throttle_time_ms=0, groups=out)
