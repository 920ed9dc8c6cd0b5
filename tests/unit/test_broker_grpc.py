"""The broker servicer over real gRPC on 127.0.0.1, in this process, without a master.

The Broker object is started on port 0 and fed topics/placements through its own
TopicManager (what the master link does from heartbeat responses).
"""
from __future__ import annotations

import queue
import re
import threading
import time
import urllib.request

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from broker.config import load
from broker.server import Broker
from broker.topics import TopicSpec
from lib import errors
from lib.proto import broker_pb2 as pb
from lib.proto import broker_pb2_grpc
from lib.records import Record, decode_frames, encode_batch
from lib.records.columns import walk_sizes
from lib.rpc import channel, invoke

TOPICS = {"t": TopicSpec(partitions=3, stores=2, topic_id=1),
          "big": TopicSpec(partitions=1, max_message_bytes=1000, topic_id=2)}


@pytest.fixture
def broker(tmp_path):
    b = Broker(load(None, data_dir=str(tmp_path), broker_id=1, port=0, metrics_port=0,
                    push_idle_wait_ms=50, stop_grace_s=1.0, auth="none")).start()
    b.topics.apply(TOPICS, [("t", 0), ("t", 1), ("big", 0)])  # t/2 lives elsewhere
    yield b
    b.stop()


@pytest.fixture
def stub(broker):
    ch = channel(broker.address)
    yield broker_pb2_grpc.BrokerStub(ch)
    ch.close()


def produce(stub, values, partition=0, topic="t", tag=None, **ids):
    batch = encode_batch([Record(v, tag=tag, timestamp=1000 + i) for i, v in enumerate(values)],
                         **ids)
    return invoke(stub.Produce, pb.ProduceRequest(topic=topic, partition=partition, batch=batch),
                  5)


def values_of(pd):
    return [r.value for r in decode_frames(pd.frames, np.frombuffer(pd.offsets, "<i8"))]


def fetch(stub, offset=0, partition=0, **kw):
    req = pb.FetchRequest(topic="t", partitions=[pb.PartitionFetch(partition=partition,
                                                                   offset=offset)], **kw)
    return invoke(stub.Fetch, req, 10).partitions[0]


def fetch_all(stub, partition=0, **kw) -> list:
    """Fetches from offset 0 to the partition's end, as a consumer does: one fetch stops where
    the records in the files end and those in the memory cache begin, and the flusher moves
    that line every cache_flush_interval_ms (on a busy machine, between two of a test's
    produces), so one call need not return them all."""
    responses, offset = [], 0
    while True:
        responses.append(pd := fetch(stub, offset, partition, **kw))
        if pd.error_code or pd.next_offset >= pd.latest:
            return responses
        offset = pd.next_offset


def all_values(responses) -> list[bytes]:
    return [v for pd in responses for v in values_of(pd)]


def all_offsets(responses) -> list[int]:
    return [int(o) for pd in responses for o in np.frombuffer(pd.offsets, "<i8")]


def test_produce_then_fetch_returns_the_records_with_offsets(stub):
    r1 = produce(stub, [b"a", b"b"])
    r2 = produce(stub, [b"c"])
    assert (r1.base_offset, r1.last_offset, r2.base_offset) == (0, 1, 2)
    responses = fetch_all(stub)
    assert all_values(responses) == [b"a", b"b", b"c"]
    assert all_offsets(responses) == [0, 1, 2]
    pd = responses[-1]
    assert (pd.next_offset, pd.earliest, pd.latest, pd.error_code) == (3, 0, 3, "")
    # each frame's size from the index, so clients split the frames without walking them
    for pd in responses:
        assert np.frombuffer(pd.sizes, "<u4").tolist() == walk_sizes(memoryview(pd.frames))


def test_long_poll_wakes_on_produce(stub):
    threading.Timer(0.3, produce, (stub, [b"late"], 1)).start()
    started = time.monotonic()
    pd = fetch(stub, partition=1, max_wait_ms=10_000)
    assert values_of(pd) == [b"late"]
    assert time.monotonic() - started < 5


