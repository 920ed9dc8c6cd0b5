"""Transactions through the coordinator on the masters (master/transactions.py), over real
processes: transactional batches produced raw over gRPC, the coordinator's calls
(InitProducerId with a transactional_id, AddPartitionsToTxn, EndTxn), and what
read_committed pull consumers see. The failover case runs 3 masters of its own."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter

import pytest

from lib import PullConsumer, TopicPartition, errors
from lib.proto import admin_pb2 as apb
from lib.proto import admin_pb2_grpc, master_pb2_grpc
from lib.proto import broker_pb2 as pb
from lib.proto import master_pb2 as mpb
from lib.records import Record, encode_batch
from lib.rpc import invoke
from tests.cluster import ROOT
from tests.integration.test_broker_cluster import Harness

pytestmark = pytest.mark.shared_cluster(brokers=2)
TOPICS = ("txa", "txb")


@pytest.fixture
def h(cluster):
    harness = Harness(cluster)
    yield harness
    harness.close()


class RawTxnProducer:
    """A transactional producer by hand: the coordinator's calls and raw transactional
    batches (sequence numbers per partition, from 0 at each new epoch)."""

    def __init__(self, h: Harness, tid: str, timeout_ms: int = 0) -> None:
        self.h, self.tid, self.timeout_ms = h, tid, timeout_ms
        self.pid, self.epoch, self.seq = -1, -1, Counter()

    def master(self, method: str, request, timeout: float | None = None):
        return self.h.master.call(master_pb2_grpc.MasterStub, method, request, timeout=timeout)

    def init(self) -> RawTxnProducer:
        res = self.master("InitProducerId", mpb.InitProducerIdRequest(
            client_id="test", transactional_id=self.tid,
            transaction_timeout_ms=self.timeout_ms), timeout=30)
        self.pid, self.epoch, self.seq = res.producer_id, res.producer_epoch, Counter()
        return self

    def add(self, partitions: list[tuple[str, int]]) -> None:
        self.master("AddPartitionsToTxn", mpb.AddPartitionsToTxnRequest(
            transactional_id=self.tid, producer_id=self.pid, producer_epoch=self.epoch,
            partitions=[mpb.TxnTopicPartition(topic=t, partition=p) for t, p in partitions]))

    def send(self, topic: str, partition: int, *values: bytes) -> pb.ProduceResponse:
        batch = encode_batch([Record(v, timestamp=1) for v in values], producer_id=self.pid,
                             producer_epoch=self.epoch,
                             base_sequence=self.seq[(topic, partition)], transactional=True)
        res = invoke(self.h.stub(topic, partition).Produce,
                     pb.ProduceRequest(topic=topic, partition=partition, batch=batch), 10)
        self.seq[(topic, partition)] += len(values)
        return res

    def end(self, commit: bool, timeout: float | None = None) -> None:
        """The next transaction goes on under the epoch the end bumped (KIP-890 part 2)."""
        res = self.master("EndTxn", mpb.EndTxnRequest(
            transactional_id=self.tid, producer_id=self.pid, producer_epoch=self.epoch,
            commit=commit), timeout=timeout)
        if (res.producer_id, res.producer_epoch) != (self.pid, self.epoch):
            self.pid, self.epoch, self.seq = res.producer_id, res.producer_epoch, Counter()


def tubeq(h: Harness, *args: str):
    """The CLI's --json answer (it logs in as the admin, from the environment)."""
    res = subprocess.run([sys.executable, "-m", "lib.cli", "--masters",
                          h.cluster.master_addresses, *args], capture_output=True, timeout=60,
                         cwd=ROOT)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def every_partition(partitions: int = 3) -> list[tuple[str, int]]:
    return [(t, p) for t in TOPICS for p in range(partitions)]


def ensure_topics(h: Harness, partitions: int = 3) -> None:
    have = {t.topic for t in h.admin("ListTopics", apb.ListTopicsRequest()).topics}
    for topic in TOPICS:
        if topic not in have:
            h.create(topic, partitions=partitions)


def transactions(h: Harness) -> dict[str, apb.TransactionDescription]:
    listed = h.admin("ListTransactions", apb.ListTransactionsRequest(all=True)).transactions
    return {t.transactional_id: t for t in listed}


