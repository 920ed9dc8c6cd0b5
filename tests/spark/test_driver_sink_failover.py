"""A streaming query writing through the exactly-once sink keeps running when the leader of one
of its output partitions dies (issue 49 item 7): the output topic has 3 copies (min in-sync 2),
the sink stages copies on the in-sync followers, and stage and commit follow the route to the
new leader (lib/sink.py). The query ends by itself, in one run, with every row once.

Each test runs its own cluster (a broker dies): 1 master with fast failover and 3 brokers. The
source topic has one copy and is placed before broker 3 starts, so only the sink meets the
fault; broker 3 leads an output partition.
"""
from __future__ import annotations

import pytest

from broker.sinks import EXIT_AFTER_APPENDS_ENV
from lib.admin import AdminClient
from tests.cluster import Cluster
from tests.integration.fault_kit import FAST_FAILOVER, REPLICA_LAG_MAX_MS, wait_until
from tests.spark.drivers import finish_driver, produce, start_driver, topic_values

SOURCE, TARGET = "fo-in", "fo-out"
ROWS = 1500  # three micro-batches of 500 (tests/spark/stream_sink_worker.py): the fault
# hits the first commit, two more follow it
VICTIM = 3


@pytest.fixture
def cluster(tmp_path):
    master_conf, broker_conf = tmp_path / "master.toml", tmp_path / "broker.toml"
    master_conf.write_text("[master]\n" + "".join(f"{k} = {v}\n"
                                                  for k, v in FAST_FAILOVER.items()))
    broker_conf.write_text(f"[broker]\nreplica_lag_max_ms = {REPLICA_LAG_MAX_MS}\n")
    c = Cluster(tmp_path / "cluster", ["--config", str(master_conf)],
                ["--config", str(broker_conf)])
    try:
        yield c
    finally:
        c.stop_all()


def start(cluster: Cluster, victim_env: dict[str, str]) -> list[bytes]:
    """Brokers 1 and 2 with the source (one copy), then broker 3 (``victim_env``) and the
    output topic (3 copies, 3 partitions, one led by broker 3); returns the source rows."""
    cluster.start(2)
    masters = cluster.master_addresses
    with AdminClient(masters) as admin:
        admin.create_topic(SOURCE, partitions=2, durability="sync")
    sent = produce(masters, SOURCE, ROWS)
    cluster.broker_process(VICTIM).env.update(victim_env)
    cluster.start_broker(VICTIM)
    cluster.wait_brokers_registered()
    with AdminClient(masters) as admin:
        admin.create_topic(TARGET, partitions=3, replication_factor=3, min_insync_replicas=2,
                           durability="sync")
        wait_until(lambda: all(sorted(p.isr) == [1, 2, 3]
                               for p in admin.describe_topic(TARGET).partitions),
                   "the output partitions' three copies in sync")
        assert VICTIM in [p.broker_id for p in admin.describe_topic(TARGET).partitions]
    return sent


def run_query(cluster: Cluster, tmp_path) -> None:
    """One run of the query to its end (availableNow); fails when it dies."""
    log = tmp_path / "driver.log"
    driver = start_driver(cluster.master_addresses, SOURCE, TARGET, str(tmp_path / "ckpt"), log)
    assert finish_driver(driver) == 0, "the query died:\n" + log.read_text()[-4000:]


def test_a_stream_rides_through_an_output_leader_dying_in_a_commit(cluster, tmp_path):
    # broker 3 exits (os._exit: no goodbye, as a SIGKILL) in the middle of its first commit;
    # the old client retried its address for 2.5 s and the query died with Unavailable
    sent = start(cluster, {EXIT_AFTER_APPENDS_ENV: "1"})
    run_query(cluster, tmp_path)
    assert cluster.brokers[VICTIM].popen.wait(5) == 70, "broker 3 did not die in a commit"
    got = topic_values(cluster.master_addresses, TARGET)
    assert sorted(got) == sorted(b"seen:" + v for v in sent)

