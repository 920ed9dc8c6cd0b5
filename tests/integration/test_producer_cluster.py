"""Producer against a real cluster: placement, offsets, async sends, errors, broker restart."""
from __future__ import annotations

import threading
import time
import zlib

import grpc
import numpy as np
import pytest

from lib.admin import AdminClient
from lib.auth.client import ClientAuth, auth_for
from lib.errors import InvalidName, RecordTooLarge, UnknownPartition, UnknownTopic
from lib.producer.producer import Producer
from lib.proto import broker_pb2, broker_pb2_grpc
from lib.records import FLAG_VALUE_ZLIB, Record, decode_frames
from lib.rpc import channel, invoke
from lib.wire_errors import error_class

pytestmark = pytest.mark.shared_cluster


def create(cluster, topic: str, **settings):
    with AdminClient(cluster.master_addresses) as admin:
        return admin.create_topic(topic, **settings)


def fetch_partition(masters: str, address: str, topic: str, partition: int) -> list[Record]:
    """Every record of one partition, read with raw Fetch calls from its broker (logged in
    with the environment's credentials: the session's admin)."""
    ch = grpc.intercept_channel(channel(address), ClientAuth(auth_for(masters)))
    try:
        stub = broker_pb2_grpc.BrokerStub(ch)
        out: list[Record] = []
        offset = 0
        while True:
            req = broker_pb2.FetchRequest(topic=topic, partitions=[
                broker_pb2.PartitionFetch(partition=partition, offset=offset,
                                          max_bytes=1 << 20)], max_wait_ms=0)
            (data,) = invoke(stub.Fetch, req, 10).partitions
            if data.error_code:  # the typed error, so callers can wait out a stale route
                raise error_class(data.error_code)(data.error_message, topic=topic,
                                                   partition=partition)
            offsets = np.frombuffer(data.offsets, "<i8")
            out += decode_frames(data.frames, offsets, partition, topic)
            if data.next_offset >= data.latest or not len(offsets):
                return out
            offset = data.next_offset
    finally:
        ch.close()


def fetch_topic(cluster, topic: str) -> dict[int, list[Record]]:
    with AdminClient(cluster.master_addresses) as admin:
        info = admin.describe_topic(topic)
    return {p.partition: fetch_partition(cluster.master_addresses, p.address, topic, p.partition)
            for p in info.partitions}


def test_keyed_records_land_on_stable_partitions_with_dense_offsets(cluster):
    create(cluster, "keyed", partitions=4)
    with Producer(cluster.master_addresses) as producer:
        futures = [producer.send("keyed", f"v{i}".encode(), key=f"k{i % 40}".encode())
                   for i in range(2000)]
        producer.flush(timeout=30)
        metas = [f.result(0) for f in futures]
    by_partition = fetch_topic(cluster, "keyed")
    assert sum(len(r) for r in by_partition.values()) == 2000
    for partition, records in by_partition.items():
        assert [r.offset for r in records] == list(range(len(records)))
        assert all(zlib.crc32(r.key) % 4 == partition for r in records)
    for i, meta in enumerate(metas):
        assert meta.topic == "keyed" and meta.partition == zlib.crc32(f"k{i % 40}".encode()) % 4
        assert by_partition[meta.partition][meta.offset].value == f"v{i}".encode()
    per_key = {}
    for meta, i in zip(metas, range(2000), strict=True):
        per_key.setdefault(i % 40, []).append(meta.offset)
    assert all(offs == sorted(offs) for offs in per_key.values())  # per-key order kept


def test_async_sends_are_all_acknowledged_after_flush_and_spread_without_keys(cluster):
    create(cluster, "spread", partitions=3)
    with Producer(cluster.master_addresses, linger_ms=20, batch_bytes=4096) as producer:
        futures = [producer.send("spread", b"x" * 100) for _ in range(3000)]
        producer.flush(timeout=30)
        assert all(f.done() and f.exception() is None for f in futures)
        counts = np.bincount([f.result().partition for f in futures], minlength=3)
    # sticky round robin: one batch (4 KiB here) per partition in turn
    assert all(900 <= c <= 1100 for c in counts), counts
    stored = {p: len(r) for p, r in fetch_topic(cluster, "spread").items()}
    assert stored == dict(enumerate(counts.tolist()))


