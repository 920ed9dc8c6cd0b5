"""The exactly-once sink rides through the death of a partition's leader (issue 49 item 7),
with real broker processes on a topic with 3 copies (min in-sync 2): tasks stage copies on the
in-sync followers, and stage and commit follow the route to the new leader instead of retrying
the dead broker's address until they give up (lib/sink.py). Every record lands once."""
from __future__ import annotations

import time

import pytest

from lib.admin import AdminClient
from lib.producer.producer import Producer
from lib.sink import SinkClient
from tests.integration.fault_kit import FAST_FAILOVER, REPLICA_LAG_MAX_MS, wait_until
from tests.integration.test_producer_cluster import fetch_topic

TOPIC = "eos-failover"
PARTITIONS = 2
WARM = b"warm-up"  # one per partition, before the test (see the fixture)


@pytest.fixture
def cluster(replicated_cluster):
    cluster = replicated_cluster(3, master_settings=FAST_FAILOVER,
                                 replica_lag_max_ms=REPLICA_LAG_MAX_MS)
    with AdminClient(cluster.master_addresses) as admin:
        admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3,
                           min_insync_replicas=2, durability="sync")
        wait_until(lambda: all(sorted(p.isr) == [1, 2, 3]
                               for p in admin.describe_topic(TOPIC).partitions),
                   "every partition's three copies in sync")
    # An acks=all record per partition is answered once all three copies hold it: every
    # follower has learned the topic, so the first copy staged on it is not refused (a busy
    # CI run staged before a follower knew the topic and left it out of the holders).
    with Producer(cluster.master_addresses, acks="all", retries=50) as producer:
        for p in range(PARTITIONS):
            producer.send(TOPIC, WARM, partition=p).result(60)
    return cluster


def values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i:05d}".encode() for i in range(n)]


def leader(cluster, partition: int) -> int:
    with AdminClient(cluster.master_addresses) as admin:
        return admin.describe_topic(TOPIC).partitions[partition].broker_id


def stored(cluster) -> dict[int, list[bytes]]:
    return {p: [r.value for r in records if r.value != WARM]
            for p, records in fetch_topic(cluster, TOPIC).items()}


def test_a_commit_follows_the_leader_killed_between_stage_and_commit(cluster):
    victim = leader(cluster, 0)
    with SinkClient(cluster.master_addresses, batch_bytes=1024,
                    request_timeout_s=30) as sinks:
        staged, want = [], {p: [] for p in range(PARTITIONS)}
        for t in range(2):  # two tasks, each with about 10 batches per partition
            task = sinks.task("q", 0, f"{t}.0.{t}")
            for p in range(PARTITIONS):
                task.add(TOPIC, p, values(f"t{t}p{p}", 200))
                want[p] += values(f"t{t}p{p}", 200)
            staged.append(task.finish())
        cluster.brokers[victim].kill()
        started = time.monotonic()
        assert sinks.commit("q", 0, staged) == 800
        took = time.monotonic() - started
        assert leader(cluster, 0) != victim
        assert sinks.commit("q", 0, staged) == 0, "a replayed commit applied the batch again"
    assert took < 30, f"the commit took {took:.1f} s: longer than its request timeout"
    assert stored(cluster) == want


def test_a_task_keeps_staging_at_the_new_leader_when_the_leader_dies(cluster):
    victim = leader(cluster, 0)
    with SinkClient(cluster.master_addresses, batch_bytes=1024,
                    request_timeout_s=30) as sinks:
        task = sinks.task("q", 0, "0.0.0")
        task.add(TOPIC, 0, values("before", 200))
        cluster.brokers[victim].kill()
        task.add(TOPIC, 0, values("after", 200))  # restaged at the new leader
        task.add(TOPIC, 1, values("other", 50))
        assert sinks.commit("q", 0, [task.finish()]) == 450
    assert stored(cluster) == {0: values("before", 200) + values("after", 200),
                               1: values("other", 50)}


def test_followers_drop_their_copies_with_the_next_batch_so_failover_keeps_working(
        replicated_cluster):
    """A follower never gets a commit for a partition it follows: its copies go when the sink
    stages its next micro-batch, else its staging would fill (``sink_staging_bytes``), later
    copies would be refused and the leader's death would lose the batch (SinkStagingLost)."""
    cluster = replicated_cluster(3, master_settings=FAST_FAILOVER,
                                 replica_lag_max_ms=REPLICA_LAG_MAX_MS,
                                 sink_staging_bytes=64 * 1024)
    with AdminClient(cluster.master_addresses) as admin:
        admin.create_topic(TOPIC, partitions=1, replication_factor=3, min_insync_replicas=2,
                           durability="sync")
        wait_until(lambda: sorted(admin.describe_topic(TOPIC).partitions[0].isr) == [1, 2, 3],
                   "three copies in sync")
    victim = leader(cluster, 0)
    want = []
    with SinkClient(cluster.master_addresses, batch_bytes=4096) as sinks:
        for batch_id in range(8):  # ~28 KB each: three of them fill a follower's staging
            task = sinks.task("q", batch_id, "0.0.0")
            task.add(TOPIC, 0, values(f"b{batch_id}", 1000))
            want += values(f"b{batch_id}", 1000)
            if batch_id == 7:
                cluster.brokers[victim].kill()
            assert sinks.commit("q", batch_id, [task.finish()]) == 1000
    assert stored(cluster) == {0: want}
