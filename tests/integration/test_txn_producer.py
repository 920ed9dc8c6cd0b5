"""The transactional Producer (lib/producer/transaction.py) against real masters and brokers:
commit and abort over two topics, the context manager, many transactions in a row (each end
bumps the epoch and restarts the sequences), a zombie instance fenced, and the errors a
careless caller gets."""
from __future__ import annotations

import time

import pytest

from lib import AdminClient, Producer, PullConsumer, TopicPartition, errors
from lib.errors import ConfigError
from lib.types import GroupMetadata
from tests.integration.reads import read_to_end
from tests.integration.test_broker_cluster import Harness

pytestmark = pytest.mark.shared_cluster(brokers=2)
TOPICS = ("tpa", "tpb")
PARTITIONS = 3


@pytest.fixture
def h(cluster):
    harness = Harness(cluster)
    for topic in TOPICS:
        try:
            harness.create(topic, partitions=PARTITIONS)
        except errors.TopicExists:
            pass
    yield harness
    harness.close()


def producer(h: Harness, tid: str, **settings) -> Producer:
    return Producer(h.cluster.master_addresses, transactional_id=tid, linger_ms=1, **settings)


def read(h: Harness, isolation: str) -> dict[TopicPartition, list[bytes]]:
    """Values per partition, in offset order, that a consumer of ``isolation`` reads from the
    start of every partition up to its end now."""
    tps = [TopicPartition(t, p) for t in TOPICS for p in range(PARTITIONS)]
    return {tp: [r.value for r in records]
            for tp, records in read_to_end(h.cluster.master_addresses, tps, isolation).items()}


def values(got: dict[TopicPartition, list[bytes]], prefix: bytes) -> list[bytes]:
    return sorted(v for vs in got.values() for v in vs if v.startswith(prefix))


def every(tag: str) -> list[tuple[str, int, bytes]]:
    return [(t, p, f"{tag}-{t}{p}".encode()) for t in TOPICS for p in range(PARTITIONS)]


def test_commit_and_abort_over_two_topics_and_the_context_manager(h):
    with producer(h, "txp-basic") as p:
        p.begin()
        for t, part, v in every("c1"):
            p.send(t, v, partition=part)
        p.commit()
        p.begin()
        for t, part, v in every("a1"):
            p.send(t, v, partition=part)
        p.abort()
        with p.transaction():
            for t, part, v in every("c2"):
                p.send(t, v, partition=part)
        with pytest.raises(RuntimeError, match="the block failed"):
            with p.transaction():
                for t, part, v in every("a2"):
                    p.send(t, v, partition=part)
                p.flush()  # stored, then aborted
                raise RuntimeError("the block failed")
    committed = read(h, "read_committed")
    assert values(committed, b"c") == sorted(v for tag in ("c1", "c2") for *_, v in every(tag))
    assert not values(committed, b"a"), "nothing of an aborted transaction"
    seen = read(h, "read_uncommitted")
    assert len(values(seen, b"a")) == 12, "read_uncommitted sees the aborted ones too"


def test_many_transactions_in_a_row_keep_their_order_per_partition(h):
    """Each end bumps the epoch and every partition starts again at sequence 0: twenty
    transactions of 12 records, with an abort every fifth."""
    with producer(h, "txp-many") as p:
        for n in range(20):
            with pytest.raises(ZeroDivisionError) if n % 5 == 4 else _nothing():
                with p.transaction():
                    for i in range(2):
                        for t, part, _ in every(""):
                            p.send(t, f"m{n:02d}-{i}-{t}{part}".encode(), partition=part)
                    if n % 5 == 4:
                        raise ZeroDivisionError
    got = read(h, "read_committed")
    for tp, vs in got.items():
        mine = [v for v in vs if v.startswith(b"m")]
        assert len(mine) == 16 * 2, tp
        assert mine == sorted(mine), f"{tp}: in commit order"
        assert not [v for v in mine if int(v[1:3]) % 5 == 4]


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_a_zombie_is_fenced_and_nothing_it_sends_after_the_fence_is_seen(h):
    old = producer(h, "txp-zombie")
    try:
        old.begin()
        old.send("tpa", b"zombie-before", partition=0)
        old.flush()
        with producer(h, "txp-zombie") as new:  # fences old, aborts its transaction
            with pytest.raises(errors.ProducerFenced):
                old.send("tpa", b"zombie-after", partition=1)
                old.flush()
                old.commit()
            with pytest.raises(errors.ProducerFenced, match="fenced"):
                old.begin()
            with new.transaction():
                new.send("tpa", b"new-instance", partition=1)
    finally:
        old.close()
    got = read(h, "read_committed")
    assert values(got, b"new-") == [b"new-instance"]
    assert not values(got, b"zombie"), "neither before nor after the fence"


