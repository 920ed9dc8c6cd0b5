"""Delayed and scheduled messages (lib/delay.py, broker/delayed.py) against real masters and
brokers: a delayed record is invisible until due, then delivered once in due order with its
key, tag and headers; deliver_at; a transaction's delayed records only if it commits; the
delay topic is reserved; and the errors of a careless caller."""
from __future__ import annotations

import datetime as dt
import time

import pytest

from lib import AdminClient, Producer, PullConsumer, TopicPartition, errors
from lib.auth.client import Credentials
from lib.delay import DELAY_TOPIC, H_SENT
from tests.integration.test_broker_cluster import Harness
from tests.integration.test_cli import tubeq
from tests.integration.test_consumer_common import wait_for

pytestmark = pytest.mark.shared_cluster(brokers=1)


@pytest.fixture
def h(cluster):
    harness = Harness(cluster)
    yield harness
    harness.close()


def make_topic(h: Harness, name: str, partitions: int = 2) -> None:
    try:
        h.create(name, partitions=partitions)
    except errors.TopicExists:
        pass


def collect(masters: str, topic: str, partitions: int, want: int, wait_s: float = 60.0,
            isolation: str = "read_committed") -> list:
    """Records of ``topic`` as they arrive, with the wall time each was polled, until
    ``want`` arrived (then a short while longer, to catch any extra)."""
    got = []
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    with PullConsumer(masters, isolation_level=isolation, fetch_max_wait_ms=50) as c:
        c.assign(tps)
        c.seek_to_beginning(*tps)
        deadline = time.monotonic() + wait_s
        extra_until = None
        while time.monotonic() < (extra_until or deadline):
            for r in c.poll(max_records=5000, timeout=0.2):
                got.append((time.time(), r))
            if len(got) >= want and extra_until is None:
                extra_until = time.monotonic() + 1.5
    return got


def test_a_delayed_record_waits_then_arrives_once_with_its_fields(h):
    make_topic(h, "dl-basic")
    masters = h.cluster.master_addresses
    with Producer(masters, linger_ms=1) as p:
        sent = time.time()
        md = p.send("dl-basic", b"later", key=b"k1", tag="t", headers={"h": b"v"},
                    delay=dt.timedelta(seconds=3)).result(30)
        p.send("dl-basic", b"now", key=b"k1").result(30)
    assert md.topic == DELAY_TOPIC and md.timestamp >= int(sent * 1000) + 3000
    got = collect(masters, "dl-basic", 2, 2)
    assert [r.value for _, r in got] == [b"now", b"later"]
    at, later = got[1]
    assert at >= sent + 3.0, "not delivered early"
    assert at <= sent + 3.0 + 5.0
    assert later.key == b"k1" and later.tag == "t" and later.headers["h"] == b"v"
    assert later.timestamp == md.timestamp, "the delivered record's timestamp is its due time"
    assert abs(int(later.headers[H_SENT]) / 1000 - sent) < 2
    assert later.partition == got[0][1].partition, "the key's partition, as for any send"


def test_deliver_at_and_due_order(h):
    make_topic(h, "dl-order", partitions=1)
    masters = h.cluster.master_addresses
    base = time.time() + 2
    with Producer(masters, linger_ms=1) as p:
        for i in (5, 1, 4, 0, 3, 2):  # sent out of order, due 0.3 s apart
            p.send("dl-order", f"v{i}".encode(), deliver_at=dt.datetime.fromtimestamp(
                base + 0.3 * i, dt.UTC))
        p.send("dl-order", b"s", delay=2.0)
        p.flush(30)
    got = collect(masters, "dl-order", 1, 7)
    values = [r.value for _, r in got]
    assert sorted(values) == sorted([b"s"] + [f"v{i}".encode() for i in range(6)])
    delayed = [v for v in values if v.startswith(b"v")]
    assert delayed == [f"v{i}".encode() for i in range(6)], "delivered in due order"
    for at, r in got:
        assert at >= r.timestamp / 1000 - 0.05, f"{r.value} delivered before it was due"


