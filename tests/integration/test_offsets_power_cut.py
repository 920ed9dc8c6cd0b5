"""A group's committed offset past a partition's recovered log end after a power cut.

Regression (issue 49, item 8): a power cut drops an ``async`` partition's unsynced tail, while a
group's commit past those records (LMDB, synced) survives. The committed offset stayed beyond
the recovered log end; new records took the lost offsets again and the group skipped them once
the log grew past its commit. The broker now brings such offsets back to the log end when the
store opens, before it serves anything, and logs the loss."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from lib.admin import AdminClient
from lib.consumer.pull import PullConsumer
from lib.producer.producer import Producer
from lib.types import TopicPartition
from storage.index import INDEX_DTYPE
from tests.integration.fault_kit import wait_until

TOPIC = "cut"
TP = TopicPartition(TOPIC, 0)


def _cut_unsynced_tail(data_dir: Path, keep: int) -> None:
    """What a power cut leaves of partition 0's files when only its first ``keep`` records
    reached the disk: its data log and index cut there (one store, one partition)."""
    store = data_dir / "topics" / TOPIC / "0"
    [index] = sorted((store / "p0").glob("*.idx"))
    entries = np.fromfile(index, INDEX_DTYPE)
    assert len(entries) > keep, f"only {len(entries)} records reached the index"
    [data] = sorted((store / "data").glob("*.log"))
    cut_at = int(entries["pos"][keep]) - int(data.stem)
    with open(data, "r+b") as f:
        f.truncate(cut_at)
    with open(index, "r+b") as f:
        f.truncate(keep * INDEX_DTYPE.itemsize)


def _consume(masters: str, want: int) -> list[bytes]:
    with PullConsumer(masters, group="g", auto_offset_reset="earliest",
                      enable_auto_commit=False) as consumer:
        consumer.assign([TP])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < want and time.monotonic() < deadline:
            got += [r.value for r in consumer.poll(timeout=0.5)]
        idle_until = time.monotonic() + 1.5  # and nothing more
        while time.monotonic() < idle_until:
            got += [r.value for r in consumer.poll(timeout=0.3)]
        return got


def indexed(broker) -> int:
    """Index entries the broker's partition 0 has in its files (0 before its first index
    file: the flusher writes it with the first block)."""
    index = next((broker.data_dir / "topics" / TOPIC / "0" / "p0").glob("*.idx"), None)
    return 0 if index is None else len(np.fromfile(index, INDEX_DTYPE))


def test_a_commit_past_the_recovered_log_end_skips_none_of_the_records_written_later(
        cluster_factory):
    cluster = cluster_factory(1)
    with AdminClient(cluster.master_addresses) as admin:
        admin.create_topic(TOPIC, partitions=1, durability="async")
        with Producer(cluster.master_addresses) as producer:
            for batch in range(10):  # several chunks in the data log
                for i in range(10):
                    producer.send(TOPIC, b"old%d" % (batch * 10 + i), partition=0)
                producer.flush()
        with PullConsumer(cluster.master_addresses, group="g",
                          enable_auto_commit=False) as consumer:
            consumer.assign([TP])
            consumer.commit({TP: 100})
        broker = cluster.brokers[1]
        wait_until(lambda: indexed(broker) == 100, "the records flushed to the files")
        broker.kill()
        _cut_unsynced_tail(broker.data_dir, keep=45)
        cluster.start_broker(1)

        def log_end() -> int:
            try:
                return admin.describe_topic(TOPIC).partitions[0].latest
            except Exception:  # noqa: BLE001 - the broker may still be registering
                return -1

        wait_until(lambda: 0 <= log_end() < 100, "the broker back with the cut log", 30)
        recovered = log_end()
        assert recovered <= 45, f"the power cut left {recovered} records, expected <= 45"
        with Producer(cluster.master_addresses) as producer:
            for i in range(100):
                producer.send(TOPIC, b"new%d" % i, partition=0)
            producer.flush()
    got = _consume(cluster.master_addresses, 100)
    assert got == [b"new%d" % i for i in range(100)], (
        f"the group skipped records written after the power cut: got {len(got)}, first "
        f"{got[:3]}")
    assert "offsets.past_log_end" in (broker.data_dir / "log.txt").read_text()