def test_a_careless_caller_gets_errors_that_name_the_problem(h):
    with producer(h, "txp-careless") as p:
        with pytest.raises(errors.InvalidTxnState, match="call begin"):
            p.send("tpa", b"x")
        with pytest.raises(errors.InvalidTxnState, match="no transaction open"):
            p.commit()
        with pytest.raises(errors.InvalidTxnState, match="no transaction open"):
            p.abort()
        p.begin()
        with pytest.raises(errors.InvalidTxnState, match="already has a transaction"):
            p.begin()
        p.commit()  # empty: ends locally, no coordinator call
        assert p.metrics()["records_acked"] == 0
        p.begin()
        with pytest.raises(errors.UnknownTopic):
            p.send("no-such-topic", b"x")
        p.send("tpb", b"fine", partition=2)
        p.commit()
    with Producer(h.cluster.master_addresses) as plain:
        with pytest.raises(errors.InvalidTxnState, match="no transactional_id"):
            plain.begin()
    with pytest.raises(ConfigError, match="idempotent=False with a transactional_id"):
        Producer(h.cluster.master_addresses, transactional_id="x", idempotent=False)
    with pytest.raises(ConfigError, match="needs acks='all'"):
        Producer(h.cluster.master_addresses, transactional_id="x", acks="1")
    with pytest.raises(errors.InvalidName):
        Producer(h.cluster.master_addresses, transactional_id="bad name!")
    assert values(read(h, "read_committed"), b"fine") == [b"fine"]


def test_offsets_sent_in_a_transaction_count_only_when_it_commits(h):
    """send_offsets: pending (UnstableOffsetCommit to a consumer that fetches them) until
    the transaction ends; committed by its commit, dropped by its abort."""
    tp = TopicPartition("tpa", 0)
    h.produce("tpa", 0, [b"in-%d" % i for i in range(10)])  # input to commit offsets of
    with producer(h, "txp-offsets") as p, PullConsumer(
            h.cluster.master_addresses, group="g-offsets", rpc_timeout_s=1) as consumer:
        consumer.assign([tp])
        p.begin()
        p.send("tpb", b"out-1", partition=0)
        p.send_offsets({tp: 3}, "g-offsets")
        with pytest.raises(errors.UnstableOffsetCommit, match="g-offsets"):
            consumer.committed(tp)
        with AdminClient(h.cluster.master_addresses) as admin:
            assert admin.describe_transaction("txp-offsets").offsets == (
                ("g-offsets", "tpa", 0, 3),)
            with pytest.raises(errors.UnknownTransactionalId, match="txp-never"):
                admin.describe_transaction("txp-never")
        p.commit()
        assert consumer.committed(tp) == 3
        with p.transaction():  # offsets alone make a transaction too
            p.send_offsets({tp: 5}, "g-offsets")
        assert consumer.committed(tp) == 5
        p.begin()
        p.send_offsets({tp: 9}, "g-offsets")
        p.abort()
        assert consumer.committed(tp) == 5, "an aborted transaction's offsets never count"
        with pytest.raises(errors.InvalidTxnState, match="call begin"):
            p.send_offsets({tp: 1}, "g-offsets")
        p.begin()
        with pytest.raises(errors.InvalidArgument, match="integers >= 0"):
            p.send_offsets({tp: -1}, "g-offsets")
        p.abort()


def test_a_member_that_lost_its_partitions_cannot_send_their_offsets(h):
    tp = TopicPartition("tpa", 1)
    h.produce("tpa", 1, [b"in"])
    with PullConsumer(h.cluster.master_addresses, group="g-fence") as member:
        member.subscribe(["tpa"])
        deadline = time.monotonic() + 60
        while True:  # until the member claimed tp (FetchOffsets at its generation)
            assert time.monotonic() < deadline
            member.poll(timeout=0.2)
            try:
                if tp in member.assignment() and member.position(tp) >= 0:
                    break
            except errors.Unavailable:
                pass
        now = member.group_metadata()
        with producer(h, "txp-fence") as p:
            p.begin()
            stale = GroupMetadata(now.group, "gone-member", now.generation - 1)
            with pytest.raises(errors.Fenced):
                p.send_offsets({tp: 0}, stale)
            with pytest.raises(errors.InvalidTxnState, match="abort"):
                p.commit()
            p.abort()
            with p.transaction():
                p.send_offsets({tp: 0}, now)
        assert member.committed(tp) == 0
