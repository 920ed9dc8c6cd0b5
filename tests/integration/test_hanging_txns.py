"""The broker's defence against hanging transactions (broker/hanging_txns.py), over real
processes with ``txn_hanging_after_ms`` at 1 s: a transactional batch no coordinator will ever
end (a producer id no transactional_id holds) stops read_committed readers only until the
broker has asked the coordinator and aborted it itself, while a transaction the coordinator
holds open is left alone however long it stays open."""
from __future__ import annotations

import time

import pytest

from lib import Producer
from lib.producer.ids import init_producer_id
from lib.proto import broker_pb2 as pb
from lib.records import Record, encode_batch
from lib.rpc import invoke
from tests.integration.test_broker_cluster import Harness, values_of


@pytest.fixture
def h(cluster_factory, tmp_path):
    conf = tmp_path / "broker.toml"
    conf.write_text("[broker]\ntxn_hanging_after_ms = 1000\n")
    cluster = cluster_factory(1, broker_args=["--config", str(conf)])
    harness = Harness(cluster)
    harness.create("hang", partitions=2)
    yield harness
    harness.close()


def last_stable(h: Harness, partition: int) -> tuple[int, int]:
    """(last stable offset, log end) of a partition of "hang"."""
    po = invoke(h.stub("hang", partition).ListOffsets,
                pb.ListOffsetsRequest(topic="hang", partitions=[partition]), 10).partitions[0]
    return po.last_stable, po.latest


def test_a_transaction_no_coordinator_will_end_is_aborted_by_the_broker(h):
    masters = h.cluster.master_addresses
    with Producer(masters, transactional_id="hang-legit",
                  transaction_timeout_ms=600_000) as legit:
        legit.begin()
        legit.send("hang", b"legit-open", partition=0)
        legit.flush()
        # A batch flagged transactional under a plain idempotent producer id: nothing will
        # ever write its marker (as a zombie's batch that lands after its abort marker).
        pid, _ = init_producer_id(h.master, "forger", 10)
        forged = encode_batch([Record(b"forged", timestamp=1)], producer_id=pid,
                              producer_epoch=0, base_sequence=0, transactional=True)
        invoke(h.stub("hang", 1).Produce,
               pb.ProduceRequest(topic="hang", partition=1, batch=forged), 10)
        h.produce("hang", 1, [b"after-forged"])
        assert last_stable(h, 1) == (0, 2), "read_committed readers stop at the forged batch"
        deadline = time.monotonic() + 60
        while last_stable(h, 1)[0] == 0:
            assert time.monotonic() < deadline, "the broker never aborted the forged batch"
            time.sleep(0.2)
        assert last_stable(h, 1) == (3, 3), "aborted by a marker of its own: offset 2"
        assert last_stable(h, 0)[0] == 0, \
            "the coordinator's open transaction, as old, is left open"
        legit.commit()
    assert last_stable(h, 0) == (2, 2)
    pd = h.fetch("hang", 1, 0, read_committed=True)
    assert values_of(pd) == [b"after-forged"], "the forged record is aborted, never read"
