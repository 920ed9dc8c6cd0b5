"""Kafka ``Fetch`` (long-poll) and ``ListOffsets`` over the broker's stores.

A Fetch reads every requested partition as a tubeq consumer's read does (below the high
watermark; with ``isolation_level`` read_committed below the last stable offset and without
aborted records: broker/data.py ``visible_read``), turns each partition's run of frames into
one Kafka record batch (broker/kafka/batches.py), and, while fewer than ``min_bytes`` came
back, parks on the topics' signals until data arrives or ``max_wait_ms`` passes (capped by the
broker's ``fetch_max_wait_ms``), holding no thread. Control and aborted records are left out,
so the offsets of a batch may have gaps, as after Kafka's compaction; the aborted-transaction
list is always empty for the same reason. Fetch sessions (KIP-227) are not kept: every answer
has session id 0, which tells clients to send full requests.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
from kafka.protocol.consumer import FetchResponse, ListOffsetsResponse

from broker.data import visible_read
from broker.isolation import visible_end
from broker.kafka import wire
from broker.kafka.produce import quota_refusal, throttle
from broker.kafka.refusals import refuse
from broker.kafka.session import Session
from broker.kafka.writer import frames_batch, gap_batch
from lib.errors import TubeqError
from lib.names import check_name
from lib.records.columns import checked_columns

PartitionData = FetchResponse.FetchableTopicResponse.PartitionData
ListAnswer = ListOffsetsResponse.ListOffsetsTopicResponse.ListOffsetsPartitionResponse
LATEST, EARLIEST = -1, -2
MAX_THROTTLE_S = 30.0


async def fetch(gw: Any, session: Session, request: Any) -> Any:
    refused = quota_refusal(gw, session, "consume")
    if refused is not None:
        return refuse(1, request, wire.THROTTLING_QUOTA_EXCEEDED)
    wait_s = max(0, min(request.max_wait_ms, gw.fetch_max_wait_ms)) / 1000
    deadline = time.monotonic() + wait_s
    cap = gw.fetch_max_bytes
    max_total = min(request.max_bytes, cap) if request.max_bytes > 0 else cap
    committed = request.isolation_level == 1
    signals = _signals(gw, request)
    while True:
        seen = [(s, s.version) for s in signals]
        topics, size, failed = await gw.run(_read_all, gw, session, request, max_total,
                                            committed)
        left = deadline - time.monotonic()
        if size >= max(1, request.min_bytes) or failed or left <= 0 or not seen:
            break
        waits = [asyncio.ensure_future(s.wait_async(version, left)) for s, version in seen]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
    await throttle(gw, session, "consume", size, MAX_THROTTLE_S)
    return FetchResponse(throttle_time_ms=0, error_code=wire.NONE, session_id=0,
                         responses=topics)


def _signals(gw: Any, request: Any) -> list[Any]:
    out = []
    for name in {t.topic for t in request.topics}:
        try:
            out.append(gw.topics.signal(name))
        except TubeqError:
            continue  # unknown here: its partitions answer with the error at once
    return out


def _read_all(gw: Any, session: Session, request: Any, max_total: int,
              committed: bool) -> tuple[list[Any], int, bool]:
    """Every partition's answer; the bytes read and whether any partition failed."""
    budget, failed, topics = max_total, False, []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            answer, size = _read_one(gw, session, t.topic, p.partition, p.fetch_offset,
                                     min(p.partition_max_bytes, budget), committed,
                                     first=budget == max_total)
            budget -= size
            failed = failed or answer.error_code != wire.NONE
            parts.append(answer)
        topics.append(FetchResponse.FetchableTopicResponse(topic=t.topic, partitions=parts))
    return topics, max_total - budget, failed


