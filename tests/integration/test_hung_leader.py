"""A leader that hangs (SIGSTOP: its connections stay open, nothing answers) while clients use
it: RF 3 on 3 brokers, the master moves the leadership in about 2.5 s (fault_kit's
FAST_FAILOVER). The producer (idempotent, acks=all) and the pull and push consumers must
follow the move within a few seconds, although their request timeout is 30 s (what they waited
before: the call in flight to the paused broker ran to its deadline); nothing acknowledged is
lost or stored twice. The paused broker is resumed before teardown (a stopped process does not
act on SIGTERM).
"""
from __future__ import annotations

import signal
import threading
import time
from collections import Counter

import pytest

from lib.admin import AdminClient
from lib.consumer.pull import PullConsumer
from lib.consumer.push import PushConsumer
from lib.errors import TubeqError
from lib.producer.producer import Producer
from lib.types import TopicPartition
from tests.integration.fault_kit import FAST_FAILOVER, REPLICA_LAG_MAX_MS, wait_until

TOPIC = "hung"
TIMEOUT_MS = 30_000  # the clients' request timeout: what a stuck call used to cost
# Leadership moves in ~2.5 s; the clients must be going again well before their 30 s timeout.
RESUME_BOUND_S = 12.0


@pytest.fixture
def cluster(replicated_cluster):
    return replicated_cluster(3, master_settings=FAST_FAILOVER,
                              replica_lag_max_ms=REPLICA_LAG_MAX_MS)


class TimedWriter(threading.Thread):
    """Sends ``b"m%06d" % n`` one at a time (each acknowledged before the next is sent);
    keeps (n, monotonic time of its acknowledgement)."""

    def __init__(self, masters: str) -> None:
        super().__init__(daemon=True)
        self.masters = masters
        self.acked: list[tuple[int, float]] = []
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with Producer(self.masters, acks="all", idempotent=True, retries=100,
                      retry_backoff_ms=100, request_timeout_ms=TIMEOUT_MS,
                      linger_ms=0) as producer:
            n = 0
            while not self.stop.is_set():
                try:
                    producer.send(TOPIC, b"m%06d" % n).result(2 * TIMEOUT_MS / 1000)
                    self.acked.append((n, time.monotonic()))
                except TubeqError as exc:
                    self.errors.append(str(exc))
                n += 1
                time.sleep(0.005)


class TimedReader(threading.Thread):
    """Reads partition 0 from the start; keeps (value, monotonic time it was polled)."""

    def __init__(self, masters: str) -> None:
        super().__init__(daemon=True)
        self.masters = masters
        self.got: list[tuple[bytes, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with PullConsumer(self.masters, auto_offset_reset="earliest",
                          rpc_timeout_s=TIMEOUT_MS / 1000) as consumer:
            consumer.assign([TopicPartition(TOPIC, 0)])
            while not self.stop.is_set():
                try:
                    for r in consumer.poll(timeout=0.2):
                        self.got.append((r.value, time.monotonic()))
                except TubeqError:
                    time.sleep(0.1)


def _leader(admin: AdminClient) -> int:
    return admin.describe_topic(TOPIC).partitions[0].broker_id


def _first_after(times: list[float], t: float) -> float | None:
    return next((x for x in times if x > t), None)


def test_clients_follow_a_sigstopped_leader_within_seconds_not_their_request_timeout(cluster):
    with AdminClient(cluster.master_addresses) as admin:
        admin.create_topic(TOPIC, partitions=1, replication_factor=3, min_insync_replicas=2)
        wait_until(lambda: len(admin.describe_topic(TOPIC).partitions[0].isr) == 3,
                   "all 3 replicas in sync")
        writer, reader = TimedWriter(cluster.master_addresses), \
            TimedReader(cluster.master_addresses)
        pushed: list[tuple[bytes, float]] = []
        push = PushConsumer(cluster.master_addresses, group="hung-push",
                            auto_offset_reset="earliest", rpc_timeout_s=TIMEOUT_MS / 1000)
        push.subscribe([TOPIC], handler=lambda r: pushed.append((r.value, time.monotonic())))
        writer.start()
        reader.start()
        victim = None
        try:
            wait_until(lambda: len(writer.acked) > 50 and len(reader.got) > 50
                       and len(pushed) > 50,
                       "records acknowledged and read before the fault")
            victim = _leader(admin)
            cluster.brokers[victim].signal(signal.SIGSTOP)
            stopped = time.monotonic()
            wait_until(lambda: _leader(admin) != victim, "a new leader", timeout=30)
            moved = time.monotonic() - stopped
            # the old code waits TIMEOUT_MS here: wait long enough to see it fail clearly
            wait_until(lambda: _first_after([t for _, t in writer.acked], stopped) is not None
                       and _first_after([t for _, t in reader.got], stopped) is not None
                       and _first_after([t for _, t in pushed], stopped) is not None,
                       "acknowledgements and reads after the leader was stopped",
                       timeout=TIMEOUT_MS / 1000 + 15)
            acked_after = _first_after([t for _, t in writer.acked], stopped) - stopped
            read_after = _first_after([t for _, t in reader.got], stopped) - stopped
            pushed_after = _first_after([t for _, t in pushed], stopped) - stopped
            wait_until(lambda: len(writer.acked) > 0 and writer.acked[-1][1] > time.monotonic()
                       - 1 and len(reader.got) and reader.got[-1][1] > time.monotonic() - 1,
                       "the clients going on at the new leader")
        finally:
            if victim is not None:
                cluster.brokers[victim].signal(signal.SIGCONT)
            writer.stop.set()
            reader.stop.set()
            writer.join(2 * TIMEOUT_MS / 1000)
            reader.join(30)
            push.close()
    print(f"leadership moved after {moved:.2f} s; first ack {acked_after:.2f} s, "
          f"first read {read_after:.2f} s, first pushed {pushed_after:.2f} s after the stop")
    assert acked_after < RESUME_BOUND_S, \
        (f"the producer's first acknowledgement came {acked_after:.1f} s after its leader "
         f"was stopped (leadership moved after {moved:.1f} s)")
    assert read_after < RESUME_BOUND_S, \
        (f"the consumer's first record came {read_after:.1f} s after its leader was stopped "
         f"(leadership moved after {moved:.1f} s)")
    assert pushed_after < RESUME_BOUND_S, \
        (f"the push consumer's first record came {pushed_after:.1f} s after its leader was "
         f"stopped (leadership moved after {moved:.1f} s)")

    acked = [n for n, _ in writer.acked]
    with PullConsumer(cluster.master_addresses, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(TOPIC, 0)])
        final, idle = [], 0
        while idle < 10:
            got = consumer.poll(timeout=0.3)
            final += got
            idle = 0 if got else idle + 1
    values = [int(r.value[1:]) for r in final]
    lost = sorted(set(acked) - set(values))
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged records lost: {lost[:20]}"
    twice = sorted(v for v, k in Counter(values).items() if k > 1)
    assert not twice, f"records stored twice despite the idempotent producer: {twice[:20]}"
    read = [int(v[1:]) for v, _ in reader.got]
    assert read == values[:len(read)], "the consumer read records out of order or not stored"
