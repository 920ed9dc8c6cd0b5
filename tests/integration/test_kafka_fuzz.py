"""Fuzz the Kafka port (hypothesis) as the gRPC handlers are fuzzed: valid requests of every
served API, mutated (bytes flipped, cut short, lengthened, integers set to extremes), random
bodies under every served API and version, and random bytes. Whatever arrives, the broker
answers or closes that one connection; it never logs an internal error, never dies, and
serves a real client afterwards. The cluster runs with auth "none" so that every request
reaches its handler (SASL refusals are test_kafka_security.py's)."""
from __future__ import annotations

import socket
import struct

import pytest
from confluent_kafka import Consumer as CkConsumer
from confluent_kafka import Producer as CkProducer
from confluent_kafka import TopicPartition as CkTp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import (
    FetchRequest,
    JoinGroupRequest,
    ListOffsetsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.kafka import gateway
from lib.admin import AdminClient
from tests.cluster import Cluster

pytestmark = pytest.mark.slow
TOPIC = "fz"


def _batch() -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    for i in range(3):
        builder.append(i, 1_700_000_000_000, b"k", b"value-%d" % i, [])
    return bytes(builder.build())


def _templates() -> list[bytes]:
    """Valid requests (header included, no size prefix) of the APIs with the most to parse."""
    out = []
    produce = ProduceRequest[9](transactional_id=None, acks=1, timeout_ms=1000, topic_data=[
        ProduceRequest[9].TopicProduceData(name=TOPIC, partition_data=[
            ProduceRequest[9].TopicProduceData.PartitionProduceData(index=0,
                                                                    records=_batch())])])
    fetch = FetchRequest[11](replica_id=-1, max_wait_ms=50, min_bytes=1, max_bytes=1 << 20,
                             isolation_level=0, session_id=0, session_epoch=-1, topics=[
        FetchRequest[11].FetchTopic(topic=TOPIC, partitions=[
            FetchRequest[11].FetchTopic.FetchPartition(
                partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")
    metadata = MetadataRequest[9](topics=[MetadataRequest[9].MetadataRequestTopic(name=TOPIC)],
                                  allow_auto_topic_creation=False)
    offsets = ListOffsetsRequest[5](replica_id=-1, isolation_level=0, topics=[
        ListOffsetsRequest[5].ListOffsetsTopic(name=TOPIC, partitions=[
            ListOffsetsRequest[5].ListOffsetsTopic.ListOffsetsPartition(
                partition_index=0, current_leader_epoch=-1, timestamp=-1)])])
    join = JoinGroupRequest[5](group_id="fz-group", session_timeout_ms=6000,
                               rebalance_timeout_ms=1000, member_id="", group_instance_id=None,
                               protocol_type="consumer", protocols=[
        JoinGroupRequest[5].JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01")])
    commit = OffsetCommitRequest[7](group_id="fz-group", generation_id_or_member_epoch=-1,
                                    member_id="", group_instance_id=None, topics=[
        OffsetCommitRequest[7].OffsetCommitRequestTopic(name=TOPIC, partitions=[
            OffsetCommitRequest[7].OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                committed_metadata="")])])
    fetch_offsets = OffsetFetchRequest[7](group_id="fz-group", topics=[
        OffsetFetchRequest[7].OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0])],
        require_stable=False)
    for request in (produce, fetch, metadata, offsets, join, commit, fetch_offsets):
        request.with_header(correlation_id=1, client_id="fuzz")
        out.append(bytes(request.encode(header=True)))
    return out


TEMPLATES = _templates()


@pytest.fixture(scope="module")
def fuzz_cluster(tmp_path_factory):
    cluster = Cluster(tmp_path_factory.mktemp("kafka-fuzz"), master_args=["--auth", "none"],
                      broker_args=["--auth", "none", "--kafka-port", "0"])
    try:
        cluster.start(1)
        with AdminClient(cluster.master_addresses) as admin:
            admin.create_topic(TOPIC, partitions=1)
        yield cluster
    finally:
        cluster.stop_all()


def _send(cluster: Cluster, payload: bytes, prefix: bytes | None = None) -> None:
    """One connection: the framed payload, then its answer or the connection closed (an
    answer, a refusal, a closed connection: all fine; a request that is neither, e.g. a
    size prefix promising more than was sent, is dropped after a short wait)."""
    host, port = cluster.brokers[1].info["kafka"].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall((struct.pack(">i", len(payload)) if prefix is None else prefix) + payload)
        s.settimeout(3)
        try:
            head = s.recv(4)
            if len(head) == 4:
                left = struct.unpack(">i", head)[0]
                while left > 0:
                    chunk = s.recv(min(left, 65536))
                    if not chunk:
                        break
                    left -= len(chunk)
        except (TimeoutError, ConnectionResetError):
            pass


def _mutated(template: bytes, flips: list[tuple[int, int]], cut: int | None,
             extra: bytes) -> bytes:
    out = bytearray(template)
    for at, value in flips:
        out[8 + at % max(1, len(out) - 8)] = value  # the header's api key and version kept
    if cut is not None:
        del out[8 + cut % max(1, len(out) - 8):]
    return bytes(out) + extra


SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


@SETTINGS
@given(template=st.sampled_from(TEMPLATES),
       flips=st.lists(st.tuples(st.integers(0, 4096), st.sampled_from([0, 1, 0x7F, 0x80, 0xFF])),
                      max_size=6),
       cut=st.none() | st.integers(0, 4096), extra=st.binary(max_size=16))
def test_mutated_valid_requests(fuzz_cluster, template, flips, cut, extra):
    _send(fuzz_cluster, _mutated(template, flips, cut, extra))


@SETTINGS
@given(api=st.sampled_from(sorted(gateway.wire.SERVED)), version=st.integers(-1, 20),
       body=st.binary(max_size=200))
def test_random_bodies_under_every_served_api(fuzz_cluster, api, version, body):
    _send(fuzz_cluster, struct.pack(">hhih", api, version, 7, 4) + b"fuzz" + body)


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=64), prefix=st.none() | st.binary(min_size=4, max_size=4))
def test_random_bytes(fuzz_cluster, raw, prefix):
    _send(fuzz_cluster, raw, prefix)


def test_after_the_fuzz_the_broker_serves_and_logged_no_internal_error(fuzz_cluster):
    address = fuzz_cluster.brokers[1].info["kafka"]
    producer = CkProducer({"bootstrap.servers": address})
    producer.produce(TOPIC, b"after the fuzz", partition=0)
    assert producer.flush(30) == 0
    consumer = CkConsumer({"bootstrap.servers": address, "group.id": "after"})
    consumer.assign([CkTp(TOPIC, 0, 0)])
    seen = []
    for _ in range(40):
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            seen.append(m.value())
            if m.value() == b"after the fuzz":
                break
    consumer.close()
    assert b"after the fuzz" in seen
    assert fuzz_cluster.brokers[1].alive()
    log = (fuzz_cluster.brokers[1].data_dir / "log.txt").read_text()
    for bug in ("kafka.connection_failed", "kafka.produce_failed", "Traceback"):
        assert bug not in log, bug