def test_plain_and_other_records_sent_to_one_partition_are_stored_in_send_order(cluster):
    """send() keeps plain values unencoded until their batch is sealed, in batches of their
    own: a keyed, tagged or partition-pinned record between them must still land between."""
    create(cluster, "mixed", partitions=1)
    sent = []
    with Producer(cluster.master_addresses, linger_ms=50, batch_bytes=2048) as producer:
        for i in range(600):
            value = b"%d" % i
            kind = i % 7
            if kind == 3:
                producer.send("mixed", value, key=b"k")
            elif kind == 5:
                producer.send("mixed", value, tag="t")
            elif kind == 6:
                producer.send("mixed", value, partition=0)
            else:
                producer.send("mixed", value)
            sent.append(value)
        producer.flush(timeout=30)
        assert producer.metrics()["records_acked"] == 600
    stored = fetch_topic(cluster, "mixed")[0]
    assert [r.value for r in stored] == sent
    assert [r.offset for r in stored] == list(range(600))
    assert [r.tag for r in stored][5::7] == ["t"] * len(sent[5::7])


def test_plain_sends_carry_their_send_time_in_milliseconds(cluster):
    """send()'s lean path takes nanoseconds and the batch turns them into milliseconds when
    sealed: metadata and stored records say the same int, inside the sending window."""
    create(cluster, "clock", partitions=1)
    with Producer(cluster.master_addresses, linger_ms=50) as producer:
        before = time.time_ns() // 1_000_000
        futures = [producer.send("clock", b"v%d" % i) for i in range(300)]
        after = time.time_ns() // 1_000_000
        metas = [f.result(30) for f in futures]
    stamps = [m.timestamp for m in metas]
    assert all(type(t) is int for t in stamps) and before <= min(stamps) <= max(stamps) <= after
    assert stamps == sorted(stamps)
    assert [r.timestamp for r in fetch_topic(cluster, "clock")[0]] == stamps


def test_batches_sent_one_at_a_time_start_no_thread_each(cluster, monkeypatch):
    """grpc's .future() started a completion thread whenever a call began on an idle channel,
    a thread per batch here (each start stalled the sender); the call threads stay."""
    create(cluster, "idle", partitions=1)
    with Producer(cluster.master_addresses, linger_ms=0) as producer:
        producer.send("idle", b"warm").result(30)
        started = []
        real_start = threading.Thread.start
        monkeypatch.setattr(threading.Thread, "start",
                            lambda self: (started.append(self.name), real_start(self))[1])
        for i in range(20):
            assert producer.send("idle", b"v%d" % i).result(30).offset == i + 1
        monkeypatch.undo()
    assert started == []


def test_send_sync_returns_metadata_and_tag_headers_and_zlib_values_round_trip(cluster):
    create(cluster, "rich", partitions=1)
    value = b"compress me " * 200
    with Producer(cluster.master_addresses, compression="zlib") as producer:
        meta = producer.send_sync("rich", value, key=b"k", tag="red",
                                  headers={"h": b"1"}, timestamp=1234, timeout=30)
    assert (meta.partition, meta.offset, meta.timestamp) == (0, 0, 1234)
    (rec,) = fetch_topic(cluster, "rich")[0]
    assert (rec.value, rec.key, rec.tag, rec.headers, rec.timestamp) == \
        (value, b"k", "red", {"h": b"1"}, 1234)
    assert rec.flags & FLAG_VALUE_ZLIB


def test_message_over_the_topic_limit_raises_record_too_large_naming_size_and_limit(cluster):
    create(cluster, "small", partitions=1, max_message_bytes=1000)
    with Producer(cluster.master_addresses) as producer:
        with pytest.raises(RecordTooLarge, match="1000") as info:
            producer.send("small", b"x" * 2000)
        assert info.value.limit == 1000 and info.value.size > 2000
        assert producer.send_sync("small", b"x" * 100, timeout=30).offset == 0
        with pytest.raises(RecordTooLarge, match="1000"):  # a known topic: send's inline path
            producer.send("small", b"x" * 2000)
        assert producer.send("small", b"x" * 100).result(30).offset == 1


def test_unknown_topic_bad_name_and_missing_partition_raise_at_send(cluster):
    create(cluster, "one", partitions=1)
    with Producer(cluster.master_addresses) as producer:
        with pytest.raises(UnknownTopic, match="nope"):
            producer.send("nope", b"v")
        with pytest.raises(InvalidName):
            producer.send("bad/name", b"v")
        with pytest.raises(UnknownPartition, match="1 partitions"):
            producer.send("one", b"v", partition=5)


