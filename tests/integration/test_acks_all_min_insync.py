"""acks=all never acknowledges a write that ended up on fewer copies than min_insync_replicas.

Regression (issue 49, item 1): a write waiting for its followers when they died was answered
with success once the leader dropped them from the ISR (the high watermark jumped to the
leader's own log end), although only one copy existed. It is now answered with the retriable
NotEnoughReplicasAfterAppend, and an idempotent producer's retries land once the followers
are back, stored once."""
from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest

from lib import errors
from lib.admin import AdminClient
from lib.consumer.pull import PullConsumer
from lib.producer.producer import Producer
from lib.types import TopicPartition
from storage.store import Store
from tests.integration.fault_kit import wait_until

TOPIC = "copies"
LAG_MAX_MS = 2000  # the followers leave the ISR this long after they died


@pytest.fixture
def cluster(replicated_cluster):
    # A minute's broker timeout: the followers leave the ISR through the leader's lag check
    # (what the bug was about), not because the master declared them dead first.
    return replicated_cluster(3, master_settings={"broker_heartbeat_interval_ms": 300,
                                                  "broker_timeout_ms": 60000},
                              replica_lag_max_ms=LAG_MAX_MS)


def _create(cluster) -> tuple[AdminClient, int, list[int]]:
    admin = AdminClient(cluster.master_addresses)
    leader = admin.create_topic(TOPIC, partitions=1, replication_factor=3,
                                min_insync_replicas=2, durability="sync") \
        .partitions[0].broker_id
    return admin, leader, sorted(set(cluster.brokers) - {leader})


def _isr(admin: AdminClient) -> list[int]:
    return admin.describe_topic(TOPIC).partitions[0].isr


def test_a_write_waiting_when_the_followers_die_is_refused_not_acknowledged(cluster):
    admin, leader, followers = _create(cluster)
    with admin, Producer(cluster.master_addresses, acks="all", retries=0,
                         request_timeout_ms=30000) as producer:
        wait_until(lambda: len(_isr(admin)) == 3, "all three replicas in sync")
        first = None
        while first is None:  # the brokers may not have heard of the new topic yet
            try:
                first = producer.send(TOPIC, b"first", partition=0).result(20)
            except errors.TubeqError as e:
                assert e.retriable, e
                time.sleep(0.2)
        for b in followers:
            cluster.brokers[b].kill()
        waiting = producer.send(TOPIC, b"second", partition=0)
        with pytest.raises(errors.NotEnoughReplicasAfterAppend,
                           match=r"stored by the leader, but the in-sync replicas fell to 1 "
                                 r"\[\d\] while it waited, the topic needs 2") as refused:
            waiting.result(30)
        assert refused.value.retriable
        assert _isr(admin) == [leader]
        # A write sent after the shrink is refused up front (nothing stored).
        with pytest.raises(errors.NotEnoughReplicas, match="acks=all refused"):
            producer.send(TOPIC, b"third", partition=0).result(20)


class _TimedWriter(threading.Thread):
    """An idempotent acks=all producer at about 1,000 msgs/s; remembers when each record was
    acknowledged and at which offset."""

    def __init__(self, masters: str) -> None:
        super().__init__(daemon=True)
        self.masters, self.stop = masters, threading.Event()
        self.acked: dict[int, tuple[float, int]] = {}  # record number -> (when, offset)
        self.failed: list[BaseException] = []
        self._lock = threading.Lock()

    def _done(self, n: int, future) -> None:
        error = future.exception()
        with self._lock:
            if error is None:
                self.acked[n] = (time.monotonic(), future.result().offset)
            else:
                self.failed.append(error)

    def run(self) -> None:
        with Producer(self.masters, acks="all", idempotent=True, retries=1000,
                      retry_backoff_ms=100, request_timeout_ms=30000, linger_ms=2) as producer:
            n = 0
            while not self.stop.is_set():
                future = producer.send(TOPIC, b"n%07d" % n, partition=0)
                future.add_done_callback(lambda f, n=n: self._done(n, f))
                n += 1
                time.sleep(0.001)
            producer.flush(60)

    def count(self) -> int:
        with self._lock:
            return len(self.acked)