def test_long_poll_returns_empty_after_max_wait(stub):
    started = time.monotonic()
    pd = fetch(stub, partition=1, max_wait_ms=200)
    assert pd.frames == b"" and pd.next_offset == 0
    assert 0.15 < time.monotonic() - started < 5


def test_tag_filter_returns_only_matching_frames(stub):
    produce(stub, [b"x1", b"x2"], tag="x")
    produce(stub, [b"y1"], tag="y")
    produce(stub, [b"x3"], tag="x")
    responses = fetch_all(stub, tags=["y"])
    assert all_values(responses) == [b"y1"]
    assert all_offsets(responses) == [2]


def test_per_partition_errors_do_not_fail_the_other_partitions(stub):
    produce(stub, [b"a"])
    req = pb.FetchRequest(topic="t", partitions=[
        pb.PartitionFetch(partition=0, offset=0), pb.PartitionFetch(partition=0, offset=-1),
        pb.PartitionFetch(partition=0, offset=9), pb.PartitionFetch(partition=2, offset=0)])
    parts = invoke(stub.Fetch, req, 5).partitions
    assert values_of(parts[0]) == [b"a"]
    assert parts[1].error_code == "OFFSET_OUT_OF_RANGE" and parts[1].latest == 1
    assert "earliest 0, latest 1" in parts[2].error_message
    assert parts[3].error_code == "PARTITION_NOT_HOSTED"


def test_fetch_respects_max_total_bytes(stub):
    produce(stub, [b"v" * 1000] * 10)
    produce(stub, [b"w" * 1000] * 10, partition=1)
    req = pb.FetchRequest(topic="t", max_total_bytes=3000, partitions=[
        pb.PartitionFetch(partition=0, offset=0), pb.PartitionFetch(partition=1, offset=0)])
    parts = invoke(stub.Fetch, req, 5).partitions
    assert sum(len(p.frames) for p in parts) <= 3000
    assert len(values_of(parts[0])) == 2 and parts[1].frames == b""


@pytest.mark.parametrize("request_, error", [
    (pb.ProduceRequest(topic="nope", partition=0, batch=b"x"), errors.UnknownTopic),
    (pb.ProduceRequest(topic="t", partition=7, batch=b"x"), errors.UnknownPartition),
    (pb.ProduceRequest(topic="t", partition=2, batch=b"x"), errors.PartitionNotHosted),
    (pb.ProduceRequest(topic="t", partition=0, batch=b""), errors.InvalidArgument),
    (pb.ProduceRequest(topic="t", partition=0, batch=b"garbage" * 20), errors.CorruptRecord),
    (pb.ProduceRequest(topic="../x", partition=0, batch=b"x"), errors.InvalidName),
])
def test_bad_produce_gets_a_clear_error_and_broker_keeps_serving(stub, request_, error):
    with pytest.raises(error):
        invoke(stub.Produce, request_, 5)
    assert produce(stub, [b"still fine"]).last_offset >= 0


def test_corrupted_batch_crc_and_too_large_message_are_refused(stub):
    batch = bytearray(encode_batch([Record(b"hello")]))
    batch[-1] ^= 0xFF
    with pytest.raises(errors.CorruptRecord, match="CRC"):
        invoke(stub.Produce, pb.ProduceRequest(topic="t", partition=0, batch=bytes(batch)), 5)
    with pytest.raises(errors.RecordTooLarge, match="limit 1000") as info:
        produce(stub, [b"z" * 2000], topic="big")
    assert info.value.limit == 1000


def test_fetch_of_unknown_topic_fails_the_call(stub):
    with pytest.raises(errors.UnknownTopic):
        invoke(stub.Fetch, pb.FetchRequest(topic="nope", partitions=[pb.PartitionFetch()]), 5)
    with pytest.raises(errors.InvalidArgument, match="tag"):
        invoke(stub.Fetch, pb.FetchRequest(topic="t", tags=[""]), 5)


