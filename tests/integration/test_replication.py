"""Replication across real broker processes: followers copy their leaders byte for byte, and
consumers read only what every in-sync replica holds (the high watermark)."""
from __future__ import annotations

import signal
import time
import urllib.request

import pytest

from lib import errors
from lib.admin import AdminClient
from lib.consumer.pull import PullConsumer
from lib.producer.producer import Producer
from lib.types import TopicPartition
from storage.store import Store
from tests.cluster import Cluster
from tests.helpers import read_all


@pytest.fixture
def replicated(replicated_cluster):
    return replicated_cluster(2)


def _copies(cluster: Cluster, broker_id: int, topic: str, partitions: list[int]) -> dict:
    """partition -> its records on one broker, read from its files (the broker is stopped;
    the store is opened with every partition it holds, as the broker opens it)."""
    store = Store(cluster.brokers[broker_id].data_dir / "topics", topic, 0, partitions)
    try:
        return {p: [(r.offset, r.key, r.value, r.tag, r.timestamp) for r in read_all(store, p)]
                for p in partitions}
    finally:
        store.close()


def _metrics(cluster: Cluster) -> str:
    address = cluster.masters[0].info["metrics"]
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as r:
        return r.read().decode()


def _poll_all(consumer: PullConsumer, want: int, timeout: float) -> list:
    got, deadline = [], time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got += consumer.poll(timeout=0.2)
    return got


@pytest.mark.parametrize("stream_port", [0, -1], ids=["stream", "grpc"])
def test_followers_copy_their_leaders_byte_for_byte(replicated_cluster, stream_port):
    """Over the leaders' replica streams (broker/replica_stream.py), and over gRPC alone."""
    replicated = replicated_cluster(2, replica_stream_port=stream_port)
    with AdminClient(replicated.master_addresses) as admin:
        info = admin.create_topic("copied", partitions=2, stores=1, replication_factor=2)
        assert [sorted(p.replicas) for p in info.partitions] == [[1, 2], [1, 2]]
        assert {p.broker_id for p in info.partitions} == {1, 2}, "one leader on each broker"
        assert all(p.isr == p.replicas and p.leader_epoch == 1 for p in info.partitions)
    with Producer(replicated.master_addresses) as producer:
        for i in range(600):
            producer.send("copied", b"v%d" % i, key=b"k%d" % (i % 7), partition=i % 2,
                          tag="even" if i % 2 == 0 else None)
        producer.flush()
    with PullConsumer(replicated.master_addresses, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("copied", 0), TopicPartition("copied", 1)])
        got = _poll_all(consumer, 600, 20)  # only below the high watermark: followers fetched
    assert len(got) == 600
    with AdminClient(replicated.master_addresses) as admin:  # followers report their copies
        deadline = time.monotonic() + 15
        while any(p.replica_lags != [0, 0] for p in admin.describe_topic("copied").partitions) \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [p.replica_lags for p in admin.describe_topic("copied").partitions] == \
            [[0, 0], [0, 0]]
    for broker in (1, 2):
        assert replicated.brokers[broker].stop() == 0
        opened = replicated.brokers[broker].log_events("replica.stream_opened")
        assert len(opened) == (1 if stream_port == 0 else 0), opened  # its one leader's
    one, two = (_copies(replicated, b, "copied", [0, 1]) for b in (1, 2))
    for p in (0, 1):
        assert len(one[p]) == 300 and one[p] == two[p]
        assert [r[0] for r in one[p]] == list(range(300))


