"""Regression tests of the Robustness issue, against real processes on 127.0.0.1.

A hostile or buggy client must not cost other producers acknowledged data (a batch whose frames
are broken under a valid batch CRC), must not cut a broker off its masters (a forged term), and
must get a clear error, not a transport failure, for unbounded input (a 10,000-character name).
A frame damaged on disk reaches a consumer as an error naming where it is and how to skip it.
"""
from __future__ import annotations

import os
import struct
import time

import pytest

from lib import PullConsumer, TopicPartition, errors
from lib.auth.settings import CLUSTER_SECRET_ENV, cluster_header
from lib.proto import admin_pb2, broker_pb2_grpc
from lib.proto import broker_pb2 as pb
from lib.records import Record, batch_crc, batch_head, encode_frame
from lib.rpc import channel, invoke
from tests.integration.test_broker_cluster import Harness, read_all

# One master and one broker for the file: every test's topics are on that broker, and a test
# that kills or stops it starts it again.
pytestmark = pytest.mark.shared_cluster(brokers=1)


@pytest.fixture
def one_broker(cluster):
    harness = Harness(cluster)
    yield cluster, harness
    harness.close()


def poisoned_batch(value: bytes) -> bytes:
    """A batch with a valid batch CRC whose second frame's bytes disagree with its CRC."""
    frames = [encode_frame(Record(b"ok-" + value, timestamp=1)),
              bytearray(encode_frame(Record(b"bad-" + value, timestamp=1)))]
    frames[1][-1] ^= 0xFF
    body = b"".join(bytes(f) for f in frames)
    return batch_head(body, [len(f) for f in frames], [0, 0], [1, 1]) + body


def test_a_poisoned_batch_is_refused_and_a_crash_keeps_the_other_producers_records(one_broker):
    """Regression: the broker stored such a batch, and recovery after a SIGKILL cut the shared
    data log at it: every sync record appended after it, on any partition, was lost."""
    cluster, h = one_broker
    h.create("shared", partitions=2, durability="sync", stores=1)
    stub = h.stub("shared", 0)
    acked: list[bytes] = []
    refused: list[str] = []
    for i in range(60):
        h.produce("shared", 1, [b"b-%d" % i])
        acked.append(b"b-%d" % i)
        if i % 10 == 5:
            with pytest.raises(errors.CorruptRecord, match="CRC") as info:
                invoke(stub.Produce, pb.ProduceRequest(
                    topic="shared", partition=0, batch=poisoned_batch(b"%d" % i)), 10)
            refused.append(str(info.value))
            h.produce("shared", 0, [b"a-%d" % i])
    assert len(refused) == 6 and "frame 1 of the batch" in refused[0]
    broker = cluster.brokers[1]
    broker.kill()
    broker.start()
    h.wait_hosted("shared", 1)
    assert read_all(h, "shared", 1) == acked
    assert read_all(h, "shared", 0) == [b"a-%d" % i for i in range(5, 60, 10)]
    assert "store.recovery_damage" not in broker.log_tail(400)


def test_a_forged_term_in_reset_offsets_cannot_cut_a_broker_off_its_masters(one_broker):
    """Regression: ResetOffsets raised the broker's term watermark to the caller's term, so
    with term=2**62 the broker ignored every real master answer and never hosted new topics.
    (Only the cluster credential may call it: the forger here holds the cluster secret.)"""
    cluster, h = one_broker
    h.create("before", partitions=1)
    h.produce("before", 0, [b"x"])
    with channel(h.address("before", 0)) as plain:
        invoke(broker_pb2_grpc.BrokerStub(plain).ResetOffsets, pb.ResetOffsetsRequest(
            group="g", topic="before", term=2**62,
            offsets=[pb.OffsetCommit(partition=0, offset=1)]), 10,
            cluster_header(os.environ[CLUSTER_SECRET_ENV]))
    h.create("after", partitions=1)  # hosted only if the broker still heeds its master
    h.produce("after", 0, [b"y"])
    assert read_all(h, "after", 0) == [b"y"]
    assert "stale_term_ignored" not in cluster.brokers[1].log_tail(400)


def test_an_overlong_topic_name_gets_invalid_name_not_a_transport_error(one_broker):
    """Regression: the error echoed the whole name, twice, past gRPC's metadata limit, and the
    caller got RESOURCE_EXHAUSTED "Stream removed"."""
    _cluster, h = one_broker
    h.create("named", partitions=1)
    stub = h.stub("named", 0)
    with pytest.raises(errors.InvalidName, match="10000 characters") as info:
        invoke(stub.Produce, pb.ProduceRequest(topic="n" * 10_000, partition=0,
                                               batch=b"x"), 10)
    assert len(info.value.message) < 1200
    with pytest.raises(errors.InvalidName):
        h.admin("DescribeTopic", admin_pb2.DescribeTopicRequest(topic="m" * 10_000))
    assert h.produce("named", 0, [b"still serving"]).base_offset == 0


def test_a_frame_damaged_on_disk_reaches_the_consumer_as_a_named_error_it_can_skip(one_broker):
    cluster, h = one_broker
    h.create("rot", partitions=1)
    h.produce("rot", 0, [b"value-%03d" % i for i in range(10)])
    broker = cluster.brokers[1]
    broker.stop()  # a clean stop: the checkpoint covers the damage, recovery will not scan it
    [segment] = (broker.data_dir / "topics" / "rot").glob("*/data/*.log")
    raw = bytearray(segment.read_bytes())
    at = raw.find(b"value-004")
    raw[at + 8] ^= 0x01
    segment.write_bytes(bytes(raw))
    broker.start()
    h.wait_hosted("rot", 0)
    consumer = PullConsumer(cluster.master_addresses, auto_offset_reset="earliest")
    tp = TopicPartition("rot", 0)
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got = _poll_until(consumer, 4)
        assert [r.value for r in got] == [b"value-%03d" % i for i in range(4)]
        with pytest.raises(errors.CorruptRecord, match=r"rot\[0\] offset 4 .*seek") as info:
            _poll_until(consumer, 1)
        assert info.value.offset == 4
        consumer.seek(tp, info.value.offset + 1)
        rest = _poll_until(consumer, 5)
        assert [r.offset for r in rest] == list(range(5, 10))
    finally:
        consumer.close()


def _poll_until(consumer: PullConsumer, n: int, timeout: float = 20.0) -> list[Record]:
    out: list[Record] = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        out += consumer.poll(max_records=n - len(out), timeout=0.5)
    assert len(out) == n, f"got {len(out)} of {n} records"
    return out


def test_the_poisoned_batch_has_a_valid_batch_crc():
    """Else the poisoned-batch test would prove only the batch CRC check."""
    batch = poisoned_batch(b"x")
    crc = struct.unpack_from("<I", batch, 12)[0]
    assert batch_crc(memoryview(batch)) == crc