def test_delayed_records_of_an_aborted_transaction_are_never_delivered(h):
    make_topic(h, "dl-txn", partitions=1)
    masters = h.cluster.master_addresses
    with Producer(masters, transactional_id="dl-txn-writer", linger_ms=1) as p:
        with p.transaction():
            p.send("dl-txn", b"kept", delay=1.0)
        p.begin()
        p.send("dl-txn", b"aborted", delay=1.0)
        p.flush(30)
        p.abort()
    got = collect(masters, "dl-txn", 1, 1, isolation="read_uncommitted")
    assert [r.value for _, r in got] == [b"kept"]


def test_bad_input_is_refused_with_a_clear_error(h):
    make_topic(h, "dl-bad", partitions=1)
    masters = h.cluster.master_addresses
    with Producer(masters, linger_ms=1) as p:
        with pytest.raises(errors.InvalidArgument, match="must not be negative"):
            p.send("dl-bad", b"x", delay=-1)
        with pytest.raises(errors.InvalidArgument, match="over the cluster's maximum"):
            p.send("dl-bad", b"x", delay=dt.timedelta(days=400))
        with pytest.raises(errors.InvalidArgument, match="not both"):
            p.send("dl-bad", b"x", delay=1, deliver_at=time.time())
        with pytest.raises(errors.InvalidArgument, match="timezone-aware"):
            p.send("dl-bad", b"x", deliver_at=dt.datetime.now())
        with pytest.raises(errors.InvalidArgument, match="reserved"):
            p.send("dl-bad", b"x", delay=1, headers={"tubeq.delay.topic": b"other"})
        with pytest.raises(errors.UnknownTopic):
            p.send("dl-no-such-topic", b"x", delay=1)
    with AdminClient(masters) as admin:
        for call in (lambda: admin.create_topic(DELAY_TOPIC),
                     lambda: admin.delete_topic(DELAY_TOPIC)):
            with pytest.raises(errors.InvalidArgument, match="reserved for the cluster"):
                call()


def test_a_delayed_send_needs_produce_on_its_target_topic_only(h):
    """The delay topic takes no ACL of its own: the broker checks each record's target, and
    the mover delivers as the cluster."""
    make_topic(h, "dl-acl", partitions=1)
    make_topic(h, "dl-acl-other", partitions=1)
    masters = h.cluster.master_addresses
    carol = Credentials("carol-dl", "carol-password-123")
    with AdminClient(masters, credentials=h.cluster.admin_credentials()) as root:
        root.add_user(carol.user, carol.password)
        root.add_acl(f"user:{carol.user}", "produce", "topic", "dl-acl")
        root.add_acl(f"user:{carol.user}", "describe", "topic", "dl-acl-other")

    def delayed_to(topic: str) -> bool | None:
        """True: sent; False: refused; None: the broker has not learned the delay topic yet
        (the first test of a fresh cluster; a CI run failed on it)."""
        with Producer(masters, credentials=carol, request_timeout_ms=5000, retries=0) as p:
            try:
                p.send(topic, b"from carol", delay=0.5).result(10)
                return True
            except errors.PartitionNotHosted:
                return None
            except errors.PermissionDenied as err:
                assert f"may not produce on topic {topic!r}" in err.message
                return False

    wait_for(lambda: delayed_to("dl-acl"), 15, "carol's ACL on the broker")
    assert delayed_to("dl-acl-other") is False
    got = collect(masters, "dl-acl", 1, 1)
    assert [r.value for _, r in got] == [b"from carol"]
    assert collect(masters, "dl-acl-other", 1, 0, wait_s=3) == []


def test_the_cli_sends_delayed_lines(h):
    make_topic(h, "dl-cli", partitions=1)
    masters = h.cluster.master_addresses
    started = time.time()
    done = tubeq(masters, "produce", "dl-cli", "--delay", "2", stdin=b"one\ntwo\n")
    out = (done.stdout + done.stderr).decode()
    assert done.returncode == 0, out
    assert "produced 2 messages to dl-cli (delayed)" in out
    got = collect(masters, "dl-cli", 1, 2)
    assert sorted(r.value for _, r in got) == [b"one", b"two"]
    assert all(at >= started + 2 for at, _ in got)
    bad = tubeq(masters, "produce", "dl-cli", "--delay", "-3", stdin=b"x\n")
    assert bad.returncode != 0 and "must not be negative" in (bad.stdout + bad.stderr).decode()
