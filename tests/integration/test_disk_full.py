"""A broker whose data fills a small filesystem (regression: Robustness issue, defect 4).

Found by testing: on a full disk 600 acknowledged ``async`` records were lost although the broker
was stopped cleanly, and appends kept failing after space came back until a restart. Wanted:
producers get DiskFull (retriable, not a timeout, not INTERNAL), nothing acknowledged is lost,
appends resume by themselves when space returns, and the master shows the condition.

The broker's topic data (``<data_dir>/topics``) sits on a 32 MiB tmpfs (skipped, saying why,
where mounting is not permitted); its log and ready file stay outside so they can be read.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lib.admin import AdminClient
from lib.consumer.pull import PullConsumer
from lib.errors import DiskFull
from lib.producer.producer import Producer
from tests.cluster import ROOT, Cluster
from tests.tinyfs import fill, tiny_fs, unfill

MiB = 1 << 20
RESERVE = 4 * MiB
TOPICS = {"full-async": "async", "full-sync": "sync"}
VALUE = b"v" * 8000


@pytest.fixture
def small_disk_cluster(tmp_path):
    """1 master + 1 broker whose topics dir is a 32 MiB tmpfs; yields (cluster, topics dir)."""
    root = tmp_path / "c"
    topics_dir = root / "broker1" / "topics"
    config = tmp_path / "broker.toml"
    # Blocks stay cached for 3 s, so filling the disk right after acks hits cached data.
    config.write_text(f"[broker.store]\ndisk_reserve_bytes = {RESERVE}\n"
                      "cache_block_bytes = 2097152\nmax_batch_bytes = 1048576\n"
                      "cache_flush_interval_ms = 3000\n"
                      "unflush_interval_ms = 3000\n")
    topics_dir.parent.mkdir(mode=0o700, parents=True)  # the data dir: the broker's own
    with tiny_fs(topics_dir, 32 * MiB):
        cluster = Cluster(root, broker_args=["--config", str(config)])
        try:
            yield cluster.start(brokers=1), topics_dir
        finally:
            cluster.stop_all()


def produce(producer: Producer, topic: str, values: list[bytes]) -> tuple[list[bytes], list]:
    """Send ``values``; returns (acknowledged values, errors of the others)."""
    futures = [(v, producer.send(topic, v)) for v in values]
    producer.flush(60)
    acked, failed = [], []
    for v, fut in futures:
        try:
            fut.result(60)
            acked.append(v)
        except Exception as exc:  # noqa: BLE001 - the test inspects every failure
            failed.append(exc)
    return acked, failed


def produce_until_accepted(producer: Producer, topic: str, value: bytes,
                           expected: type[Exception] = Exception) -> list[bytes]:
    """Send ``value`` until acknowledged (20 s at most); other failures must be ``expected``."""
    deadline = time.monotonic() + 20
    while True:
        ok, failed = produce(producer, topic, [value])
        if ok:
            return ok
        assert all(isinstance(e, expected) for e in failed), failed
        assert time.monotonic() < deadline, f"{topic}: not accepted in 20 s: {failed}"
        time.sleep(0.1)


def broker_disk(admin: AdminClient, want_full: bool, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while True:
        (b,) = admin.list_brokers()
        if b.disk_full == want_full and b.disk_free_bytes >= 0:
            return b
        if time.monotonic() > deadline:
            raise AssertionError(f"broker list never showed disk_full={want_full}: {b}")
        time.sleep(0.2)


def read_back(masters: str, expected: int, timeout: float = 30.0) -> dict[str, list[bytes]]:
    got: dict[str, list[bytes]] = {t: [] for t in TOPICS}
    with PullConsumer(masters, auto_offset_reset="earliest") as consumer:
        consumer.subscribe(list(TOPICS))
        deadline = time.monotonic() + timeout
        while sum(map(len, got.values())) < expected and time.monotonic() < deadline:
            for r in consumer.poll(timeout=0.5):
                got[r.topic].append(r.value)
    return got


def test_full_disk_refuses_with_disk_full_loses_nothing_acknowledged_and_recovers_alone(
        small_disk_cluster):
    cluster, disk = small_disk_cluster
    masters = cluster.master_addresses
    broker = cluster.brokers[1]
    acked: dict[str, list[bytes]] = {t: [] for t in TOPICS}
    started = time.monotonic()
    with AdminClient(masters) as admin:
        for topic, durability in TOPICS.items():
            admin.create_topic(topic, partitions=1, durability=durability)
        producer = Producer(masters, retries=2, retry_backoff_ms=100, linger_ms=2)
        try:
            for topic in TOPICS:  # the broker learns a new topic at its next heartbeat
                acked[topic] += produce_until_accepted(producer, topic, b"%s-w-" % topic.encode())
            for topic in TOPICS:  # ~1.6 MiB each, acknowledged; async ones are still cached
                ok, failed = produce(producer, topic, [b"%s-a%d-" % (topic.encode(), i) + VALUE
                                                       for i in range(200)])
                assert not failed, failed[:3]
                acked[topic] += ok

            # 1. Someone takes the whole disk while acknowledged async data is still cached.
            fill(disk)
            time.sleep(0.1)  # the broker's free-space reading is up to 50 ms old
            for topic in TOPICS:
                ok, failed = produce(producer, topic, [b"%s-b%d-" % (topic.encode(), i) + VALUE
                                                       for i in range(20)])
                acked[topic] += ok
                assert failed and all(isinstance(e, DiskFull) for e in failed), \
                    [repr(e) for e in failed[:3]]
                assert "reserve" in failed[0].message and failed[0].retriable
            # The flusher's write of the cached async block fails (ENOSPC): a condition, not death.
            wait_for_log(broker, "store.disk_full")
            ok, failed = produce(producer, "full-async", [b"full-async-b-late-" + VALUE])
            assert not ok and isinstance(failed[0], DiskFull), failed
            shown = broker_disk(admin, want_full=True)
            assert shown.disk_reserve_bytes == RESERVE and shown.disk_free_bytes < RESERVE
            cli = subprocess.run([sys.executable, "-m", "lib.cli", "--masters", masters,
                                  "broker", "list", "--json"], cwd=ROOT, capture_output=True,
                                 timeout=60)
            assert cli.returncode == 0, cli.stderr
            assert json.loads(cli.stdout)[0]["disk_full"] is True
            assert b"disk full" in cli.stderr

            # 2. Space comes back: appends resume without a restart.
            unfill(disk)
            acked["full-async"] += produce_until_accepted(producer, "full-async",
                                                          b"full-async-c-" + VALUE, DiskFull)
            ok, failed = produce(producer, "full-sync", [b"full-sync-c-" + VALUE])
            assert ok and not failed, failed
            acked["full-sync"] += ok
            broker_disk(admin, want_full=False)

            # 3. Below the reserve again (the guard refuses; what is cached still fits), then a
            # clean stop and a restart on the nearly full disk.
            fill(disk, leave_bytes=RESERVE // 2)
            time.sleep(0.1)
            for topic in TOPICS:
                ok, failed = produce(producer, topic, [b"%s-d%d-" % (topic.encode(), i) + VALUE
                                                       for i in range(5)])
                acked[topic] += ok
                assert failed and all(isinstance(e, DiskFull) for e in failed), failed[:3]
        finally:
            producer.close(10)
        assert broker.stop() == 0
        broker.start()
        cluster.wait_brokers_registered()

    total = sum(map(len, acked.values()))
    got = read_back(masters, total)
    for topic in TOPICS:
        missing = [v[:24] for v in acked[topic] if v not in set(got[topic])]
        assert not missing, f"{topic}: {len(missing)} acknowledged records lost: {missing[:5]}"
    assert "store.disk_full" in broker_log(broker) and "store.unwritten_lost" not in \
        broker_log(broker)
    assert time.monotonic() - started < 120


def wait_for_log(broker, text: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in broker_log(broker):
        assert time.monotonic() < deadline, f"{text!r} never logged:\n{broker.log_tail()}"
        time.sleep(0.1)


def broker_log(broker) -> str:
    return Path(broker.data_dir, "log.txt").read_text(errors="replace")
