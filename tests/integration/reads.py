"""Reading partitions to their end, as a consumer of one isolation level sees them."""
from __future__ import annotations

import time
from collections import defaultdict

from lib import PullConsumer, Record, TopicPartition


def read_to_end(masters: str, tps: list[TopicPartition], isolation: str,
                wait_s: float = 60.0) -> dict[TopicPartition, list[Record]]:
    """The records per partition, in offset order, that a consumer of ``isolation`` reads from
    the start of each partition up to its end now (``end_offsets``: the last stable offset for
    read_committed); fails the test after ``wait_s``."""
    got: dict[TopicPartition, list[Record]] = defaultdict(list)
    with PullConsumer(masters, isolation_level=isolation, fetch_max_wait_ms=100) as consumer:
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets()
        deadline = time.monotonic() + wait_s
        while any(consumer.position(tp) < end for tp, end in ends.items()):
            assert time.monotonic() < deadline, \
                f"{isolation}: positions {[consumer.position(tp) for tp in ends]} ends {ends}"
            for r in consumer.poll(max_records=5000, timeout=0.5):
                got[TopicPartition(r.topic, r.partition)].append(r)
    return got