def read(h: Harness, until: int, wait_s: float = 30.0, isolation: str = "read_committed",
         topics: tuple[str, ...] = TOPICS) -> list[bytes]:
    """Values (sorted) a consumer of ``isolation`` reads from the start of every partition of
    ``topics``, until it holds ``until`` of them or ``wait_s`` passed."""
    with PullConsumer(h.cluster.master_addresses, isolation_level=isolation,
                      fetch_max_wait_ms=100) as consumer:
        tps = [TopicPartition(t, p) for t in topics for p in range(3)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got: list[bytes] = []
        deadline = time.monotonic() + wait_s
        while len(got) < until and time.monotonic() < deadline:
            got += [r.value for r in consumer.poll(timeout=0.5)]
        return sorted(got)


def test_commit_and_abort_through_the_coordinator_over_two_topics(h):
    ensure_topics(h)
    producer = RawTxnProducer(h, "tx-basic").init()
    assert producer.epoch == 0 and producer.pid >= 1
    producer.add(every_partition())
    producer.add(every_partition()[:2])  # again: nothing changes
    for t, p in every_partition():
        producer.send(t, p, f"{t}{p}-c".encode())
    assert transactions(h)["tx-basic"].state == "ONGOING"
    assert len(transactions(h)["tx-basic"].partitions) == 6
    producer.end(commit=True)
    assert transactions(h)["tx-basic"].state == "COMPLETE_COMMIT"
    producer.end(commit=True)  # a retry after a lost answer: success
    with pytest.raises(errors.InvalidTxnState, match="COMPLETE_COMMIT"):
        producer.end(commit=False)

    producer.add(every_partition())
    for t, p in every_partition():
        producer.send(t, p, f"{t}{p}-a".encode())
    producer.end(commit=False)
    assert transactions(h)["tx-basic"].state == "COMPLETE_ABORT"
    want = sorted(f"{t}{p}-c".encode() for t, p in every_partition())
    assert read(h, len(want)) == want
    assert read(h, len(want) + 1, wait_s=2) == want, "nothing aborted, no marker"
    seen = read(h, 13, wait_s=3, isolation="read_uncommitted")
    assert len(seen) == 12, "read_uncommitted sees both transactions, never a marker"


def test_a_transaction_with_no_partition_ends_at_once_and_errors_name_what_is_wrong(h):
    ensure_topics(h)
    producer = RawTxnProducer(h, "tx-empty").init()
    producer.end(commit=True)
    assert transactions(h)["tx-empty"].state == "COMPLETE_COMMIT"
    with pytest.raises(errors.UnknownTransactionalId, match="tx-never"):
        RawTxnProducer(h, "tx-never").add([("txa", 0)])
    with pytest.raises(errors.UnknownTopic, match="no-such-topic"):
        producer.add([("no-such-topic", 0)])
    with pytest.raises(errors.UnknownPartition, match="no partition 7"):
        producer.add([("txa", 7)])
    with pytest.raises(errors.InvalidArgument, match="transaction_max_timeout_ms"):
        RawTxnProducer(h, "tx-long", timeout_ms=3_600_000).init()


def test_a_new_instance_fences_the_old_and_aborts_its_open_transaction(h):
    ensure_topics(h)
    old = RawTxnProducer(h, "tx-fence").init()
    old.add(every_partition())
    for t, p in every_partition():
        old.send(t, p, b"zombie-" + f"{t}{p}".encode())
    new = RawTxnProducer(h, "tx-fence").init()
    assert new.pid == old.pid and new.epoch > old.epoch
    assert transactions(h)["tx-fence"].state == "EMPTY"
    with pytest.raises(errors.ProducerFenced):
        old.add([("txa", 0)])
    with pytest.raises(errors.ProducerFenced):
        old.end(commit=True)
    with pytest.raises(errors.ProducerFenced):
        old.send("txa", 1, b"late-zombie")  # the abort marker fenced its epoch there
    new.add([("txb", 2)])
    new.send("txb", 2, b"new-instance")
    new.end(commit=True)
    values = read(h, 100, wait_s=3)
    assert b"new-instance" in values
    assert not [v for v in values if v.startswith((b"zombie", b"late-zombie"))]


def test_a_transaction_left_open_is_aborted_after_its_timeout(h):
    ensure_topics(h)
    producer = RawTxnProducer(h, "tx-timeout", timeout_ms=2000).init()
    producer.add([("txa", 2)])
    producer.send("txa", 2, b"abandoned")
    h.produce("txa", 2, [b"after-abandoned"])
    deadline = time.monotonic() + 30
    while transactions(h)["tx-timeout"].state != "COMPLETE_ABORT":
        assert time.monotonic() < deadline, transactions(h)["tx-timeout"]
        time.sleep(0.2)
    assert transactions(h)["tx-timeout"].producer_epoch == producer.epoch + 1
    values = read(h, 100, wait_s=3, topics=("txa",))
    assert b"after-abandoned" in values and b"abandoned" not in values
    with pytest.raises(errors.ProducerFenced):
        producer.end(commit=True)
    with pytest.raises(errors.ProducerFenced):
        producer.send("txa", 2, b"zombie-after-timeout")


def test_an_admin_aborts_an_open_transaction(h):
    ensure_topics(h)
    producer = RawTxnProducer(h, "tx-admin").init()
    producer.add([("txb", 0)])
    producer.send("txb", 0, b"admin-aborted")
    open_ = {t.transactional_id for t in h.admin(
        "ListTransactions", apb.ListTransactionsRequest()).transactions}
    assert "tx-admin" in open_
    listed = tubeq(h, "txn", "list", "--json")
    assert {"transactional_id": "tx-admin", "state": "ONGOING", "partitions": [["txb", 0]]} \
        .items() <= next(t for t in listed if t["transactional_id"] == "tx-admin").items()
    described = tubeq(h, "transaction", "describe", "tx-admin", "--json")
    assert (described["state"], described["partitions"]) == ("ONGOING", [["txb", 0]])
    assert tubeq(h, "transaction", "abort", "tx-admin", "--json")["state"] == "COMPLETE_ABORT"
    with pytest.raises(errors.ProducerFenced):
        producer.end(commit=True)
    with pytest.raises(errors.InvalidTxnState, match="no transaction to abort"):
        h.master.call(admin_pb2_grpc.AdminStub, "AbortTransaction",
                      apb.AbortTransactionRequest(transactional_id="tx-admin"))
