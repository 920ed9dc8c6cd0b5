"""Kafka ``Produce``: each partition's record batches become tubeq batches on the same path as a
gRPC ProduceMany entry (``DataPlane.produce``: on the loop when the append cannot wait, else
in the executor), with ``acks`` mapped as: 0 no answer, 1 once the leader stored it (the
topic's durability decides what stored means, as for tubeq's producer), -1 (all) once every
in-sync replica holds it. The batch keeps the Kafka producer's id, epoch and sequence, so the
store's deduplication answers a retried batch with its first offsets.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from kafka.protocol.producer import ProduceResponse

from broker.data import WouldBlock
from broker.kafka import wire
from broker.kafka.batches import read_batches
from broker.kafka.session import Session
from lib.delay import DELAY_TOPIC
from lib.errors import InvalidName, TubeqError
from lib.names import check_name
from lib.produce_wire import ProduceView
from lib.records import MAX_RECORDS_PER_BATCH, BatchView

log = logging.getLogger(__name__)
MAX_ACKS_WAIT_S = 30.0
PartitionAnswer = ProduceResponse.TopicProduceResponse.PartitionProduceResponse


async def produce(gw: Any, session: Session, request: Any) -> Any:
    """Every partition's batches appended (each answered on its own); with a byte-rate quota
    the answer waits out its throttle, as the gRPC port's does (the connection reads nothing
    meanwhile: Kafka's muted channel)."""
    acks = request.acks
    budget = max(0.0, min(request.timeout_ms / 1000, MAX_ACKS_WAIT_S))
    refused = quota_refusal(gw, session, "produce")
    topics, size = [], 0
    for t in request.topic_data:
        answers = []
        for p in t.partition_data:
            size += len(p.records or b"")
            if refused is not None:
                code, base, message = wire.THROTTLING_QUOTA_EXCEEDED, -1, refused
            elif acks not in (0, 1, -1):
                code, base, message = wire.INVALID_REQUIRED_ACKS, -1, f"acks={acks}"
            else:
                code, base, message = await _partition(gw, session, t.name, p.index,
                                                       p.records or b"", acks, budget)
            answers.append(PartitionAnswer(index=p.index, error_code=code, base_offset=base,
                                           log_append_time_ms=-1, log_start_offset=-1,
                                           record_errors=[], error_message=message))
        topics.append(ProduceResponse.TopicProduceResponse(name=t.name,
                                                           partition_responses=answers))
    await throttle(gw, session, "produce", size, budget)
    if acks == 0:
        return None
    return ProduceResponse(responses=topics, throttle_time_ms=0)


def quota_refusal(gw: Any, session: Session, direction: str) -> str | None:
    """The message of a quota too far in debt (the client did not wait as told), else None."""
    if not gw.quotas.active:
        return None
    try:
        gw.quotas.admit(direction, session.access.quota_principal)
    except TubeqError as err:
        return err.message[:1000]
    return None


async def throttle(gw: Any, session: Session, direction: str, nbytes: int,
                   limit_s: float) -> None:
    """Wait out what ``nbytes`` cost the principal's quotas (at most ``limit_s``)."""
    if gw.quotas.active:
        wait_ms = gw.quotas.charge(direction, session.access.quota_principal, "", nbytes)
        if wait_ms:
            await asyncio.sleep(min(wait_ms / 1000, limit_s))


async def _partition(gw: Any, session: Session, topic: str, partition: int, records: bytes,
                     acks: int, budget: float) -> tuple[int, int, str | None]:
    """(error code, base offset, message) of one partition's records."""
    try:
        check_name(topic, "topic")
        if topic == DELAY_TOPIC:
            raise InvalidName(f"{DELAY_TOPIC} is internal: produce with a delay through "
                              "tubeq's client (docs/delayed.md)")
        session.access.check("produce", "topic", topic)
        base = -1
        limits = gw.topics.store_for(topic, partition).config
        for batch in read_batches(records, MAX_RECORDS_PER_BATCH):
            view = batch.view(limits.max_message_bytes, limits.max_batch_bytes)
            raw = view.frames if view is not None else memoryview(batch.tubeq())
            first = await _append(gw, ProduceView(topic, partition, raw, acks == -1, 0),
                                  budget, view)
            base = first if base < 0 else base
        return wire.NONE, base, None
    except TubeqError as err:
        return wire.kafka_code(err.code), -1, err.message[:1000]
    except Exception as exc:  # noqa: BLE001 - the partition's answer, never the connection's
        log.error("kafka.produce_failed", exc_info=exc)
        return wire.UNKNOWN_SERVER_ERROR, -1, f"internal broker error: {exc!r}"[:1000]


async def _append(gw: Any, req: ProduceView, budget: float,
                  view: BatchView | None = None) -> int:
    """Append one tubeq batch (``view``: already checked); its base offset once ``acks``
    is met."""
    if req.acks_all:
        gw.replication.check_acks_all(req.topic, req.partition)
    try:
        response = gw.data.produce(req, wait=False, view=view)
    except WouldBlock as later:
        response = await gw.run(gw.data.produce, req, True, later.view)
    if req.acks_all:
        await gw.replication.replicated(req.topic, req.partition, response.last_offset + 1,
                                        budget)
    return response.base_offset