def test_consumers_see_only_what_every_in_sync_replica_holds(replicated):
    with AdminClient(replicated.master_addresses) as admin:
        info = admin.create_topic("hw", partitions=1, replication_factor=2)
    leader = info.partitions[0].broker_id
    follower = ({1, 2} - {leader}).pop()
    tp = TopicPartition("hw", 0)
    with Producer(replicated.master_addresses) as producer, \
            PullConsumer(replicated.master_addresses, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        for i in range(50):
            producer.send("hw", b"before-%d" % i, partition=0)
        producer.flush()
        assert len(_poll_all(consumer, 50, 20)) == 50
        replicated.brokers[follower].signal(signal.SIGSTOP)
        try:
            for i in range(50):
                producer.send("hw", b"while-stopped-%d" % i, partition=0)
            producer.flush()  # acks=1: the leader stored them
            held = _poll_all(consumer, 1, 2.0)
            assert held == [], "records the follower does not hold yet must stay invisible"
        finally:
            replicated.brokers[follower].signal(signal.SIGCONT)
        later = _poll_all(consumer, 50, 20)
    assert [r.value for r in later] == [b"while-stopped-%d" % i for i in range(50)]
    assert [r.offset for r in later] == list(range(50, 100))


def test_a_replication_factor_above_the_live_brokers_is_refused(replicated):
    with AdminClient(replicated.master_addresses) as admin, \
            pytest.raises(errors.NotEnoughBrokers, match="replication_factor 3 needs 3 live"):
        admin.create_topic("three", replication_factor=3)


def test_a_stalled_follower_leaves_the_isr_and_comes_back_when_caught_up(replicated_cluster):
    cluster = replicated_cluster(2, replica_lag_max_ms=1500)
    with AdminClient(cluster.master_addresses) as admin:
        leader = admin.create_topic("isr", partitions=1, replication_factor=2) \
            .partitions[0].broker_id
        follower = ({1, 2} - {leader}).pop()

        def isr() -> list[int]:
            return admin.describe_topic("isr").partitions[0].isr

        tp = TopicPartition("isr", 0)
        with Producer(cluster.master_addresses) as producer, \
                PullConsumer(cluster.master_addresses, auto_offset_reset="earliest") as consumer:
            consumer.assign([tp])
            cluster.brokers[follower].signal(signal.SIGSTOP)
            try:
                for i in range(20):
                    producer.send("isr", b"m%d" % i, partition=0)
                producer.flush()
                # The follower falls out of the ISR: the high watermark moves without it.
                got = _poll_all(consumer, 20, 20)
                assert [r.value for r in got] == [b"m%d" % i for i in range(20)]
                assert isr() == [leader]
                assert "tubeq_master_partitions_under_replicated 1.0" in _metrics(cluster)
            finally:
                cluster.brokers[follower].signal(signal.SIGCONT)
            deadline = time.monotonic() + 20
            while sorted(isr()) != [1, 2] and time.monotonic() < deadline:
                time.sleep(0.2)
            assert sorted(isr()) == [1, 2], "a caught-up follower rejoins the ISR"
            assert "tubeq_master_partitions_under_replicated 0.0" in _metrics(cluster)
            assert "tubeq_master_partitions_offline 0.0" in _metrics(cluster)


def test_a_dead_leader_fails_over_to_its_in_sync_follower_and_rejoins_as_one(
        replicated_cluster):
    cluster = replicated_cluster(2, master_settings={"broker_heartbeat_interval_ms": 300,
                                                     "broker_timeout_ms": 2000},
                                 replica_lag_max_ms=1500)
    tp = TopicPartition("fo", 0)
    with AdminClient(cluster.master_addresses) as admin:
        first = admin.create_topic("fo", partitions=1, replication_factor=2).partitions[0]
        old, heir = first.broker_id, ({1, 2} - {first.broker_id}).pop()
        with Producer(cluster.master_addresses) as producer:
            for i in range(100):
                producer.send("fo", b"a%d" % i, partition=0)
            producer.flush()
        with PullConsumer(cluster.master_addresses, auto_offset_reset="earliest") as consumer:
            consumer.assign([tp])
            assert len(_poll_all(consumer, 100, 20)) == 100  # below the HW: both hold them
        cluster.brokers[old].kill()
        deadline = time.monotonic() + 20
        while admin.describe_topic("fo").partitions[0].broker_id != heir \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        now = admin.describe_topic("fo").partitions[0]
        assert (now.broker_id, now.leader_epoch, now.isr) == (heir, 2, [heir])
        assert any(e.action == "elect_leaders" for e in admin.audit_log(limit=20))
        with Producer(cluster.master_addresses) as producer:
            for i in range(100):
                producer.send("fo", b"b%d" % i, partition=0)
            producer.flush()
        with PullConsumer(cluster.master_addresses, auto_offset_reset="earliest") as consumer:
            consumer.assign([tp])
            got = _poll_all(consumer, 200, 20)
        assert [r.value for r in got] == [b"a%d" % i for i in range(100)] + \
            [b"b%d" % i for i in range(100)]
        assert [r.offset for r in got] == list(range(200))
        old_address = cluster.brokers[old].address
        # the heir copied over the old leader's replica stream, which the kill broke: it
        # fell back to gRPC (refused there too), and the partition moved to it
        assert any(e.get("leader") == old_address
                   for e in cluster.brokers[heir].log_events("replica.stream_failed"))
        cluster.start_broker(old)  # back as a follower of the new leader
        deadline = time.monotonic() + 30
        while sorted(admin.describe_topic("fo").partitions[0].isr) != [1, 2] \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sorted(admin.describe_topic("fo").partitions[0].isr) == [1, 2]
        assert [e["leader"] for e in cluster.brokers[old].log_events("replica.stream_opened")
                ] == [cluster.brokers[heir].address]  # it copies over the heir's stream
    for broker in (1, 2):
        assert cluster.brokers[broker].stop() == 0
    one, two = (_copies(cluster, b, "fo", [0]) for b in (1, 2))
    assert len(one[0]) == 200 and one == two


def test_acks_all_waits_for_the_isr_and_is_refused_below_min_insync(replicated_cluster):
    cluster = replicated_cluster(2, replica_lag_max_ms=1500)
    with AdminClient(cluster.master_addresses) as admin:
        leader = admin.create_topic("all", partitions=1, replication_factor=2,
                                    min_insync_replicas=2).partitions[0].broker_id
        follower = ({1, 2} - {leader}).pop()
        with Producer(cluster.master_addresses, acks="all", idempotent=True) as producer:
            acked = [producer.send("all", b"r%d" % i, partition=0) for i in range(50)]
            producer.flush()
            assert [f.result(10).offset for f in acked] == list(range(50))
        cluster.brokers[follower].signal(signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 20
            while admin.describe_topic("all").partitions[0].isr != [leader] \
                    and time.monotonic() < deadline:
                time.sleep(0.1)
            assert admin.describe_topic("all").partitions[0].isr == [leader]
            with Producer(cluster.master_addresses, acks="all", retries=0) as producer:
                refused = producer.send("all", b"lonely", partition=0)
                with pytest.raises(errors.NotEnoughReplicas, match=r"1 in-sync replica\(s\) "
                                   r"\[\d\], the topic needs 2 \(min_insync_replicas\)"):
                    refused.result(10)
            with Producer(cluster.master_addresses) as producer:  # acks=1 still goes in
                assert producer.send("all", b"leader-only", partition=0).result(10).offset == 50
        finally:
            cluster.brokers[follower].signal(signal.SIGCONT)


def test_an_acks_all_send_is_answered_only_once_the_follower_holds_it(replicated):
    with AdminClient(replicated.master_addresses) as admin:
        leader = admin.create_topic("waits", partitions=1, replication_factor=2) \
            .partitions[0].broker_id
    follower = ({1, 2} - {leader}).pop()
    with Producer(replicated.master_addresses, acks="all") as producer:
        assert producer.send("waits", b"warm", partition=0).result(10).offset == 0
        replicated.brokers[follower].signal(signal.SIGSTOP)  # still in the ISR (10 s lag)
        try:
            pending = producer.send("waits", b"held", partition=0)
            time.sleep(1.0)
            assert not pending.done(), "acks=all answered before the follower held the record"
        finally:
            replicated.brokers[follower].signal(signal.SIGCONT)
        assert pending.result(15).offset == 1


def test_a_returning_leader_truncates_its_divergent_tail_and_matches_the_new_leader(
        replicated_cluster):
    cluster = replicated_cluster(2, master_settings={"broker_heartbeat_interval_ms": 300,
                                                     "broker_timeout_ms": 3000})
    with AdminClient(cluster.master_addresses) as admin:
        old = admin.create_topic("div", partitions=1, replication_factor=2,
                                 durability="sync").partitions[0].broker_id  # on disk at ack
        heir = ({1, 2} - {old}).pop()
        with Producer(cluster.master_addresses, acks="all") as producer:
            for i in range(30):
                producer.send("div", b"both-%d" % i, partition=0)
            producer.flush()
        cluster.brokers[heir].signal(signal.SIGSTOP)  # still in the ISR (10 s lag)
        # A fetch it sent before stopping is answered into its socket: let that long-poll
        # (500 ms) end empty, so what comes next is on the leader only.
        time.sleep(1.0)
        try:
            with Producer(cluster.master_addresses) as producer:  # acks=1: only the leader
                for i in range(40):
                    producer.send("div", b"lost-%d" % i, partition=0)
                producer.flush()
            cluster.brokers[old].kill()
        finally:
            cluster.brokers[heir].signal(signal.SIGCONT)
        deadline = time.monotonic() + 20
        while admin.describe_topic("div").partitions[0].broker_id != heir \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        assert admin.describe_topic("div").partitions[0].leader_epoch == 2
        with Producer(cluster.master_addresses) as producer:
            for i in range(10):
                producer.send("div", b"new-%d" % i, partition=0)
            producer.flush()
        cluster.start_broker(old)  # holds offsets 30..69 the new leader never had
        deadline = time.monotonic() + 30
        while sorted(admin.describe_topic("div").partitions[0].isr) != [1, 2] \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sorted(admin.describe_topic("div").partitions[0].isr) == [1, 2]
    for broker in (1, 2):
        assert cluster.brokers[broker].stop() == 0
    one, two = (_copies(cluster, b, "div", [0]) for b in (1, 2))
    assert one == two
    assert [r[2] for r in one[0]] == [b"both-%d" % i for i in range(30)] + \
        [b"new-%d" % i for i in range(10)]
    log = (cluster.brokers[old].data_dir / "log.txt").read_text()
    assert '"replica.truncated"' in log, "the old leader's divergent tail was never cut"


def test_a_broker_stopping_cleanly_hands_its_leaderships_off_first(replicated):
    with AdminClient(replicated.master_addresses) as admin:
        old = admin.create_topic("handoff", partitions=1, replication_factor=2) \
            .partitions[0].broker_id
        heir = ({1, 2} - {old}).pop()
        with Producer(replicated.master_addresses, acks="all") as producer:
            assert producer.send("handoff", b"before", partition=0).result(10).offset == 0
            assert replicated.brokers[old].stop() == 0  # SIGTERM: a clean stop
            now = admin.describe_topic("handoff").partitions[0]
            # Already moved when the process is gone: no wait for the 6 s broker timeout.
            assert (now.broker_id, now.leader_epoch, now.isr) == (heir, 2, [heir])
            assert producer.send("handoff", b"after", partition=0).result(10).offset == 1
        assert any(e.action == "broker_shutdown" for e in admin.audit_log(limit=20))


def test_a_leader_restarted_after_a_crash_leads_nothing_until_it_caught_up(replicated_cluster):
    """The cluster up supervisor restarts a crashed broker within a second, long before the
    master's broker timeout. An async leader's crash costs it the tail still in its cache,
    which its follower holds (acks=all): it must not lead the follower back over it.

    The restart's registration must be what moves the leadership. Two other paths would get
    there first when a restart is slow (a loaded run took seconds): the broker timeout (a
    minute here) and the follower reporting its leader unreachable (master/brokers.py
    suspects), so the follower is paused (SIGSTOP) until the restarted broker registered."""
    # Blocks stay in the cache for a minute.
    cluster = replicated_cluster(2, master_settings={"broker_timeout_ms": 60_000},
                                 store={"cache_flush_interval_ms": 60_000})
    with AdminClient(cluster.master_addresses) as admin:
        old = admin.create_topic("crash", partitions=1, replication_factor=2) \
            .partitions[0].broker_id
        heir = ({1, 2} - {old}).pop()
        with Producer(cluster.master_addresses, acks="all") as producer:
            acked = [producer.send("crash", b"r%d" % i, partition=0) for i in range(30)]
            producer.flush()
            assert [f.result(10).offset for f in acked] == list(range(30))
        cluster.brokers[heir].signal(signal.SIGSTOP)  # reports nothing while paused
        try:
            cluster.brokers[old].kill()  # the 30 records were only in its cache block
            cluster.start_broker(old)  # back at once, with a new incarnation
            deadline = time.monotonic() + 30
            while admin.describe_topic("crash").partitions[0].broker_id != heir \
                    and time.monotonic() < deadline:
                time.sleep(0.05)
            now = admin.describe_topic("crash").partitions[0]
            assert (now.broker_id, now.leader_epoch) == (heir, 2)
        finally:
            cluster.brokers[heir].signal(signal.SIGCONT)
        # Moved when it registered again, not by the broker timeout or a follower's report.
        assert [e.action for e in admin.audit_log(limit=20)
                if e.action in ("broker_restarted", "elect_leaders")] == ["broker_restarted"]
        with PullConsumer(cluster.master_addresses, auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition("crash", 0)])
            got = _poll_all(consumer, 30, 20)
        assert [r.value for r in got] == [b"r%d" % i for i in range(30)]


def test_an_unclean_election_lets_an_out_of_sync_replica_lead_when_the_topic_allows_it(
        replicated_cluster):
    cluster = replicated_cluster(2, master_settings={"broker_heartbeat_interval_ms": 300,
                                                     "broker_timeout_ms": 2000},
                                 replica_lag_max_ms=1500)
    with AdminClient(cluster.master_addresses) as admin:
        info = admin.create_topic("risky", partitions=1, replication_factor=2,
                                  unclean_leader_election=True)
        assert info.unclean_leader_election is True
        old = info.partitions[0].broker_id
        heir = ({1, 2} - {old}).pop()

        def now():
            return admin.describe_topic("risky").partitions[0]

        with Producer(cluster.master_addresses, acks="all") as producer:
            for i in range(30):
                producer.send("risky", b"both-%d" % i, partition=0)
            producer.flush()
        cluster.brokers[heir].signal(signal.SIGSTOP)
        time.sleep(1.0)  # its last long-poll ends empty (see the divergent-tail test)
        try:
            with Producer(cluster.master_addresses) as producer:  # acks=1: only the leader
                for i in range(20):
                    producer.send("risky", b"lost-%d" % i, partition=0)
                producer.flush()
            deadline = time.monotonic() + 20
            while now().isr != [old] and time.monotonic() < deadline:
                time.sleep(0.1)
            assert now().isr == [old], "the stopped follower left the ISR"
            cluster.brokers[old].kill()
        finally:
            cluster.brokers[heir].signal(signal.SIGCONT)
        deadline = time.monotonic() + 20
        while now().broker_id != heir and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (now().broker_id, now().leader_epoch, now().isr) == (heir, 2, [heir])
        entry = next(e for e in admin.audit_log(limit=20)
                     if e.action == "unclean_leader_election")
        assert "records only the old in-sync replicas held are lost" in entry.target
        with Producer(cluster.master_addresses) as producer:
            for i in range(10):
                producer.send("risky", b"new-%d" % i, partition=0)
            producer.flush()
        cluster.start_broker(old)  # truncates what only it held, rejoins as a follower
        deadline = time.monotonic() + 30
        while sorted(now().isr) != [1, 2] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sorted(now().isr) == [1, 2]
    for broker in (1, 2):
        assert cluster.brokers[broker].stop() == 0
    one, two = (_copies(cluster, b, "risky", [0]) for b in (1, 2))
    assert one == two
    assert [r[2] for r in one[0]] == [b"both-%d" % i for i in range(30)] + \
        [b"new-%d" % i for i in range(10)], "the records only the old leader held are gone"


def test_a_crashed_leader_is_replaced_before_the_broker_timeout_when_its_follower_says_so(
        replicated_cluster):
    """The follower's fetches fail at once (connection refused) and it says so in a heartbeat
    sent right away; the master then elects without waiting out broker_timeout_ms (20 s
    here) once the leader has also missed its heartbeats (1.5 intervals)."""
    cluster = replicated_cluster(2, master_settings={"broker_heartbeat_interval_ms": 300,
                                                     "broker_timeout_ms": 20_000})
    with AdminClient(cluster.master_addresses) as admin:
        old = admin.create_topic("quick", partitions=1, replication_factor=2) \
            .partitions[0].broker_id
        heir = ({1, 2} - {old}).pop()
        with Producer(cluster.master_addresses, acks="all") as producer:
            producer.send("quick", b"before", partition=0).result(10)
        cluster.brokers[old].kill()
        deadline = time.monotonic() + 15
        while admin.describe_topic("quick").partitions[0].broker_id != heir \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        assert admin.describe_topic("quick").partitions[0].broker_id == heir
        still = {b.broker_id: b.alive for b in admin.list_brokers()}
        assert still[old] is True, "elected while the broker timeout still counts it alive"