def _freeze(proc) -> None:
    """SIGSTOP a broker and wait until every thread of it stopped: from then on it copies
    nothing more (what the leader sends it stays in a socket buffer)."""
    proc.signal(signal.SIGSTOP)

    def stopped() -> bool:
        tasks = Path(f"/proc/{proc.pid}/task")
        return all(Path(t, "stat").read_text().rsplit(")", 1)[1].split()[0] in "tT"
                   for t in tasks.iterdir())
    wait_until(stopped, f"broker {proc.pid} stopped", 10)


def _log_end_on_disk(cluster, broker_id: int) -> int:
    """The log end a killed follower's files hold: a durability=sync follower fsyncs what it
    fetched before its next fetch tells the leader, so nothing the leader counted is missing."""
    store = Store(cluster.brokers[broker_id].data_dir / "topics", TOPIC, 0, [0])
    try:
        return store.latest(0)
    finally:
        store.close()


def test_an_idempotent_producer_gets_no_acknowledgement_while_one_copy_is_left(cluster):
    admin, leader, followers = _create(cluster)
    writer = _TimedWriter(cluster.master_addresses)
    marked: list[float] = []
    with admin, Producer(cluster.master_addresses, acks="all", idempotent=True, retries=1000,
                         retry_backoff_ms=100, request_timeout_ms=30000) as marker:
        writer.start()
        try:
            wait_until(lambda: writer.count() > 500, "the writer under way")
            for b in followers:
                _freeze(cluster.brokers[b])
            # Sent once no follower can copy it: the leader stores it and it waits for copies
            # that never come (the writer's own waiting batch may be one a follower fetched).
            marker.send(TOPIC, b"marker", partition=0).add_done_callback(
                lambda f: marked.append(time.monotonic()) if f.exception() is None else None)
            for b in followers:
                cluster.brokers[b].kill()
            # Records below this offset are on two copies (the leader and the follower that got
            # furthest): acknowledging them even after the kill is right.
            two_copies_end = max(_log_end_on_disk(cluster, b) for b in followers)
            wait_until(lambda: _isr(admin) == [leader], "the ISR shrunk to the leader", 30)
            time.sleep(2)  # a span with one copy: what the bug acknowledged
            # From here on copies come back: the first follower may rejoin the ISR (2 copies,
            # acknowledgements resume rightly) while the second one still starts.
            returned = time.monotonic()
            for b in followers:
                cluster.start_broker(b)
            wait_until(lambda: len(_isr(admin)) >= 2, "a follower back in sync", 60)
            count = writer.count()
            wait_until(lambda: writer.count() > count + 500, "acknowledgements resumed", 60)
            marker.flush(60)
        finally:
            writer.stop.set()
            writer.join(90)
    assert marked, "the marker record was never acknowledged"
    assert marked[0] > returned, "the marker was acknowledged while only the leader held it"
    with_one_copy = sorted(n for n, (at, offset) in writer.acked.items()
                           if at < returned and offset >= two_copies_end)
    assert not with_one_copy, (f"{len(with_one_copy)} records acknowledged while only the "
                               f"leader held them (at or past offset {two_copies_end}), "
                               f"first {with_one_copy[:10]}")
    assert not writer.failed, f"the producer gave up: {writer.failed[:3]}"
    with PullConsumer(cluster.master_addresses, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(TOPIC, 0)])
        stored: list[bytes] = []
        idle = 0
        while idle < 10:
            got = consumer.poll(timeout=0.3)
            stored += [r.value for r in got]
            idle = 0 if got else idle + 1
    assert stored.count(b"marker") == 1, "the marker's retries were not stored exactly once"
    numbers = [int(v[1:]) for v in stored if v != b"marker"]
    assert len(numbers) == len(set(numbers)), "an idempotent retry was stored twice"
    missing = sorted(set(writer.acked) - set(numbers))
    assert not missing, f"{len(missing)} acknowledged records lost, first {missing[:10]}"