def _read_one(gw: Any, session: Session, topic: str, partition: int, offset: int,
              max_bytes: int, committed: bool, first: bool) -> tuple[Any, int]:
    try:
        check_name(topic, "topic")
        session.access.check("consume", "topic", topic)
        if max_bytes <= 0 and not first:
            return _empty(partition, wire.NONE), 0
        store = gw.topics.store_for(topic, partition)
        hw = gw.replication.high_watermark(topic, partition)
        reply = visible_read(store, partition, offset, hw, max(1, max_bytes),
                             committed=committed)
        if reply.error_code:
            return _empty(partition, wire.kafka_code(reply.error_code), reply), 0
        high = store.latest(partition) if hw is None else hw
        stable = visible_end(store, partition, high, True)
        records = b""
        if reply.frames:  # up to next_offset: records left out at the end are passed too
            offsets = np.frombuffer(reply.offsets, "<i8")
            sizes = np.frombuffer(reply.sizes, "<u4") if reply.sizes else None
            records = frames_batch(checked_columns(topic, partition, memoryview(reply.frames),
                                                   offsets, sizes), end=reply.next_offset)
        elif reply.next_offset > offset:  # only left-out records (markers): pass them
            records = gap_batch(offset, reply.next_offset)
        return PartitionData(partition_index=partition, error_code=wire.NONE,
                             high_watermark=high, last_stable_offset=stable,
                             log_start_offset=store.earliest(partition),
                             aborted_transactions=[] if committed else None,
                             preferred_read_replica=-1, records=records), len(reply.frames)
    except TubeqError as err:
        return _empty(partition, wire.kafka_code(err.code)), 0


def _empty(partition: int, code: int, reply: Any = None) -> Any:
    latest = reply.latest if reply is not None else -1
    return PartitionData(partition_index=partition, error_code=code, high_watermark=latest,
                         last_stable_offset=latest,
                         log_start_offset=reply.earliest if reply is not None else -1,
                         aborted_transactions=None, preferred_read_replica=-1, records=b"")


def list_offsets(gw: Any, session: Session, request: Any) -> Any:
    """Earliest (-2), latest (-1: the high watermark; for read_committed the last stable
    offset) or the first offset whose timestamp is at or after a time (-1 when none is)."""
    committed = getattr(request, "isolation_level", 0) == 1
    topics = []
    for t in request.topics:
        parts = [_list_one(gw, session, t.name, p.partition_index, p.timestamp, committed)
                 for p in t.partitions]
        topics.append(ListOffsetsResponse.ListOffsetsTopicResponse(name=t.name,
                                                                   partitions=parts))
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


def _list_one(gw: Any, session: Session, topic: str, partition: int, timestamp: int,
              committed: bool) -> Any:
    try:
        check_name(topic, "topic")
        session.access.check("consume", "topic", topic)
        store = gw.topics.store_for(topic, partition)
        hw = gw.replication.high_watermark(topic, partition)
        latest = store.latest(partition) if hw is None else hw
        if committed:
            latest = visible_end(store, partition, latest, True)
        offset, found_ts = _offset_for(store, partition, timestamp, latest)
        return ListAnswer(partition_index=partition, error_code=wire.NONE,
                          old_style_offsets=[], timestamp=found_ts, offset=offset,
                          leader_epoch=-1)
    except TubeqError as err:
        return ListAnswer(partition_index=partition, error_code=wire.kafka_code(err.code),
                          old_style_offsets=[], timestamp=-1, offset=-1, leader_epoch=-1)


def _offset_for(store: Any, partition: int, timestamp: int, latest: int) -> tuple[int, int]:
    if timestamp == LATEST:
        return latest, -1
    if timestamp == EARLIEST:
        return store.earliest(partition), -1
    if timestamp < 0:
        raise TubeqError(f"ListOffsets timestamp {timestamp}: tubeq answers -1 (latest), -2 "
                         "(earliest) or a time in ms")
    offset = store.offset_for_time(partition, timestamp)
    if offset >= latest:
        return -1, -1
    res = store.read(partition, offset, 1, max_records=1)
    stamp = int(np.frombuffer(res.frames[10:18], "<i8")[0]) if res.frames else timestamp
    return offset, stamp
