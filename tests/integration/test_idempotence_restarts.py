"""An idempotent producer (the default) writing while the only copy's broker is SIGKILLed and
restarted three times: the broker's de-duplication windows come back from its files
(storage/producers.py), so a batch stored before the kill whose answer was lost is answered
with its original offsets when the producer retries it, never stored twice. On a ``sync``
topic every acknowledged record is stored once, at its acknowledged offset, in order; on an
``async`` topic none is stored twice, and what is lost is the cache blocks' tail before a
kill (docs/durability.md), which the producer's sequence reset steps over."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest

from lib import Producer
from lib.admin import AdminClient
from lib.consumer.reader import MessageReader
from lib.errors import PartitionNotHosted, TubeqError, UnknownTopic
from lib.proto import broker_pb2, broker_pb2_grpc
from lib.records import Record, encode_batch
from lib.rpc import invoke
from tests.cluster import Cluster
from tests.integration.fault_kit import wait_until

TOTAL = 50_000
PARTITIONS = 8
KILLS = 3
VALUE = b"." * 80


@dataclass
class Writes:
    """What the writer was told: record n -> (partition, offset) for each acknowledged one."""

    acked: dict[int, tuple[int, int]] = field(default_factory=dict)
    failed: list[int] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


def write(masters: str, topic: str, out: Writes) -> None:
    """Send records 0..TOTAL-1 (record n to partition n % PARTITIONS) in rounds of 500."""
    try:
        with Producer(masters, retries=10_000, retry_backoff_ms=50, request_timeout_ms=5_000,
                      linger_ms=5, batch_bytes=16 << 10) as producer:
            for first in range(0, TOTAL, 500):
                futures = [(n, producer.send(topic, b"%06d" % n + VALUE,
                                             partition=n % PARTITIONS))
                           for n in range(first, first + 500)]
                for n, future in futures:
                    try:
                        meta = future.result(120)
                        out.acked[n] = (meta.partition, meta.offset)
                    except TubeqError:
                        out.failed.append(n)
    except BaseException as exc:  # noqa: BLE001 - reported by the test
        out.error = exc
    finally:
        out.done.set()


def stored(masters: str, topic: str) -> dict[int, list[tuple[int, int]]]:
    """Record number -> every (partition, offset) holding it."""
    where: dict[int, list[tuple[int, int]]] = {}
    with MessageReader(masters) as reader:
        for p, bounds in reader.offsets(topic).items():
            offset = bounds.earliest
            while offset < bounds.latest:
                got = reader.read(topic, p, offset, bounds.latest)
                for r in got.records:
                    where.setdefault(int(r.value[:6]), []).append((p, r.offset))
                offset = got.next_offset
    return where


@pytest.fixture
def cluster(tmp_path):
    made = Cluster(tmp_path / "cluster")
    try:
        yield made.start(brokers=1)
    finally:
        made.stop_all()


def produce_raw(cluster: Cluster, topic: str, batch: bytes) -> tuple[int, int]:
    """One Produce call straight to the broker, waiting while it learns the topic."""
    def call():
        stub = broker_pb2_grpc.BrokerStub(cluster.channel(cluster.brokers[1].address))
        try:
            return invoke(stub.Produce, broker_pb2.ProduceRequest(
                topic=topic, partition=0, batch=batch), 10)
        except (UnknownTopic, PartitionNotHosted):
            return None
    got: list = []
    wait_until(lambda: got.append(call()) or got[-1] is not None, f"{topic} on the broker", 60)
    return got[-1].base_offset, got[-1].last_offset


def test_a_retry_after_a_kill_gets_the_offsets_the_batch_was_stored_at(cluster):
    """The deterministic case: acknowledged, the broker SIGKILLed, the same batch sent
    again (its answer lost, as far as the producer knows)."""
    with AdminClient(cluster.master_addresses) as admin:
        admin.create_topic("idem-retry", partitions=1, durability="sync")

    def batch(seq: int) -> bytes:
        return encode_batch([Record(b"r%d" % (seq + i), timestamp=1) for i in range(3)],
                            producer_id=77, producer_epoch=0, base_sequence=seq)
    assert produce_raw(cluster, "idem-retry", batch(0)) == (0, 2)
    assert produce_raw(cluster, "idem-retry", batch(3)) == (3, 5)
    for _ in range(2):  # the second restart reads the windows its predecessor saved
        cluster.brokers[1].kill()
        cluster.start_broker(1)
        cluster.wait_brokers_registered(60)
        assert produce_raw(cluster, "idem-retry", batch(3)) == (3, 5)
        assert produce_raw(cluster, "idem-retry", batch(0)) == (0, 2)
    assert produce_raw(cluster, "idem-retry", batch(6)) == (6, 8)


def run_with_kills(cluster: Cluster, durability: str) -> tuple[Writes, dict]:
    masters, topic = cluster.master_addresses, f"idem-{durability}"
    with AdminClient(masters) as admin:
        admin.create_topic(topic, partitions=PARTITIONS, durability=durability)
    writes = Writes()
    writer = threading.Thread(target=write, args=(masters, topic, writes), daemon=True)
    writer.start()
    for k in range(1, KILLS + 1):
        wait_until(lambda k=k: len(writes.acked) >= k * TOTAL // (KILLS + 1) or
                   writes.done.is_set(), f"{k * TOTAL // (KILLS + 1)} acknowledgements", 300)
        assert not writes.done.is_set(), "the writer finished before the kills"
        cluster.brokers[1].kill()  # SIGKILL: batches in flight lose their answers
        cluster.start_broker(1)
        cluster.wait_brokers_registered(60)
    assert writes.done.wait(600), "the writer did not finish in 10 minutes"
    writer.join(10)
    assert writes.error is None, repr(writes.error)
    return writes, stored(masters, topic)


def test_a_sync_topic_stores_every_acknowledged_record_once_at_its_offset(cluster):
    writes, where = run_with_kills(cluster, "sync")
    assert writes.failed == [], f"{len(writes.failed)} sends failed"
    twice = {n: at for n, at in where.items() if len(at) > 1}
    assert not twice, f"{len(twice)} records stored twice, e.g. {list(twice.items())[:3]}"
    moved = {n: (at, where.get(n)) for n, at in writes.acked.items() if where.get(n) != [at]}
    assert not moved, f"{len(moved)} acknowledged records not where acknowledged: " \
                      f"{list(moved.items())[:3]}"
    for p in range(PARTITIONS):  # a partition holds its records in the order they were sent
        numbers = [n for n, at in sorted(where.items(), key=lambda kv: kv[1]) if at[0][0] == p]
        assert numbers == sorted(numbers), f"partition {p} is out of order"
    assert len(where) == TOTAL


def test_an_async_topic_stores_nothing_twice_and_loses_only_a_kills_cached_tail(cluster):
    writes, where = run_with_kills(cluster, "async")
    assert writes.failed == [], f"{len(writes.failed)} sends failed"
    twice = {n: at for n, at in where.items() if len(at) > 1}
    assert not twice, f"{len(twice)} records stored twice, e.g. {list(twice.items())[:3]}"
    lost = sorted(n for n in writes.acked if n not in where)
    # What a kill can cost is what the cache blocks held: at most the records acknowledged
    # since the flusher last wrote (every 200 ms), so runs of consecutive numbers, one run
    # per partition and kill at most.
    runs = sum(1 for i, n in enumerate(lost) if i == 0 or n - lost[i - 1] > PARTITIONS)
    assert runs <= KILLS * PARTITIONS, f"{len(lost)} lost in {runs} runs: {lost[:20]}"
    for n, at in writes.acked.items():
        if n in where:
            assert where[n] == [at], f"record {n} acknowledged at {at}, stored at {where[n]}"
