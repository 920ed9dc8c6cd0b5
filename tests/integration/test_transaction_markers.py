"""Transactions on a real broker, over gRPC: transactional batches, the coordinator's markers
(``WriteTxnMarkers``, cluster credential only) and what pull consumers of each isolation level
see. The coordinator itself is the next step; here the test plays it with the cluster
secret."""
from __future__ import annotations

import os
import time

import pytest

from lib import PullConsumer, TopicPartition, errors
from lib.auth.settings import CLUSTER_SECRET_ENV, cluster_header
from lib.proto import broker_pb2 as pb
from lib.records import Record, assemble_batch, control_frame, encode_batch
from lib.rpc import invoke
from tests.integration.test_broker_cluster import Harness

pytestmark = pytest.mark.shared_cluster(brokers=1)


@pytest.fixture
def h(cluster):
    harness = Harness(cluster)
    yield harness
    harness.close()


def txn_batch(pid: int, seq: int, *values: bytes) -> bytes:
    return encode_batch([Record(v, timestamp=1) for v in values], producer_id=pid,
                        producer_epoch=0, base_sequence=seq, transactional=True)


def produce(h: Harness, topic: str, partition: int, batch: bytes) -> pb.ProduceResponse:
    return invoke(h.stub(topic, partition).Produce,
                  pb.ProduceRequest(topic=topic, partition=partition, batch=batch), 10)


def markers(h: Harness, topic: str, pid: int, commit: bool, partitions: list[int],
            metadata=None) -> list[pb.TxnMarkerResult]:
    meta = cluster_header(os.environ[CLUSTER_SECRET_ENV]) if metadata is None else metadata
    return list(invoke(h.stub(topic, 0).WriteTxnMarkers, pb.WriteTxnMarkersRequest(
        producer_id=pid, producer_epoch=0, commit=commit,
        partitions=[pb.TxnMarkerPartition(topic=topic, partition=p) for p in partitions]),
        10, meta).results)


def read(h: Harness, topic: str, partitions: int, isolation: str, until: int,
         wait_s: float = 30.0) -> list[bytes]:
    """Values a consumer of ``isolation`` reads from the start, until it holds ``until`` or
    ``wait_s`` passed (what it holds then)."""
    with PullConsumer(h.cluster.master_addresses, isolation_level=isolation,
                      fetch_max_wait_ms=100) as consumer:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got: list[bytes] = []
        deadline = time.monotonic() + wait_s
        while len(got) < until and time.monotonic() < deadline:
            got += [r.value for r in consumer.poll(timeout=0.5)]
        return sorted(got)


def test_consumers_see_transactions_by_their_isolation_level(h):
    h.create("txn", partitions=2)
    pid = 9_000_001
    produce(h, "txn", 0, txn_batch(pid, 0, b"c0", b"c1"))
    produce(h, "txn", 1, txn_batch(pid, 0, b"c2"))
    h.produce("txn", 0, [b"plain"])
    assert read(h, "txn", 2, "read_committed", 1, wait_s=3) == [], \
        "the open transaction holds partition 0 back; partition 1 holds only it"
    assert [r.offset for r in markers(h, "txn", pid, True, [0, 1])] == [3, 1]
    produce(h, "txn", 0, txn_batch(pid + 1, 0, b"a0"))
    produce(h, "txn", 1, txn_batch(pid + 1, 0, b"a1"))
    assert [r.offset for r in markers(h, "txn", pid + 1, False, [0, 1])] == [5, 3]
    assert markers(h, "txn", pid + 1, False, [0])[0].offset == -1, "a retried marker: none"
    assert read(h, "txn", 2, "read_committed", 4) == [b"c0", b"c1", b"c2", b"plain"]
    assert read(h, "txn", 2, "read_uncommitted", 6) == \
        [b"a0", b"a1", b"c0", b"c1", b"c2", b"plain"], "aborted records; never a marker"
    offsets = invoke(h.stub("txn", 0).ListOffsets, pb.ListOffsetsRequest(topic="txn"), 10)
    assert [(o.latest, o.last_stable) for o in offsets.partitions] == [(6, 6), (4, 4)]


def test_markers_need_the_cluster_credential_and_producers_cannot_forge_one(h):
    h.create("txn-forge", partitions=1)
    with pytest.raises(errors.PermissionDenied):
        markers(h, "txn-forge", 1, True, [0], metadata=())  # the admin's token: not enough
    forged = assemble_batch([control_frame(True, 1)], [0], [1])
    with pytest.raises(errors.CorruptRecord, match="control record"):
        produce(h, "txn-forge", 0, forged)
    assert invoke(h.stub("txn-forge", 0).ListOffsets, pb.ListOffsetsRequest(
        topic="txn-forge"), 10).partitions[0].latest == 0, "nothing stored"