def test_records_sent_to_a_deleted_topic_fail_their_futures(cluster):
    create(cluster, "gone", partitions=1)
    with Producer(cluster.master_addresses, linger_ms=0) as producer:
        producer.send_sync("gone", b"first", timeout=30)
        with AdminClient(cluster.master_addresses) as admin:
            admin.delete_topic("gone")
        deadline, acked = time.monotonic() + 30, 1
        while True:  # the broker drops the topic at its next heartbeat
            try:
                producer.send("gone", b"later").result(30)
                acked += 1
            except UnknownTopic:
                break
            assert time.monotonic() < deadline, "records to a deleted topic kept succeeding"
            time.sleep(0.2)
        counts = producer.metrics()
        assert (counts["records_acked"], counts["records_failed"]) == (acked, 1)
    # the producer's routes were invalidated: a fresh send fails at once
    with Producer(cluster.master_addresses) as producer, pytest.raises(UnknownTopic):
        producer.send("gone", b"v")


def test_retries_survive_a_broker_restart_with_no_loss(cluster):
    create(cluster, "durable", partitions=4, durability="sync")
    sent, failures, stop = [], [], threading.Event()
    with Producer(cluster.master_addresses, retries=60, retry_backoff_ms=50,
                  request_timeout_ms=5000, idempotent=True, linger_ms=2) as producer:

        def produce() -> None:
            i = 0
            while not stop.is_set():
                value = f"m{i}".encode()
                fut = producer.send("durable", value)
                fut.add_done_callback(lambda f: f.exception() and failures.append(f.exception()))
                sent.append(value)
                i += 1
                time.sleep(0.0005)

        thread = threading.Thread(target=produce)
        thread.start()
        try:
            time.sleep(0.5)
            cluster.brokers[1].stop()
            time.sleep(0.5)
            cluster.brokers[1].start()
            time.sleep(1.0)
        finally:
            stop.set()
            thread.join(10)
        producer.flush(timeout=60)
    assert not failures, failures[:3]
    stored = [r.value for recs in fetch_topic(cluster, "durable").values() for r in recs]
    assert set(stored) == set(sent)
    assert len(sent) > 100


def test_send_sync_sends_from_the_caller_keeps_order_and_retries_through_a_restart(cluster):
    """send_sync on an idle partition is one RPC from the calling thread; mixed with async
    sends it keeps the thread's order, and its failure is retried by the sender thread."""
    create(cluster, "synced", partitions=1)
    with AdminClient(cluster.master_addresses) as admin:
        broker = cluster.brokers[admin.describe_topic("synced").partitions[0].broker_id]
    with Producer(cluster.master_addresses, linger_ms=0, idempotent=True, retries=100,
                  retry_backoff_ms=50, request_timeout_ms=3000) as producer:
        sent = []
        for i in range(300):
            value = f"m{i}".encode()
            if i % 10 >= 5:  # five sends, then five send_syncs (from the second on: idle)
                producer.send("synced", value)
            else:
                assert producer.send_sync("synced", value, timeout=30).partition == 0
            sent.append(value)
        direct = producer.metrics()["records_sent_direct"]
        assert 100 <= direct <= 150
        broker.stop()
        restart = threading.Timer(1.0, broker.start)
        restart.start()
        meta = producer.send_sync("synced", b"through-restart", timeout=60)
        restart.join(30)
        sent.append(b"through-restart")
        assert producer.metrics()["records_sent_direct"] == direct  # the sender retried it
    stored = fetch_partition(cluster.master_addresses, broker.address, "synced", 0)
    assert [r.value for r in stored] == sent
    assert stored[-1].offset == meta.offset


def test_idempotent_producer_numbers_batches_so_the_broker_accepts_them_in_order(cluster):
    create(cluster, "idem", partitions=2)
    with Producer(cluster.master_addresses, idempotent=True, batch_bytes=2048,
                  linger_ms=0) as producer:
        futures = [producer.send("idem", f"v{i}".encode() * 20) for i in range(600)]
        producer.flush(timeout=30)
        assert all(f.exception() is None for f in futures)
    stored = fetch_topic(cluster, "idem")
    assert sum(len(r) for r in stored.values()) == 600
    for records in stored.values():
        assert [r.offset for r in records] == list(range(len(records)))


def test_close_timeout_fails_unacknowledged_records_instead_of_dropping_them(cluster):
    create(cluster, "stuck", partitions=2)
    with Producer(cluster.master_addresses) as producer:
        producer.send_sync("stuck", b"ok", timeout=30)
    for broker in cluster.brokers.values():
        broker.stop()
    producer = Producer(cluster.master_addresses, retries=1000, retry_backoff_ms=50)
    futures = [producer.send("stuck", b"v") for _ in range(10)]
    start = time.monotonic()
    producer.close(timeout=1.0)
    assert time.monotonic() - start < 10
    errors = [f.exception(0) for f in futures]
    assert all(e is not None for e in errors)
    assert "closed" in str(errors[0]) or "UNAVAILABLE" in str(errors[0])
