"""Kafka's transactions on the Kafka port, on tubeq's coordinator (the active master:
master/transactions.py, docs/transactions.md).

Each call is the master's own transaction call made *as the client's principal* (its token
from SASL), so the master checks ``write`` on the transactional_id, ``produce`` on the topics
and ``consume`` on the group, as for tubeq's transactional producer:
``InitProducerId`` (with a transactional.id), ``AddPartitionsToTxn``, ``AddOffsetsToTxn``,
``TxnOffsetCommit`` (the group's offsets join the transaction: the coordinator's commit
markers commit them on the partitions' leaders, an abort drops them) and ``EndTxn``. Kafka's
clients below EndTxn v5 know no epoch bump at the end of a transaction (KIP-890 part 2), so
their ends keep the epoch (``EndTxnRequest.keep_epoch``) and their sequences go on.
"""
from __future__ import annotations

from typing import Any

from kafka.protocol.producer import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    EndTxnResponse,
    InitProducerIdResponse,
    TxnOffsetCommitResponse,
)

from broker.kafka import wire
from broker.kafka.session import Session
from lib.errors import TubeqError
from lib.proto import master_pb2 as mpb
from lib.proto import master_pb2_grpc

CONCURRENT_TRANSACTIONS = 51
_TXN_CODES = {"PRODUCER_FENCED": wire.PRODUCER_FENCED,
              "CONCURRENT_TRANSACTIONS": CONCURRENT_TRANSACTIONS,
              "INVALID_TXN_STATE": wire.INVALID_TXN_STATE,
              "UNKNOWN_TRANSACTIONAL_ID": 49,  # INVALID_PRODUCER_ID_MAPPING
              "PERMISSION_DENIED": wire.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
              "UNAVAILABLE": wire.COORDINATOR_NOT_AVAILABLE,
              "TIMED_OUT": wire.COORDINATOR_NOT_AVAILABLE,
              "INVALID_NAME": wire.INVALID_REQUEST,
              "INVALID_ARGUMENT": wire.INVALID_REQUEST}


def _code(err: TubeqError, fenced: int = wire.PRODUCER_FENCED) -> int:
    if err.code == "PRODUCER_FENCED":
        return fenced
    return _TXN_CODES.get(err.code) or wire.kafka_code(err.code)


async def _master(gw: Any, session: Session, method: str, request: Any) -> Any:
    return await gw.run(gw.master, master_pb2_grpc.MasterStub, method, request, session.token)


async def init_transactional(gw: Any, session: Session, request: Any) -> Any:
    """InitProducerId with a transactional.id: a new instance fences the old one."""
    try:
        res = await _master(gw, session, "InitProducerId", mpb.InitProducerIdRequest(
            client_id="kafka", transactional_id=request.transactional_id,
            transaction_timeout_ms=max(0, request.transaction_timeout_ms)))
    except TubeqError as err:
        return InitProducerIdResponse(error_code=_code(err), producer_id=-1, producer_epoch=-1,
                                      throttle_time_ms=0)
    return InitProducerIdResponse(error_code=wire.NONE, producer_id=res.producer_id,
                                  producer_epoch=res.producer_epoch, throttle_time_ms=0)


async def add_partitions(gw: Any, session: Session, request: Any) -> Any:
    topics = request.v3_and_below_topics or []
    code = wire.NONE
    try:
        await _master(gw, session, "AddPartitionsToTxn", mpb.AddPartitionsToTxnRequest(
            transactional_id=request.v3_and_below_transactional_id,
            producer_id=request.v3_and_below_producer_id,
            producer_epoch=request.v3_and_below_producer_epoch,
            partitions=[mpb.TxnTopicPartition(topic=t.name, partition=p)
                        for t in topics for p in t.partitions]))
    except TubeqError as err:
        code = wire.TOPIC_AUTHORIZATION_FAILED if err.code == "PERMISSION_DENIED" and \
            "transactional_id" not in err.message else _code(err, wire.INVALID_PRODUCER_EPOCH)
    Topic = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
    return AddPartitionsToTxnResponse(throttle_time_ms=0, results_by_topic_v3_and_below=[
        Topic(name=t.name, results_by_partition=[
            Topic.AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=code)
            for p in t.partitions]) for t in topics])


async def add_offsets(gw: Any, session: Session, request: Any) -> Any:
    """The group joins the transaction; its offsets come with TxnOffsetCommit."""
    code = await _offsets(gw, session, request.transactional_id, request.producer_id,
                          request.producer_epoch, request.group_id, [])
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=code)


async def txn_offset_commit(gw: Any, session: Session, request: Any) -> Any:
    offsets = [mpb.TxnOffset(topic=t.name, partition=p.partition_index,
                             offset=p.committed_offset)
               for t in request.topics for p in t.partitions]
    code = await _offsets(gw, session, request.transactional_id, request.producer_id,
                          request.producer_epoch, request.group_id, offsets)
    Topic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
    return TxnOffsetCommitResponse(throttle_time_ms=0, topics=[
        Topic(name=t.name, partitions=[
            Topic.TxnOffsetCommitResponsePartition(partition_index=p.partition_index,
                                                   error_code=code)
            for p in t.partitions]) for t in request.topics])


async def _offsets(gw: Any, session: Session, tid: str, producer_id: int, epoch: int,
                   group: str, offsets: list[mpb.TxnOffset]) -> int:
    try:
        await _master(gw, session, "AddOffsetsToTxn", mpb.AddOffsetsToTxnRequest(
            transactional_id=tid, producer_id=producer_id, producer_epoch=epoch, group=group,
            offsets=offsets))
    except TubeqError as err:
        if err.code == "PERMISSION_DENIED" and "group" in err.message:
            return wire.GROUP_AUTHORIZATION_FAILED
        return _code(err, wire.INVALID_PRODUCER_EPOCH)
    return wire.NONE


async def end_txn(gw: Any, session: Session, request: Any) -> Any:
    try:
        await _master(gw, session, "EndTxn", mpb.EndTxnRequest(
            transactional_id=request.transactional_id, producer_id=request.producer_id,
            producer_epoch=request.producer_epoch, commit=request.committed, keep_epoch=True))
    except TubeqError as err:
        return EndTxnResponse(throttle_time_ms=0, error_code=_code(err,
                                                                    wire.INVALID_PRODUCER_EPOCH))
    return EndTxnResponse(throttle_time_ms=0, error_code=wire.NONE)
