"""Leaders SIGKILLed under load (Jepsen's Kafka case): RF 3, min_insync_replicas 2, acks=all.
Every acknowledged message survives, offsets stay dense, each producer's order is kept, and no
consumer ever read a record that the final log does not hold at that offset (a record later
truncated away). Bounded: 3 kills, about half a minute per durability.

Run with both topic durabilities: ``sync`` (acknowledged once on every in-sync replica's disk)
and ``async`` (acknowledged once in every in-sync replica's memory cache, not fsynced). Under
async the brokers keep cache blocks for a minute, so a SIGKILLed broker loses everything it
held: the acknowledged messages survive only because one broker dies at a time and the
others still hold them."""
from __future__ import annotations

import threading
import time

import pytest

from lib.admin import AdminClient
from lib.consumer.pull import PullConsumer
from lib.errors import TubeqError
from lib.types import TopicPartition
from tests.integration.fault_kit import NumberedWriter

KILLS = 3
TOPIC = "jepsen"


# What the brokers' [broker.store] says per topic durability: async keeps cache blocks in
# memory for the whole test (the default writes them to the file, unsynced, every 200 ms,
# where a SIGKILL would not reach them).
STORE = {"sync": {}, "async": {"store": {"cache_flush_interval_ms": 60000}}}


@pytest.fixture(params=sorted(STORE))
def durability(request) -> str:
    return request.param


@pytest.fixture
def cluster(replicated_cluster, durability):
    return replicated_cluster(3, master_settings={"broker_heartbeat_interval_ms": 300,
                                                  "broker_timeout_ms": 1500},
                              replica_lag_max_ms=1500, **STORE[durability])


class Reader(threading.Thread):
    """Reads partition 0 as it grows; remembers what it saw at each offset."""

    def __init__(self, masters: str) -> None:
        super().__init__(daemon=True)
        self.masters, self.seen, self.stop = masters, {}, threading.Event()

    def run(self) -> None:
        with PullConsumer(self.masters, auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition(TOPIC, 0)])
            while not self.stop.is_set():
                try:
                    for r in consumer.poll(timeout=0.2):
                        self.seen[r.offset] = r.value
                except TubeqError:
                    time.sleep(0.1)


def _leader(admin: AdminClient) -> int:
    return admin.describe_topic(TOPIC).partitions[0].broker_id


def _logs(cluster) -> str:
    """Where each broker logged (its data dir), for a failure's message."""
    return ", ".join(f"broker {b}: {proc.data_dir / 'log.txt'}"
                     for b, proc in sorted(cluster.brokers.items()))


def test_killed_leaders_lose_no_acknowledged_message(cluster, durability):
    with AdminClient(cluster.master_addresses) as admin:
        admin.create_topic(TOPIC, partitions=1, replication_factor=3, min_insync_replicas=2,
                           durability=durability)
        writer = NumberedWriter(cluster.master_addresses, TOPIC, acks="all")
        reader = Reader(cluster.master_addresses)
        writer.start()
        reader.start()
        try:
            for _ in range(KILLS):
                time.sleep(3)
                victim = _leader(admin)
                cluster.brokers[victim].kill()
                deadline = time.monotonic() + 20
                while _leader(admin) == victim and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert _leader(admin) != victim, "no new leader was elected"
                time.sleep(1)
                cluster.start_broker(victim)
            time.sleep(2)
        finally:
            writer.stop.set()
            writer.join(60)
            reader.stop.set()
            reader.join(30)
        deadline = time.monotonic() + 30
        while len(admin.describe_topic(TOPIC).partitions[0].isr) < 3 \
                and time.monotonic() < deadline:
            time.sleep(0.2)
    assert len(writer.acked) > 100, "the writer made too little progress to judge"
    with PullConsumer(cluster.master_addresses, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(TOPIC, 0)])
        final, idle = [], 0
        while idle < 10:
            got = consumer.poll(timeout=0.3)
            final += got
            idle = 0 if got else idle + 1
    assert [r.offset for r in final] == list(range(len(final))), \
        f"offsets must stay dense ({_logs(cluster)})"
    values = [int(r.value[1:]) for r in final]
    lost = sorted(set(writer.acked) - set(values))
    assert not lost, (f"{len(lost)} of {len(writer.acked)} acknowledged messages were lost, "
                      f"first ones {lost[:20]} ({_logs(cluster)})")
    firsts = list(dict.fromkeys(values))
    assert firsts == sorted(firsts), f"the producer's order was not kept ({_logs(cluster)})"
    at = {r.offset: r.value for r in final}
    truncated = {o: v for o, v in reader.seen.items() if at.get(o) != v}
    assert not truncated, \
        f"a consumer read records later truncated away: {truncated} ({_logs(cluster)})"