def test_idempotent_retry_is_acknowledged_without_a_second_append(stub):
    ids = dict(producer_id=42, producer_epoch=0, base_sequence=0)
    first = produce(stub, [b"a", b"b"], **ids)
    again = produce(stub, [b"a", b"b"], **ids)
    assert (again.base_offset, again.last_offset) == (first.base_offset, first.last_offset)
    with pytest.raises(errors.OutOfOrderSequence):
        produce(stub, [b"c"], producer_id=42, producer_epoch=0, base_sequence=5)
    assert produce(stub, [b"c"], producer_id=42, producer_epoch=0, base_sequence=2).base_offset == 2
    assert all_values(fetch_all(stub)) == [b"a", b"b", b"c"]


def _commit(stub, offset, member="", generation=-1, partition=0, group="g"):
    return invoke(stub.CommitOffsets, pb.CommitOffsetsRequest(
        group=group, topic="t", member_id=member, generation=generation,
        offsets=[pb.OffsetCommit(partition=partition, offset=offset, metadata=b"m")]), 5)


def _fetch_offsets(stub, member="", generation=-1, partitions=(0,)):
    res = invoke(stub.FetchOffsets, pb.FetchOffsetsRequest(
        group="g", topic="t", partitions=list(partitions), member_id=member,
        generation=generation), 5)
    return {o.partition: o.offset for o in res.offsets}


def test_commit_fencing_claim_by_newer_generation_refuses_older_commit(stub):
    produce(stub, [b"a", b"b", b"c"])
    assert _fetch_offsets(stub, "m1", 1) == {}
    _commit(stub, 1, "m1", 1)
    assert _fetch_offsets(stub, "m2", 2) == {0: 1}
    with pytest.raises(errors.Fenced, match="generation 2"):
        _commit(stub, 3, "m1", 1)
    _commit(stub, 2, "m2", 2)
    assert _fetch_offsets(stub) == {0: 2}


def test_commit_outside_the_partition_range_is_refused(stub):
    produce(stub, [b"a"])
    with pytest.raises(errors.OffsetOutOfRange, match=r"\[earliest 0, latest 1\]"):
        _commit(stub, 5)
    with pytest.raises(errors.OffsetOutOfRange):
        _commit(stub, -1)
    with pytest.raises(errors.InvalidName):
        _commit(stub, 0, group="bad/group")
    _commit(stub, 1)
    res = invoke(stub.FetchOffsets, pb.FetchOffsetsRequest(group="g", topic="t"), 5)
    assert [(o.partition, o.offset, o.metadata) for o in res.offsets] == [(0, 1, b"m")]


def test_reset_offsets_needs_a_current_term_and_clears_claims(broker, stub):
    produce(stub, [b"a", b"b"])
    _fetch_offsets(stub, "m1", 5)
    broker.term.observe(3)
    with pytest.raises(errors.Fenced, match="term"):
        invoke(stub.ResetOffsets, pb.ResetOffsetsRequest(
            group="g", topic="t", term=2, offsets=[pb.OffsetCommit(partition=0, offset=0)]), 5)
    invoke(stub.ResetOffsets, pb.ResetOffsetsRequest(
        group="g", topic="t", term=3, offsets=[pb.OffsetCommit(partition=0, offset=2)]), 5)
    assert _fetch_offsets(stub, "m0", 1) == {0: 2}  # claims cleared: an old gen may claim


def test_list_offsets_and_query_messages(stub):
    produce(stub, [b"a", b"b", b"c", b"d"])
    res = invoke(stub.ListOffsets, pb.ListOffsetsRequest(topic="t", timestamp_ms=1002), 5)
    got = {p.partition: (p.earliest, p.latest, p.for_time) for p in res.partitions}
    assert got == {0: (0, 4, 2), 1: (0, 0, 0)}
    pd = invoke(stub.QueryMessages, pb.QueryMessagesRequest(
        topic="t", partition=0, start_offset=1, end_offset=3), 5)
    assert values_of(pd) == [b"b", b"c"] and pd.next_offset == 3
    with pytest.raises(errors.InvalidArgument):
        invoke(stub.QueryMessages, pb.QueryMessagesRequest(
            topic="t", partition=0, start_offset=3, end_offset=1), 5)


