"""A topic deleted and made again under the same name, against a real master and broker: a
client that already knows the new incarnation (its routes carry the new topic id) must not
be acknowledged by a broker still holding the old one, whose data is erased when the broker
hears of the re-creation (a heartbeat later). Every acknowledged record must be read back."""
from __future__ import annotations

import time

import pytest

from lib import AdminClient, Producer, PullConsumer, TopicPartition
from tests.integration.test_consumer_common import wait_for

pytestmark = pytest.mark.shared_cluster(brokers=1)
ROUNDS = 6
PER_ROUND = 30


def read_back(masters: str, topic: str, expected: int) -> list[bytes]:
    tp = TopicPartition(topic, 0)
    got: list[bytes] = []
    with PullConsumer(masters, fetch_max_wait_ms=50) as c:
        c.assign([tp])
        c.seek_to_beginning(tp)
        deadline = time.monotonic() + 30
        while len(got) < expected and time.monotonic() < deadline:
            got += [r.value for r in c.poll(timeout=0.2)]
        got += [r.value for r in c.poll(timeout=0.5)]  # nothing more than acknowledged either
    return got


def test_records_acknowledged_right_after_a_re_creation_survive_it(cluster):
    masters, topic = cluster.master_addresses, "incarnations"
    with AdminClient(masters) as admin:
        admin.create_topic(topic, partitions=1)
        with Producer(masters, linger_ms=0) as p:
            p.send(topic, b"first incarnation").result(30)
        for round_ in range(ROUNDS):
            admin.delete_topic(topic)
            admin.create_topic(topic, partitions=1)
            values = [f"{round_}-{i}".encode() for i in range(PER_ROUND)]
            # a fresh producer asks the master for routes: they name the new incarnation
            with Producer(masters, linger_ms=0, retries=20, retry_backoff_ms=50) as p:
                futures = [p.send(topic, v) for v in values]
                acked = [v for v, f in zip(values, futures, strict=True)
                         if f.exception(60) is None]
            assert acked == values, f"round {round_}: not every record was acknowledged"
            wait_for(lambda: admin.describe_topic(topic).partitions[0].available, 30,
                     "the new incarnation to be hosted")
            got = read_back(masters, topic, len(acked))
            assert got == acked, f"round {round_}: acknowledged records lost or foreign " \
                                 f"ones served ({len(got)} read of {len(acked)})"
