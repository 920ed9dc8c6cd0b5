"""PullConsumer.poll_columns against a real cluster: checked frame runs, positions, commits."""
from __future__ import annotations

import time

import numpy as np

from lib.consumer.pull import PullConsumer
from lib.producer import Producer
from lib.types import TopicPartition
from tests.integration.test_producer_cluster import create


def test_poll_columns_hands_out_every_record_once_in_order_and_commits(cluster):
    create(cluster, "cols", partitions=2)
    n = 30_000
    values = [b"v%06d" % i for i in range(n)]
    keys = [b"k%d" % (i % 11) for i in range(n)]
    with Producer(cluster.master_addresses) as producer:
        meta = producer.send_batch("cols", values, keys=keys, tags=["t"] * n).result(30)
    want = {p: [values[i] for i in np.flatnonzero(meta.partitions == p)] for p in (0, 1)}
    got: dict[int, list[bytes]] = {0: [], 1: []}
    offsets: dict[int, list[int]] = {0: [], 1: []}
    with PullConsumer(cluster.master_addresses, group="cols-g", auto_offset_reset="earliest",
                      enable_auto_commit=False, max_poll_records=4000) as consumer:
        consumer.subscribe("cols")
        deadline = time.monotonic() + 60
        while sum(map(len, got.values())) < n and time.monotonic() < deadline:
            for cols in consumer.poll_columns(timeout=1.0):
                assert cols.topic == "cols" and cols.plain and len(cols) <= 4000
                starts, ends = cols.value_spans()
                got[cols.partition] += [bytes(cols.frames[a:b])
                                        for a, b in zip(starts.tolist(), ends.tolist(),
                                                        strict=True)]
                offsets[cols.partition] += cols.offsets.tolist()
        assert got == want
        assert {p: o == list(range(len(o))) for p, o in offsets.items()} == {0: True, 1: True}
        consumer.commit()
        assert consumer.committed(TopicPartition("cols", 0)) == len(want[0])
        assert consumer.poll_columns(timeout=0.2) == []
