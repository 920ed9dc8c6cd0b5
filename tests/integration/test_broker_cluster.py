"""Brokers in a real cluster (1 master + 2 brokers, processes on 127.0.0.1), raw gRPC stubs."""
from __future__ import annotations

import queue
import socket
import threading
import time

import grpc
import numpy as np
import pytest

from lib import errors
from lib.proto import admin_pb2, admin_pb2_grpc, broker_pb2_grpc, master_pb2
from lib.proto import broker_pb2 as pb
from lib.records import Record, decode_frames, encode_batch
from lib.rpc import invoke

pytestmark = pytest.mark.shared_cluster


class Harness:
    """Admin calls through the master, data calls straight to the owning broker."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.master = cluster.master_client(timeout=15)
        self.channels: dict[str, grpc.Channel] = {}

    def admin(self, method, request):
        return self.master.call(admin_pb2_grpc.AdminStub, method, request)

    def create(self, topic, partitions=2, **settings):
        self.admin("CreateTopic", admin_pb2.CreateTopicRequest(
            topic=topic, settings=master_pb2.TopicSettings(partitions=partitions, **settings)))
        for p in range(partitions):
            self.wait_hosted(topic, p)

    def address(self, topic, partition):
        desc = self.admin("DescribeTopic", admin_pb2.DescribeTopicRequest(topic=topic))
        return next(p.address for p in desc.partitions if p.partition == partition)

    def stub(self, topic, partition):
        addr = self.address(topic, partition)
        if addr not in self.channels:
            self.channels[addr] = self.cluster.channel(addr)
        return broker_pb2_grpc.BrokerStub(self.channels[addr])

    def wait_hosted(self, topic, partition, timeout=20.0):
        """Until the owning broker has learnt the partition from a heartbeat."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return invoke(self.stub(topic, partition).ListOffsets, pb.ListOffsetsRequest(
                    topic=topic, partitions=[partition]), 5)
            except (errors.UnknownTopic, errors.PartitionNotHosted, errors.Unavailable,
                    StopIteration):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def produce(self, topic, partition, values, tag=None):
        batch = encode_batch([Record(v, tag=tag) for v in values])
        return invoke(self.stub(topic, partition).Produce, pb.ProduceRequest(
            topic=topic, partition=partition, batch=batch), 10)

    def fetch(self, topic, partition, offset=0, **kw):
        req = pb.FetchRequest(topic=topic, partitions=[
            pb.PartitionFetch(partition=partition, offset=offset, max_bytes=8 << 20)], **kw)
        return invoke(self.stub(topic, partition).Fetch, req, 40).partitions[0]

    def close(self):
        for ch in self.channels.values():
            ch.close()
        self.master.close()


def values_of(pd):
    return [r.value for r in decode_frames(pd.frames, np.frombuffer(pd.offsets, "<i8"))]


def read_all(h, topic, partition, **kw):
    return [value for value, _, _ in read_frames(h, topic, partition, **kw)]


def read_frames(h, topic, partition, **kw):
    """(value, offset, frame bytes) of every record, over as many fetches as it takes: a read
    stops where the store's flushed part ends, so one fetch may hold only part of the tail."""
    out, offset = [], 0
    while True:
        pd = h.fetch(topic, partition, offset, **kw)
        if pd.error_code:
            raise AssertionError(pd.error_message)
        offsets = np.frombuffer(pd.offsets, "<i8")
        out += zip(values_of(pd), offsets.tolist(),
                   np.frombuffer(pd.sizes, "<u4").tolist(), strict=True)
        if pd.next_offset >= pd.latest:
            return out
        offset = pd.next_offset


@pytest.fixture
def h(cluster):
    harness = Harness(cluster)
    yield harness
    harness.close()


