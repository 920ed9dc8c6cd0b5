"""Byte-rate quotas on a real master and broker: a producer, a pull consumer in a group and a
push consumer each try to go faster than their quota, and are slowed down to it (within ±10 %,
measured past the first seconds, once the burst is spent) without a single failure; a raw
client that ignores the throttle is refused with an error naming the quota; the CLI sets,
lists and removes quotas."""
from __future__ import annotations

import json
import threading
import time

import grpc
import numpy as np
import pytest

from lib.admin import AdminClient
from lib.auth.client import Credentials
from lib.consumer.pull import PullConsumer
from lib.consumer.push import PushConsumer
from lib.errors import InvalidArgument
from lib.producer.producer import Producer
from lib.proto import broker_pb2 as bpb
from lib.proto import broker_pb2_grpc
from lib.records import Record, encode_batch
from lib.rpc import channel
from tests.integration.test_cli import tubeq
from tests.integration.test_consumer_common import wait_for

ALICE = Credentials("alice", "alice-quota-password")
QUOTA = 1 << 20  # bytes/s
VALUE = b"q" * 4096
RUN_S, SETTLE_S = 9.0, 3.0  # measured over [SETTLE_S, RUN_S): the 1 s burst is spent by then


@pytest.fixture
def metered(cluster_factory):
    cluster = cluster_factory(1)
    masters = cluster.master_addresses
    root = AdminClient(masters, credentials=cluster.admin_credentials())
    root.add_user(ALICE.user, ALICE.password)
    root.create_topic("metered", partitions=2)
    for operation, resource, name in (("produce", "topic", "metered"),
                                      ("consume", "topic", "metered"),
                                      ("consume", "group", "readers")):
        root.add_acl("user:alice", operation, resource, name)
    try:
        yield cluster, masters, root
    finally:
        root.close()


def rate_between(events: list[tuple[float, int]], start: float, end: float) -> float:
    """Bytes per second of the (time, bytes) events within [start, end)."""
    return sum(n for t, n in events if start <= t < end) / (end - start)


def slope_between(events: list[tuple[float, int]], start: float, end: float) -> float:
    """Bytes per second of the (time, bytes) events within [start, end), as the slope of their
    running total. A push stream at this quota gets one chunk of a stream's whole credit (a
    topic's largest message, 1 MiB) a second: counted in a window, one chunk more or less that
    the machine's jitter moves across an edge is a sixth of the rate; the slope is not moved."""
    inside = [(t, n) for t, n in events if start <= t < end]
    if len(inside) < 2:
        return 0.0
    times = np.array([t for t, _ in inside])
    totals = np.cumsum([n for _, n in inside])
    return float(np.polyfit(times, totals, 1)[0])


