"""A transaction on an ``async`` topic with one copy, whose broker keeps acknowledged records
in its memory cache (flushed every 10 minutes here): the producer checks before it commits
that each partition still holds, on disk, every record it acknowledged there
(``Broker.SyncTxn``). A broker SIGKILLed between the acknowledgements and the commit lost
them: the commit refuses with TxnRecordsLost and the transaction is aborted, never committed
without them; the producer goes on with its next transaction."""
from __future__ import annotations

import pytest

from lib import Producer, errors
from tests.integration.test_broker_cluster import Harness, values_of


@pytest.fixture
def h(cluster_factory, tmp_path):
    conf = tmp_path / "broker.toml"
    conf.write_text("[broker.store]\ncache_flush_interval_ms = 600000\n"
                    "cache_block_bytes = 67108864\ncache_block_messages = 1000000\n")
    cluster = cluster_factory(1, broker_args=["--config", str(conf)])
    harness = Harness(cluster)
    harness.create("txn-async", partitions=1, durability="async")
    yield harness
    harness.close()


def committed(h: Harness) -> list[bytes]:
    return values_of(h.fetch("txn-async", 0, 0, read_committed=True))


def test_a_commit_never_completes_without_records_a_crash_lost(h):
    with Producer(h.cluster.master_addresses, transactional_id="txn-async-writer",
                  linger_ms=0) as producer:
        with producer.transaction():  # no crash: the check fsyncs them, the commit lands
            for i in range(3):
                producer.send("txn-async", b"kept-%d" % i, partition=0)
        assert committed(h) == [b"kept-0", b"kept-1", b"kept-2"]

        with pytest.raises(errors.TxnRecordsLost, match="holds 0 of the 5 records"):
            with producer.transaction():
                for i in range(5):
                    producer.send("txn-async", b"lost-%d" % i, partition=0)
                producer.flush()  # acknowledged, in the broker's cache only
                h.cluster.brokers[1].kill()
                h.cluster.start_broker(1)
                h.cluster.wait_brokers_registered(60)
                h.wait_hosted("txn-async", 0, timeout=60)
        assert committed(h) == [b"kept-0", b"kept-1", b"kept-2"], "nothing of it committed"

        with producer.transaction():  # the next transaction, under the bumped epoch
            producer.send("txn-async", b"after", partition=0)
    assert committed(h) == [b"kept-0", b"kept-1", b"kept-2", b"after"]