def test_produce_fetch_round_trip_over_both_brokers(h):
    h.create("orders", partitions=4)
    owners = {h.address("orders", p) for p in range(4)}
    assert len(owners) == 2  # placement spread the partitions over both brokers
    for p in range(4):
        assert h.produce("orders", p, [b"p%d-%d" % (p, i) for i in range(50)]).last_offset == 49
    for p in range(4):
        assert read_all(h, "orders", p) == [b"p%d-%d" % (p, i) for i in range(50)]


def test_long_poll_wakes_on_produce(h):
    h.create("lp", partitions=1)
    threading.Timer(0.5, h.produce, ("lp", 0, [b"wake"])).start()
    started = time.monotonic()
    pd = h.fetch("lp", 0, max_wait_ms=20_000)
    assert values_of(pd) == [b"wake"]
    assert time.monotonic() - started < 10


def test_tag_filter_returns_only_matching_frames_and_less_data(h):
    h.create("tags", partitions=1)
    for i in range(20):
        h.produce("tags", 0, [b"x" * 200], tag="red" if i % 5 == 0 else "blue")
    everything = read_frames(h, "tags", 0)
    red = read_frames(h, "tags", 0, tags=["red"])
    assert [value for value, _, _ in red] == [b"x" * 200] * 4
    assert [offset for _, offset, _ in red] == [0, 5, 10, 15]
    assert sum(size for _, _, size in red) * 4 < sum(size for _, _, size in everything)


def test_push_stream_never_exceeds_credit(h):
    h.create("push", partitions=1)
    h.produce("push", 0, [b"m%d" % i for i in range(25)])
    requests: queue.Queue = queue.Queue()
    requests.put(pb.SubscribeRequest(start=pb.SubscribeStart(
        topic="push", partitions=[pb.PartitionFetch(partition=0, offset=0)])))
    call = h.stub("push", 0).Subscribe(iter(requests.get, None), timeout=60)
    got: queue.Queue = queue.Queue()

    def read():
        try:
            for r in call:
                got.put(r)
        except grpc.RpcError:
            pass  # cancelled at the end of the test

    threading.Thread(target=read, daemon=True).start()
    received = []
    try:
        for _ in range(5):
            requests.put(pb.SubscribeRequest(credit=pb.Credit(messages=4)))
            batch = []
            while len(batch) < 4:
                batch += values_of(got.get(timeout=10).data)
            assert len(batch) == 4  # exactly the credit, never more
            with pytest.raises(queue.Empty):
                got.get(timeout=0.2)
            received += batch
    finally:
        call.cancel()
        requests.put(None)
    assert received == [b"m%d" % i for i in range(20)]


def test_commit_fencing_by_generation(h):
    h.create("fence", partitions=1)
    h.produce("fence", 0, [b"a", b"b", b"c"])
    stub = h.stub("fence", 0)

    def fetch_offsets(member, gen):
        return invoke(stub.FetchOffsets, pb.FetchOffsetsRequest(
            group="g1", topic="fence", partitions=[0], member_id=member, generation=gen), 5)

    def commit(member, gen, offset):
        return invoke(stub.CommitOffsets, pb.CommitOffsetsRequest(
            group="g1", topic="fence", member_id=member, generation=gen,
            offsets=[pb.OffsetCommit(partition=0, offset=offset)]), 5)

    fetch_offsets("m1", 1)
    commit("m1", 1, 1)
    assert fetch_offsets("m2", 2).offsets[0].offset == 1  # gen 2 claims
    with pytest.raises(errors.Fenced):
        commit("m1", 1, 3)
    commit("m2", 2, 2)
    assert fetch_offsets("", -1).offsets[0].offset == 2