def raw_produce(cluster, token: str, nbytes: int) -> bpb.ProduceResponse:
    """One Produce of ``nbytes`` as alice, from a client that waits for nothing."""
    with channel(cluster.broker_process(1).address, None) as ch:
        stub = broker_pb2_grpc.BrokerStub(ch)
        batch = encode_batch([Record(value=b"r" * 8192)] * (nbytes // 8192))
        return stub.Produce(bpb.ProduceRequest(topic="metered", partition=0, batch=batch),
                            metadata=(("authorization", f"Bearer {token}"),), timeout=10)


def throttled(cluster, token: str, nbytes: int) -> bool:
    """Whether a raw produce of ``nbytes`` comes back throttled (False while the broker lacks
    the ACLs or the quota)."""
    try:
        return raw_produce(cluster, token, nbytes).throttle_ms > 0
    except grpc.RpcError:
        return False


def preload(masters: str, admin: Credentials, nbytes: int) -> None:
    with Producer(masters, credentials=admin) as producer:  # the admin has no quota
        producer.send_batch("metered", [VALUE] * (nbytes // len(VALUE))).result(60)


def test_a_producer_pushing_past_its_quota_is_slowed_to_it_and_never_fails(metered):
    cluster, masters, root = metered
    root.set_quota("user:alice", produce_bytes_per_s=QUOTA)
    token = root.login(ALICE.user, ALICE.password).token
    # The broker has the quota once a burst gets a throttle back (a heartbeat or two).
    wait_for(lambda: throttled(cluster, token, 1536 << 10), 20, "the quota on the broker")
    time.sleep(2)  # let the probe's debt be paid back

    acked: list[tuple[float, int]] = []
    start = time.monotonic()

    def on_ack(future) -> None:
        if future.exception() is None:
            acked.append((time.monotonic() - start, len(VALUE)))

    with Producer(masters, credentials=ALICE, batch_bytes=64 << 10, buffer_bytes=2 << 20,
                  max_block_ms=30_000) as producer:
        while time.monotonic() - start < RUN_S:
            producer.send("metered", VALUE).add_done_callback(on_ack)
        sent = producer.metrics()
        producer.flush(60)
        failed = producer.metrics()["records_failed"]
    assert failed == 0
    rate = rate_between(acked, SETTLE_S, RUN_S)
    print(f"measured {rate / QUOTA:.3f} of the quota")
    assert QUOTA * 0.9 <= rate <= QUOTA * 1.1, (rate, sent)


def test_a_group_quota_slows_its_pull_consumer_down_to_it(metered):
    cluster, masters, root = metered
    preload(masters, cluster.admin_credentials(), 16 << 20)
    root.set_quota("group:readers", consume_bytes_per_s=QUOTA)
    # alice has no quota of her own: out of the group she reads at full speed, which also
    # shows the broker has the group's quota before the measured run starts
    with PullConsumer(masters, credentials=ALICE, auto_offset_reset="earliest",
                      fetch_max_bytes=64 << 10) as free:
        free.subscribe("metered")
        got = 0
        deadline = time.monotonic() + 30
        while got < 8 << 20 and time.monotonic() < deadline:
            got += sum(len(r.value) for r in free.poll(timeout=0.5))
        assert got >= 8 << 20
    wait_for(lambda: any(q.entity == "group:readers" for q in root.list_quotas()), 5)
    time.sleep(2.5)  # a heartbeat brings the quota to the broker

    polled: list[tuple[float, int]] = []
    with PullConsumer(masters, credentials=ALICE, group="readers",
                      auto_offset_reset="earliest", fetch_max_bytes=64 << 10) as consumer:
        consumer.subscribe("metered")
        start = time.monotonic()
        while time.monotonic() - start < RUN_S:
            records = consumer.poll(timeout=0.2)
            polled.append((time.monotonic() - start, sum(len(r.value) for r in records)))
    rate = rate_between(polled, SETTLE_S, RUN_S)
    print(f"measured {rate / QUOTA:.3f} of the quota")
    assert QUOTA * 0.9 <= rate <= QUOTA * 1.1, rate


def test_the_broker_paces_a_push_consumer_to_its_principal_quota(metered):
    cluster, masters, root = metered
    preload(masters, cluster.admin_credentials(), 16 << 20)
    root.set_quota("user:alice", consume_bytes_per_s=QUOTA)
    token = root.login(ALICE.user, ALICE.password).token
    with channel(cluster.broker_process(1).address, None) as ch:  # probe: a throttled fetch
        stub = broker_pb2_grpc.BrokerStub(ch)
        request = bpb.FetchRequest(topic="metered", max_total_bytes=3 << 20, partitions=[
            bpb.PartitionFetch(partition=p, offset=0, max_bytes=3 << 20) for p in (0, 1)])

        def fetch_throttled() -> bool:  # False while the broker lacks the ACLs or the quota
            try:
                return stub.Fetch(request, metadata=(("authorization", f"Bearer {token}"),),
                                  timeout=10).throttle_ms > 0
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.PERMISSION_DENIED:
                    raise
                return False

        wait_for(fetch_throttled, 20, "the ACLs and the quota on the broker")
    time.sleep(4)  # let the probe's debt be paid back

    handled: list[tuple[float, int]] = []
    lock = threading.Lock()
    start = time.monotonic()

    def handler(record) -> None:
        with lock:
            handled.append((time.monotonic() - start, len(record.value)))

    with PushConsumer(masters, credentials=ALICE, group="readers",
                      auto_offset_reset="earliest", max_inflight_bytes=256 << 10) as consumer:
        consumer.subscribe("metered", handler=handler)
        # The stream starts after the group's hand-off (a heartbeat and more), and its first
        # second spends the bucket's burst: measure from then on, as long as the others.
        wait_for(lambda: bool(handled), 30, "the first pushed record")
        first = handled[0][0]
        time.sleep(first + RUN_S - (time.monotonic() - start))
    rate = slope_between(handled, first + SETTLE_S, first + RUN_S)
    print(f"measured {rate / QUOTA:.3f} of the quota")
    assert QUOTA * 0.9 <= rate <= QUOTA * 1.1, rate


def paced_rate(call) -> float:
    """Bytes/s that back-to-back calls of ``call()`` (which returns its bytes) get through,
    measured as the quota tests measure."""
    done: list[tuple[float, int]] = []
    start = time.monotonic()
    while time.monotonic() - start < RUN_S:
        nbytes = call()
        done.append((time.monotonic() - start, nbytes))
    return rate_between(done, SETTLE_S, RUN_S)


@pytest.mark.parametrize("direction", ["produce", "consume"])
def test_the_broker_paces_sink_staging_and_queries_that_know_no_throttle(metered, direction):
    """SinkStage (the Spark sink) and QueryMessages answer with no throttle field: the broker
    holds the answer until the caller's debt is paid, as it paces push streams."""
    cluster, masters, root = metered
    piece = encode_batch([Record(value=b"s" * 8192)] * 32)  # 256 KiB
    if direction == "consume":
        preload(masters, cluster.admin_credentials(), 24 << 20)
    root.set_quota("user:alice", **{f"{direction}_bytes_per_s": QUOTA})
    token = root.login(ALICE.user, ALICE.password).token
    auth = (("authorization", f"Bearer {token}"),)
    pieces = iter(range(1 << 30))
    offsets = [0, 0]  # next offset per partition: queries take turns
    with channel(cluster.broker_process(1).address, None) as ch:
        stub = broker_pb2_grpc.BrokerStub(ch)

        def stage() -> int:
            stub.SinkStage(bpb.SinkStageRequest(
                sink="paced", batch_id=1, task="t", piece=next(pieces), topic="metered",
                partition=0, batch=piece), metadata=auth, timeout=10)
            return len(piece)

        def query() -> int:
            partition = next(pieces) % 2
            start = offsets[partition]
            got = stub.QueryMessages(bpb.QueryMessagesRequest(
                topic="metered", partition=partition, start_offset=start,
                end_offset=start + 64, max_bytes=256 << 10), metadata=auth, timeout=10)
            offsets[partition] = got.next_offset
            return len(got.frames)

        call = stage if direction == "produce" else query

        def slowed() -> bool:  # False too while the broker lacks alice's ACLs
            started = time.monotonic()
            try:
                call()
            except grpc.RpcError:
                return False
            return time.monotonic() - started > 0.1

        wait_for(slowed, 20, "the quota on the broker")
        time.sleep(2)  # let the probe's debt be paid back
        rate = paced_rate(call)
    print(f"measured {rate / QUOTA:.3f} of the quota")
    assert QUOTA * 0.9 <= rate <= QUOTA * 1.1, rate


def test_a_client_ignoring_the_throttle_is_refused_naming_the_quota(metered):
    cluster, masters, root = metered
    root.set_quota("user:*", produce_bytes_per_s=64 << 10)
    token = root.login(ALICE.user, ALICE.password).token
    wait_for(lambda: throttled(cluster, token, 256 << 10), 20, "the quota on the broker")
    with pytest.raises(grpc.RpcError) as refused:
        for _ in range(20):  # 2 MiB more at once: far past 30 s of debt at 64 KiB/s
            raw_produce(cluster, token, 256 << 10)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "produce quota of user:* (64 KiB/s) exceeded by user:alice" in \
        refused.value.details()
    trailers = dict(refused.value.trailing_metadata())
    assert trailers["tubeq-error-code"] == "QUOTA_EXCEEDED"
    assert json.loads(trailers["tubeq-error-details"])["retry_after_ms"] > 0
    root.remove_quota("user:*")  # and alice goes through again
    with pytest.raises(InvalidArgument, match="no quota for 'user:\\*'"):
        root.remove_quota("user:*")
    wait_for(lambda: _produces(cluster, token), 20, "the quota gone from the broker")


def _produces(cluster, token: str) -> bool:
    try:
        return raw_produce(cluster, token, 8192).throttle_ms == 0
    except grpc.RpcError:
        return False


def test_quotas_with_the_cli(metered):
    _, masters, _ = metered
    made = tubeq(masters, "quota", "set", "user:etl", "--produce", "5MiB", "--consume", "10MB")
    assert made.returncode == 0, made.stderr
    assert b"quota set: user:etl: produce 5 MiB/s, consume 10000000 B/s" in made.stdout
    assert json.loads(tubeq(masters, "quota", "list", "--json").stdout) == [
        {"entity": "user:etl", "produce_bytes_per_s": 5 << 20,
         "consume_bytes_per_s": 10_000_000}]
    assert tubeq(masters, "quota", "list").stdout.split()[3:] == [
        b"user:etl", b"5", b"MiB/s", b"10000000", b"B/s"]
    bad = tubeq(masters, "quota", "set", "group:g", "--produce", "1MiB")
    assert bad.returncode == 1 and b"a group quota limits consume only" in bad.stderr
    fast = tubeq(masters, "quota", "set", "user:etl", "--produce", "lots")
    assert fast.returncode == 2 and b"not a number of bytes per second" in fast.stderr
    assert tubeq(masters, "quota", "remove", "user:etl").returncode == 0
    assert json.loads(tubeq(masters, "quota", "list", "--json").stdout) == []
