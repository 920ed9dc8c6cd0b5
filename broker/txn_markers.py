"""Markers the transaction coordinator (the active master) writes into the partitions this
broker leads: a transaction's commit or abort, one control record per partition
(storage/store.py ``write_marker``; docs/transactions.md).

A marker is fsynced before it is answered whatever the topic's durability, and on a
replicated partition also held by every in-sync replica (the service waits, as for an
``acks=all`` produce): a decided transaction must not lose its marker to a crash or a
failover. A partition this broker does not lead, or a store being reconfigured, answers
with its error code and the coordinator tries again later; the other partitions of the
request are written all the same. The transaction's consumer offsets on partitions this
broker leads go to the offsets plane (broker/offsets.py ``end_txn``): committed or dropped,
no record written.
"""
from __future__ import annotations

from broker.offsets import OffsetsPlane
from broker.topics import TopicManager
from lib.errors import TubeqError
from lib.proto import broker_pb2 as pb


def sync_txn(topics: TopicManager, req: pb.SyncTxnRequest) -> pb.SyncTxnResponse:
    """A transactional producer's check before its commit (storage ``sync_txn``): per
    partition, an empty error when its open transaction holds every record acknowledged."""
    out = []
    for sp in req.partitions:
        result = pb.TxnMarkerResult(topic=req.topic, partition=sp.partition, offset=-1)
        try:
            store = topics.store_for(req.topic, sp.partition)
            store.producers.sync_txn(sp.partition, req.producer_id, req.producer_epoch,
                                     sp.records)
        except TubeqError as err:
            result.error_code, result.error_message = err.code, err.message
        out.append(result)
    return pb.SyncTxnResponse(results=out)


def write_markers(topics: TopicManager, offsets: OffsetsPlane,
                  req: pb.WriteTxnMarkersRequest
                  ) -> tuple[pb.WriteTxnMarkersResponse, list[tuple[str, int, int]]]:
    """The response, and (topic, partition, offset) of each marker written (to await its
    replication)."""
    out, written = [], []
    for tp in req.partitions:
        result = pb.TxnMarkerResult(topic=tp.topic, partition=tp.partition, offset=-1)
        try:
            store = topics.store_for(tp.topic, tp.partition)
            role = topics.role(tp.topic, tp.partition)
            epoch = role.leader_epoch if role is not None and role.replicated else 0
            offset = store.producers.write_marker(tp.partition, req.producer_id, req.producer_epoch,
                                        req.commit, leader_epoch=epoch)
        except TubeqError as err:
            result.error_code, result.error_message = err.code, err.message
        else:
            if offset is not None:
                result.offset = offset
                written.append((tp.topic, tp.partition, offset))
                topics.notify(tp.topic)  # read_committed waiters: the stable offset moved
        out.append(result)
    if req.offsets:
        out += offsets.end_txn(req.producer_id, req.commit, req.offsets)
    return pb.WriteTxnMarkersResponse(results=out), written
