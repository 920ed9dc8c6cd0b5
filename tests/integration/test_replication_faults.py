"""Leaders SIGKILLed under load (Jepsen's Kafka case): RF 3, min_insync_replicas 2, sync
durability, acks=all. Every acknowledged message survives, offsets stay dense, each
producer's order is kept, and no consumer ever read a record that the final log does not hold
at that offset (a record later truncated away). Bounded: 3 kills, about a minute."""
from __future__ import annotations

import threading
import time

import pytest

from lib.admin import AdminClient
from lib.consumer.pull import PullConsumer
from lib.errors import TubeqError
from lib.producer.producer import Producer
from lib.types import TopicPartition

KILLS = 3
TOPIC = "jepsen"


@pytest.fixture
def cluster(cluster_factory, tmp_path):
    master_conf, broker_conf = tmp_path / "master.toml", tmp_path / "broker.toml"
    master_conf.write_text("[master]\nreplication_preview = true\n"
                           "broker_heartbeat_interval_ms = 300\nbroker_timeout_ms = 1500\n")
    broker_conf.write_text("[broker]\nreplica_lag_max_ms = 1500\n")
    return cluster_factory(3, master_args=["--config", str(master_conf)],
                           broker_args=["--config", str(broker_conf)])


class Writer(threading.Thread):
    """Sends numbered messages to partition 0 with acks=all; keeps the acknowledged ones."""

    def __init__(self, masters: str) -> None:
        super().__init__(daemon=True)
        self.masters, self.acked, self.stop = masters, [], threading.Event()

    def run(self) -> None:
        with Producer(self.masters, acks="all", retries=50, retry_backoff_ms=100,
                      request_timeout_ms=5000, linger_ms=2) as producer:
            i = 0
            while not self.stop.is_set():
                futures = [(n, producer.send(TOPIC, b"m%06d" % n, partition=0))
                           for n in range(i, i + 20)]
                i += 20
                for n, fut in futures:
                    try:
                        fut.result(30)
                        self.acked.append(n)
                    except TubeqError:
                        pass  # not acknowledged: may or may not be stored


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


def test_killed_leaders_lose_no_acknowledged_message(cluster):
    with AdminClient(cluster.master_addresses) as admin:
        admin.create_topic(TOPIC, partitions=1, replication_factor=3, min_insync_replicas=2,
                           durability="sync")
        writer, reader = Writer(cluster.master_addresses), Reader(cluster.master_addresses)
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
    assert [r.offset for r in final] == list(range(len(final))), "offsets must stay dense"
    values = [int(r.value[1:]) for r in final]
    assert not set(writer.acked) - set(values), "an acknowledged message was lost"
    firsts = list(dict.fromkeys(values))
    assert firsts == sorted(firsts), "the producer's order was not kept"
    at = {r.offset: r.value for r in final}
    truncated = {o: v for o, v in reader.seen.items() if at.get(o) != v}
    assert not truncated, f"a consumer read records later truncated away: {truncated}"