class PushClient:
    """A raw Subscribe stream: grant credit, collect responses."""

    def __init__(self, stub, start):
        self.requests: queue.Queue = queue.Queue()
        self.requests.put(pb.SubscribeRequest(start=start))
        self.call = stub.Subscribe(iter(self.requests.get, None), timeout=30)
        self.responses: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            for res in self.call:
                self.responses.put(res)
        except grpc.RpcError as exc:
            self.responses.put(exc)

    def grant(self, messages, nbytes=0):
        self.requests.put(pb.SubscribeRequest(credit=pb.Credit(messages=messages, bytes=nbytes)))

    def take(self, timeout=5.0):
        return self.responses.get(timeout=timeout)

    def close(self):
        self.call.cancel()
        self.requests.put(None)


def test_push_stream_never_exceeds_credit(stub, broker):
    produce(stub, [b"m%d" % i for i in range(10)])
    push = PushClient(stub, pb.SubscribeStart(topic="t", partitions=[
        pb.PartitionFetch(partition=0, offset=0)]))
    try:
        push.grant(3)
        first = push.take()
        assert values_of(first.data) == [b"m0", b"m1", b"m2"]
        with pytest.raises(queue.Empty):
            push.take(timeout=0.3)  # no credit left: nothing more arrives
        push.grant(100)
        got = values_of(push.take().data)
        assert got == [b"m%d" % i for i in range(3, 10)]
        threading.Timer(0.2, produce, (stub, [b"new"])).start()
        assert values_of(push.take().data) == [b"new"]  # waits for data, then pushes
    finally:
        push.close()


def test_push_byte_credit_limits_each_response(stub):
    produce(stub, [b"v" * 100] * 10)
    push = PushClient(stub, pb.SubscribeStart(topic="t", partitions=[
        pb.PartitionFetch(partition=0, offset=0)]))
    try:
        push.grant(1000, 450)
        total = 0
        first = push.take()
        total += len(first.data.frames)
        with pytest.raises(queue.Empty):
            push.take(timeout=0.3)
        assert 0 < total <= 450
    finally:
        push.close()


def test_push_stream_reports_bad_offset_as_partition_error(stub):
    push = PushClient(stub, pb.SubscribeStart(topic="t", partitions=[
        pb.PartitionFetch(partition=0, offset=50)]))
    try:
        push.grant(10)
        res = push.take()
        assert res.data.error_code == "OFFSET_OUT_OF_RANGE"
    finally:
        push.close()


def test_push_stream_must_start_with_start(stub):
    requests = iter([pb.SubscribeRequest(credit=pb.Credit(messages=1))])
    with pytest.raises(grpc.RpcError) as info:
        list(stub.Subscribe(requests, timeout=5))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_health_and_metrics_are_served(broker, stub):
    produce(stub, [b"a"])
    ch = channel(broker.address)
    res = health_pb2_grpc.HealthStub(ch).Check(
        health_pb2.HealthCheckRequest(service="tubeq.broker.Broker"), timeout=5)
    ch.close()
    assert res.status == health_pb2.HealthCheckResponse.SERVING
    text = urllib.request.urlopen(f"http://{broker.metrics_address}/metrics", timeout=5).read()
    assert b'tubeq_broker_messages_in_total{topic="t"} 1.0' in text
    opened = re.search(rb"^tubeq_broker_segment_file_opens (\S+)$", text, re.M)
    files = re.search(rb"^tubeq_broker_segment_files_open (\S+)$", text, re.M)
    assert opened and files and float(opened.group(1)) >= float(files.group(1)) >= 2  # data, index