def test_bad_input_gets_clear_errors_and_brokers_keep_serving(h):
    h.create("bad", partitions=1, max_message_bytes=1024)
    stub = h.stub("bad", 0)
    produce = stub.Produce
    with pytest.raises(errors.UnknownTopic, match="nope"):
        invoke(produce, pb.ProduceRequest(topic="nope", partition=0, batch=b"x"), 5)
    with pytest.raises(errors.RecordTooLarge, match="limit 1024"):
        h.produce("bad", 0, [b"z" * 5000])
    corrupt = bytearray(encode_batch([Record(b"hello")]))
    corrupt[50] ^= 1
    with pytest.raises(errors.CorruptRecord):
        invoke(produce, pb.ProduceRequest(topic="bad", partition=0, batch=bytes(corrupt)), 5)
    with pytest.raises(errors.InvalidName):
        invoke(produce, pb.ProduceRequest(topic="a/../b", partition=0, batch=b"x"), 5)
    pd = h.fetch("bad", 0, offset=-5)
    assert pd.error_code == "OFFSET_OUT_OF_RANGE" and "earliest 0" in pd.error_message
    with pytest.raises(errors.OffsetOutOfRange):
        invoke(stub.CommitOffsets, pb.CommitOffsetsRequest(
            group="g", topic="bad", offsets=[pb.OffsetCommit(partition=0, offset=-1)]), 5)
    assert h.produce("bad", 0, [b"ok"]).base_offset == 0
    assert values_of(h.fetch("bad", 0)) == [b"ok"]


def test_sync_topic_keeps_every_acked_batch_across_sigkill(h, cluster):
    h.create("durable", partitions=1, durability="sync")
    owner = h.address("durable", 0)
    proc = next(b for b in cluster.brokers.values() if b.address == owner)
    acked: list[bytes] = []
    stop = threading.Event()

    def produce_until_killed():
        i = 0
        while not stop.is_set():
            try:
                h.produce("durable", 0, [b"v%d" % i])
            except errors.TubeqError:
                return
            acked.append(b"v%d" % i)
            i += 1

    t = threading.Thread(target=produce_until_killed)
    t.start()
    deadline = time.monotonic() + 20
    while len(acked) < 50 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.kill()
    stop.set()
    t.join(15)
    assert len(acked) >= 50
    proc.start()
    h.wait_hosted("durable", 0)
    got = read_all(h, "durable", 0)
    assert got[:len(acked)] == acked  # every acked batch, in order, nothing before it lost


def test_deleted_topic_data_is_dropped_by_the_broker(h, cluster):
    h.create("gone", partitions=1)
    h.produce("gone", 0, [b"a"])
    owner = h.address("gone", 0)
    proc = next(b for b in cluster.brokers.values() if b.address == owner)
    topic_dir = proc.data_dir / "topics" / "gone"
    assert topic_dir.is_dir()
    h.admin("DeleteTopic", admin_pb2.DeleteTopicRequest(topic="gone"))
    deadline = time.monotonic() + 20
    while topic_dir.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not topic_dir.exists()
    ch = h.cluster.channel(owner)
    try:
        with pytest.raises(errors.UnknownTopic):
            invoke(broker_pb2_grpc.BrokerStub(ch).Fetch, pb.FetchRequest(
                topic="gone", partitions=[pb.PartitionFetch(partition=0)]), 5)
    finally:
        ch.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_broker_reregisters_after_master_restart_and_keeps_serving(cluster_factory):
    cluster = cluster_factory(brokers=1, master_args=["--port", str(_free_port())])
    h = Harness(cluster)
    try:
        h.create("survive", partitions=1)
        h.produce("survive", 0, [b"before"])
        broker = cluster.brokers[1]
        master = cluster.masters[0]
        master.stop()
        master.start()  # same data dir and port: epoch (term) grows, live state is empty
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            brokers = h.admin("ListBrokers", admin_pb2.ListBrokersRequest()).brokers
            if any(b.broker_id == 1 and b.alive for b in brokers):
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"broker did not re-register:\n{broker.log_tail()}")
        assert "master.reregister" in broker.log_tail(200) or \
            broker.log_tail(200).count("master.registered") >= 2
        h.produce("survive", 0, [b"after"])
        assert read_all(h, "survive", 0) == [b"before", b"after"]
    finally:
        h.close()
