"""The exactly-once sink on a replicated topic, with real broker processes: the sink's batch
ids (marks) and the intent of a commit in progress travel with the partition, so a new leader
completes a micro-batch the old leader died in the middle of, once, and skips one it had
committed (broker/sinks.py); the client follows the failover within one commit call."""
from __future__ import annotations

import time

import pytest

from broker.sinks import EXIT_AFTER_APPENDS_ENV
from lib.admin import AdminClient
from lib.errors import TubeqError
from lib.sink import SinkClient
from tests.integration.fault_kit import (
    FAST_FAILOVER,
    REPLICA_LAG_MAX_MS,
    wait_until,
)
from tests.integration.test_producer_cluster import fetch_topic

TOPIC = "eos-rep"


@pytest.fixture
def cluster(replicated_cluster):
    return replicated_cluster(2, master_settings=FAST_FAILOVER,
                              replica_lag_max_ms=REPLICA_LAG_MAX_MS)


def values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i:05d}".encode() for i in range(n)]




def partition(admin: AdminClient):
    return admin.describe_topic(TOPIC).partitions[0]


def stored(cluster) -> list[bytes]:
    return [r.value for r in fetch_topic(cluster, TOPIC)[0]]


def commit(sinks: SinkClient, batch_id: int, attempt: int, prefix: str, n: int) -> int:
    """Stage ``n`` records of micro-batch ``batch_id`` (about 20 batches) and commit them,
    retrying while the partition's leadership moves (what Spark's replay amounts to)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            sinks.routes.invalidate(TOPIC)
            task = sinks.task("q", batch_id, f"0.{attempt}")
            task.add(TOPIC, 0, values(prefix, n))
            return sinks.commit("q", batch_id, [task.finish()])
        except TubeqError:
            if time.monotonic() > deadline:
                raise
            attempt += 100
            time.sleep(0.3)


def test_a_new_leader_completes_a_half_applied_commit_once_and_skips_a_done_one(cluster):
    with AdminClient(cluster.master_addresses) as admin:
        admin.create_topic(TOPIC, partitions=1, replication_factor=2, durability="sync")
        first = partition(admin).broker_id
        other = 3 - first
        # the follower gets the fault: it exits after 3 appends of a commit once it leads
        cluster.brokers[other].stop()
        # out of the ISR first: else the wait below can pass on the ISR from before the stop,
        # the leader shrink it an instant later, and stopping the leader leave no one eligible
        wait_until(lambda: partition(admin).isr == [first], "the stopped follower out of the ISR")
        cluster.brokers[other].env[EXIT_AFTER_APPENDS_ENV] = "3"
        cluster.start_broker(other)
        wait_until(lambda: sorted(partition(admin).isr) == [1, 2], "the follower back in sync")
        cluster.brokers[first].stop()  # hands the leadership to it
        wait_until(lambda: partition(admin).broker_id == other, "the handoff")
        cluster.start_broker(first)
        wait_until(lambda: sorted(partition(admin).isr) == [1, 2], "both in sync")

        with SinkClient(cluster.master_addresses, batch_bytes=1024) as sinks:
            assert commit(sinks, 0, 0, "w", 20) == 20
            # batch 1: the leader dies after 3 of its appends; the commit follows the failover
            # to the new leader, which holds the task's copies, finds the intent and the
            # appended records it copied, and adds only the rest
            task = sinks.task("q", 1, "0.0")
            task.add(TOPIC, 0, values("a", 400))
            assert sinks.commit("q", 1, [task.finish()]) == 400
            assert cluster.brokers[other].popen.wait(30) == 70
            assert partition(admin).broker_id == first
            assert commit(sinks, 1, 1, "a", 400) == 0, "batch 1 applied twice"
            del cluster.brokers[other].env[EXIT_AFTER_APPENDS_ENV]
            cluster.start_broker(other)
            wait_until(lambda: sorted(partition(admin).isr) == [1, 2], "both in sync again")

            # batch 2 is answered, then its leader is killed: the new leader has its mark
            assert commit(sinks, 2, 0, "b", 50) == 50
            cluster.brokers[first].kill()
            wait_until(lambda: partition(admin).broker_id == other, "the second failover")
            assert commit(sinks, 2, 1, "b", 50) == 0, "batch 2 applied twice"
            assert commit(sinks, 3, 0, "c", 10) == 10
    assert stored(cluster) == values("w", 20) + values("a", 400) + values("b", 50) + \
        values("c", 10)
