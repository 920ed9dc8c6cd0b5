"""Volume: two producer processes, 100k messages, 6 partitions over 2 brokers, all consumed once."""
from __future__ import annotations

import subprocess
import sys
import time
import zlib
from collections import defaultdict

from lib import AdminClient, PullConsumer
from tests.cluster import ROOT

TOTAL = 100_000
PRODUCERS = 2
PARTITIONS = 6


def test_100k_messages_from_two_producers_are_consumed_exactly_once_in_order(cluster):
    with AdminClient(cluster.master_addresses) as admin:
        info = admin.create_topic("volume", partitions=PARTITIONS)
    assert {p.broker_id for p in info.partitions} == {1, 2}

    workers = [subprocess.Popen(
        [sys.executable, "-m", "tests.integration.produce_worker", cluster.master_addresses,
         "volume", f"p{i}", str(TOTAL // PRODUCERS)], cwd=ROOT, stdin=subprocess.DEVNULL)
        for i in range(PRODUCERS)]
    try:
        assert [w.wait(240) for w in workers] == [0] * PRODUCERS
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()

    seen: dict[bytes, tuple[int, int]] = {}
    last_seq: dict[tuple[int, bytes], int] = defaultdict(lambda: -1)
    key_partition: dict[bytes, int] = {}
    with PullConsumer(cluster.master_addresses, group="volume-readers",
                      auto_offset_reset="earliest") as consumer:
        consumer.subscribe(["volume"])
        deadline = time.monotonic() + 180
        while len(seen) < TOTAL and time.monotonic() < deadline:
            for rec in consumer.poll(max_records=5000, timeout=1.0):
                assert rec.value not in seen, f"{rec.value!r} delivered twice"
                seen[rec.value] = (rec.partition, rec.offset)
                producer, seq = rec.value.split(b":")
                # Within a partition, each producer's records keep the order they were sent in.
                assert int(seq) > last_seq[(rec.partition, producer)]
                last_seq[(rec.partition, producer)] = int(seq)
                assert key_partition.setdefault(rec.key, rec.partition) == rec.partition
        extra = consumer.poll(timeout=1.0)
    assert len(seen) == TOTAL and extra == []
    # Keys land on the documented stable partition: crc32(key) % partitions.
    assert all(p == zlib.crc32(k) % PARTITIONS for k, p in key_partition.items())
    # Offsets are dense per partition.
    by_partition = defaultdict(list)
    for partition, offset in seen.values():
        by_partition[partition].append(offset)
    for offsets in by_partition.values():
        assert sorted(offsets) == list(range(len(offsets)))
