"""A real master process: brokers, topics, placement, routes, validation, audit, restart."""
from __future__ import annotations

import json
import re
import time
import urllib.request

import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from lib import errors
from lib.admin import AdminClient
from lib.auth.client import Credentials
from lib.proto import admin_pb2 as apb
from lib.proto import master_pb2 as mpb
from tests.integration.test_master_common import MasterSession, Repeater, wait_for


@pytest.fixture
def m(tmp_path):
    session = MasterSession(tmp_path / "m")
    yield session
    session.close()


def create(m, name, principal=None, **settings):
    req = apb.CreateTopicRequest(topic=name, settings=mpb.TopicSettings(**settings))
    return m.call(m.admin.CreateTopic, req, principal)


def test_create_topic_places_partitions_over_two_brokers_round_robin(m):
    m.register(1)
    m.register(2)
    desc = create(m, "orders", partitions=4)
    assert [(p.partition, p.broker_id) for p in desc.partitions] == [(0, 1), (1, 2), (2, 1),
                                                                     (3, 2)]
    assert desc.settings.durability == "async" and desc.settings.stores == 1
    assert desc.settings.max_message_bytes == 1 << 20 and desc.settings.topic_id > 0
    assert all(p.available and p.address for p in desc.partitions)
    hb = m.heartbeat(1)
    assert hb.term == m.epoch and "orders" in hb.topics
    assert sorted(pl.partition for pl in hb.placements) == [0, 2]
    routes = m.call(m.master.GetRoutes, mpb.GetRoutesRequest(topics=["orders"])).routes
    assert [r.broker_id for r in routes[0].partitions] == [1, 2, 1, 2]
    # One copy each (the default): the leader is the only replica and the whole ISR.
    assert desc.settings.replication_factor == 1 and desc.settings.min_insync_replicas == 1
    assert [(list(p.replicas), list(p.isr), p.leader_epoch) for p in desc.partitions] == \
        [([b], [b], 1) for b in (1, 2, 1, 2)]
    assert [(list(r.replicas), list(r.isr)) for r in routes[0].partitions] == \
        [([b], [b]) for b in (1, 2, 1, 2)]
    assert [(pl.leader, list(pl.replicas), list(pl.isr), pl.leader_epoch)
            for pl in hb.placements] == [(1, [1], [1], 1)] * 2


def test_a_broker_declares_its_rack_and_more_copies_than_brokers_serve_is_refused(m):
    m.register(1, rack="zone-a")
    m.register(2)
    brokers = m.call(m.admin.ListBrokers, apb.ListBrokersRequest()).brokers
    assert [(b.broker_id, b.rack) for b in brokers] == [(1, "zone-a"), (2, "")]
    with pytest.raises(errors.InvalidArgument, match=r"replication_factor=17: must be 1\.\.16"):
        create(m, "t", replication_factor=17)
    with pytest.raises(errors.NotEnoughBrokers, match="replication_factor 3 needs 3 live "
                                                      "brokers"):
        create(m, "t", replication_factor=3)
    with pytest.raises(errors.InvalidArgument, match=r"min_insync_replicas=2: must be "
                                                     r"1\.\.replication_factor \(1\)"):
        create(m, "t", min_insync_replicas=2)
    with pytest.raises(errors.InvalidArgument, match="bad broker rack"):
        m.register(3, rack="x" * 65)
    assert m.call(m.admin.ListTopics, apb.ListTopicsRequest()).topics == []


def test_describe_reports_offsets_from_heartbeat_stats_when_broker_does_not_answer(m):
    m.register(1)
    create(m, "t", partitions=2)
    m.heartbeat(1, [mpb.PartitionStats(topic="t", partition=0, earliest=3, latest=10),
                    mpb.PartitionStats(topic="t", partition=1, earliest=0, latest=5)])
    desc = m.call(m.admin.DescribeTopic, apb.DescribeTopicRequest(topic="t"))
    assert [(p.earliest, p.latest) for p in desc.partitions] == [(3, 10), (0, 5)]
    # partial: only what changed; the other partition keeps what it had
    m.heartbeat(1, [mpb.PartitionStats(topic="t", partition=1, earliest=1, latest=7)],
                stats_partial=True)
    desc = m.call(m.admin.DescribeTopic, apb.DescribeTopicRequest(topic="t"))
    assert [(p.earliest, p.latest) for p in desc.partitions] == [(3, 10), (1, 7)]
    # a full list replaces them all: a partition left out has no stats any more
    m.heartbeat(1, [mpb.PartitionStats(topic="t", partition=0, earliest=4, latest=11)])
    desc = m.call(m.admin.DescribeTopic, apb.DescribeTopicRequest(topic="t"))
    assert [p.latest for p in desc.partitions][0] == 11


def test_a_heartbeat_naming_the_view_it_holds_is_answered_unchanged_until_it_changes(m):
    m.register(1)
    m.register(2)
    create(m, "a", partitions=2)
    first = m.heartbeat(1)
    assert not first.metadata_unchanged and len(first.metadata_digest) == 16
    assert set(first.topics) == {"a"} and len(first.placements) == 1
    same = m.heartbeat(1, metadata_digest=first.metadata_digest)
    assert same.metadata_unchanged and same.metadata_digest == first.metadata_digest
    assert not same.topics and not same.placements and not same.deleted
    # an unknown digest (another master's stale one, a corrupted one) gets the whole view
    other = m.heartbeat(1, metadata_digest=b"x" * 16)
    assert not other.metadata_unchanged and set(other.topics) == {"a"}
    # every change of what the broker must host changes the digest: a topic made, one deleted
    create(m, "b")
    made = m.heartbeat(1, metadata_digest=first.metadata_digest)
    assert not made.metadata_unchanged and set(made.topics) == {"a", "b"}
    m.call(m.admin.DeleteTopic, apb.DeleteTopicRequest(topic="a"))
    gone = m.heartbeat(1, metadata_digest=made.metadata_digest)
    assert not gone.metadata_unchanged and set(gone.topics) == {"b"}
    assert [d.topic for d in gone.deleted] == ["a"]
    # the digest is of the content: broker 2, told a different view, has another digest
    assert m.heartbeat(2).metadata_digest != gone.metadata_digest
    # and survives a master restart (a new master computes the same one)
    m.restart()
    m.register(1)
    m.register(2)
    again = m.heartbeat(1, metadata_digest=gone.metadata_digest)
    assert again.metadata_unchanged, "the restarted master's view of broker 1 is the same"


def test_alter_grows_partitions_on_live_brokers_and_keeps_old_placement(m):
    m.register(1)
    create(m, "t", partitions=2, durability="sync")
    m.register(2)
    req = apb.AlterTopicRequest(topic="t", settings=mpb.TopicSettings(partitions=4,
                                                                     retention_ms=5000))
    desc = m.call(m.admin.AlterTopic, req)
    assert [p.broker_id for p in desc.partitions] == [1, 1, 2, 2]
    assert desc.settings.durability == "sync" and desc.settings.retention_ms == 5000
    hb = m.heartbeat(2)
    assert hb.topics["t"].retention_ms == 5000 and len(hb.placements) == 2
    with pytest.raises(errors.InvalidArgument, match="only grow"):
        m.call(m.admin.AlterTopic, apb.AlterTopicRequest(
            topic="t", settings=mpb.TopicSettings(partitions=3)))


def test_delete_topic_tombstones_it_for_brokers_and_recreate_gets_new_id(m):
    m.register(1)
    old = create(m, "t").settings.topic_id
    m.call(m.admin.DeleteTopic, apb.DeleteTopicRequest(topic="t"))
    hb = m.heartbeat(1)
    assert "t" not in hb.topics
    assert [(d.topic, d.topic_id) for d in hb.deleted] == [("t", old)]
    with pytest.raises(errors.UnknownTopic):
        m.call(m.admin.DescribeTopic, apb.DescribeTopicRequest(topic="t"))
    with pytest.raises(errors.UnknownTopic):
        m.call(m.master.GetRoutes, mpb.GetRoutesRequest(topics=["t"]))
    assert create(m, "t").settings.topic_id > old


@pytest.mark.parametrize("settings, field", [
    ({"partitions": 1025}, "partitions"),
    ({"partitions": 2, "stores": 3}, "stores"),
    ({"durability": "maybe"}, "durability"),
    ({"retention_ms": -5}, "retention_ms"),
    ({"retention_bytes": -2}, "retention_bytes"),
    ({"max_message_bytes": (16 << 20) + 1}, "max_message_bytes"),
    ({"replication_factor": 17}, "replication_factor"),
    ({"min_insync_replicas": 3}, "min_insync_replicas"),
])
def test_bad_topic_settings_are_refused_naming_the_field(m, settings, field):
    m.register(1)
    with pytest.raises(errors.InvalidArgument, match=field):
        create(m, "t", **settings)
    assert m.call(m.admin.ListTopics, apb.ListTopicsRequest()).topics == []


def test_bad_names_duplicates_and_no_brokers_give_clear_errors(m):
    with pytest.raises(errors.NotEnoughBrokers):
        create(m, "t")
    m.register(1)
    for bad in ("", "..", "a/b", "-x", "x" * 250):
        with pytest.raises(errors.InvalidName):
            create(m, bad)
    create(m, "t")
    with pytest.raises(errors.TopicExists):
        create(m, "t")
    with pytest.raises(errors.InvalidArgument):
        m.register(2, "no-port")
    assert m.call(m.admin.ListTopics, apb.ListTopicsRequest()).topics[0].topic == "t"


def test_broker_missing_heartbeats_is_marked_down_and_its_partitions_unavailable(m):
    m.register(1)
    m.register(2)
    create(m, "t", partitions=2)

    def broker2_down():
        m.heartbeat(1)
        brokers = m.call(m.admin.ListBrokers, apb.ListBrokersRequest()).brokers
        return [(b.broker_id, b.alive) for b in brokers] == [(1, True), (2, False)]
    wait_for(broker2_down, 10.0, "broker 2 to be marked down", interval=0.2)
    route = m.call(m.master.GetRoutes, mpb.GetRoutesRequest()).routes[0]
    assert [(p.broker_id, p.available) for p in route.partitions] == [(1, True), (2, False)]
    assert route.partitions[1].address == "127.0.0.1:2"
    assert m.heartbeat(3).reregister, "an unknown broker is told to register"


def test_every_admin_change_is_audited_with_principal_and_peer(m):
    """The audit names who logged in; a ``tubeq-principal`` header claiming another name is
    ignored."""
    m.register(1)
    # Password hashing and logins take seconds on a loaded machine: broker 1 stays alive
    # (beyond the made-up brokers' timeout) so that alter_topic has a broker to place on.
    alive = Repeater(lambda: m.heartbeat(1), 0.2)
    try:
        with AdminClient(m.proc.address) as admin:
            admin.add_user("alice", "alice-password-1")
            admin.add_user("bob", "bob-password-12")
            admin.add_acl("user:alice", "create", "topic", "t")
            admin.add_acl("user:bob", "alter", "topic", "t")
        with AdminClient(m.proc.address,
                         credentials=Credentials("alice", "alice-password-1")) as a:
            a.create_topic("t")
        with AdminClient(m.proc.address, credentials=Credentials("bob", "bob-password-12")) as b:
            b.alter_topic("t", partitions=4)
    finally:
        alive.close()
    m.call(m.admin.DeleteTopic, apb.DeleteTopicRequest(topic="t"), principal="mallory")
    entries = [e for e in m.call(m.admin.AuditLog, apb.AuditLogRequest(limit=10)).entries
               if e.principal != "system"]  # the bootstrap's first admin and signing key
    assert [(e.action, e.target, e.principal) for e in entries
            if e.action.endswith("_topic")] == [
        ("create_topic", "t", "alice"), ("alter_topic", "t", "bob"),
        ("delete_topic", "t", "admin")]
    entries = [e for e in entries if e.action.endswith("_topic")]
    assert json.loads(entries[1].details)["partitions"] == 4
    assert all(e.peer and e.time_ms > 0 for e in entries)


def test_metadata_survives_restart_and_epoch_grows(m):
    m.register(1)
    before = create(m, "t", partitions=3, durability="sync")
    epoch = m.epoch
    m.restart()
    assert m.epoch == epoch + 1
    desc = m.call(m.admin.DescribeTopic, apb.DescribeTopicRequest(topic="t"))
    assert desc.settings == before.settings and desc.created_ms == before.created_ms
    assert not any(p.available for p in desc.partitions), "brokers must register again"
    assert m.heartbeat(1).reregister
    assert m.register(1).term == epoch + 1
    changes = [e.action for e in m.call(m.admin.AuditLog, apb.AuditLogRequest()).entries
               if e.principal != "system" and e.action != "login"]  # logins are audited too
    assert changes == ["create_topic"]


def test_health_service_reports_serving_and_metrics_are_served(m):
    stub = health_pb2_grpc.HealthStub(m.channel)
    for service in ("", "tubeq.master.Master", "tubeq.admin.Admin"):
        res = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        assert res.status == health_pb2.HealthCheckResponse.SERVING
    m.register(1)
    with urllib.request.urlopen(f"http://{m.proc.info['metrics']}/metrics", timeout=5) as r:
        text = r.read().decode()
    assert "tubeq_master_brokers_alive 1.0" in text
    assert f"tubeq_master_epoch {float(m.epoch)}" in text
    # the long-lived objects' freezer is installed (lib/gc_freeze.py)
    assert re.search(r"^tubeq_gc_full_collections_total \d", text, re.M)
    assert re.search(r"^tubeq_gc_freezes_total \d", text, re.M)


def test_bad_requests_leave_the_master_serving(m):
    m.register(1)
    for _ in range(3):
        with pytest.raises(errors.InvalidName):
            m.call(m.master.GetRoutes, mpb.GetRoutesRequest(topics=["../etc"]))
        with pytest.raises(errors.InvalidArgument):
            m.register(-1)
    assert m.proc.alive() and create(m, "still-ok").topic == "still-ok"


@pytest.fixture
def routes_asked(m):
    """A master client to ``m`` that records the topics of each GetRoutes it makes."""
    from lib.rpc import MasterClient, client_pool
    m.register(1)
    pool = client_pool(m.proc.address, m.cluster.admin_credentials(), 5.0, None)
    client = MasterClient([m.proc.address], pool=pool, timeout=5.0)
    asked: list[list[str]] = []
    real_call = client.call
    client.call = lambda stub, method, req, **kw: (  # type: ignore[method-assign]
        asked.append(list(req.topics)), real_call(stub, method, req, **kw))[1]
    try:
        yield client, asked
    finally:
        pool.close()


def test_aged_routes_are_fetched_again_in_one_call_and_deleted_topics_forgotten(
        m, routes_asked):
    """A producer writing to 10,000 topics made one GetRoutes per topic every max_age_s, in
    its sending thread: an aged entry is now refreshed with every other aged one."""
    from lib.routes import RouteCache
    client, asked = routes_asked
    for name in ("a", "b", "c"):
        create(m, name)
    cache = RouteCache(client)
    for name in ("a", "b", "c"):
        cache.get(name)
    assert asked == [["a"], ["b"], ["c"]]
    cache.max_age_s = 0.0  # every entry aged from now on
    before = cache.cached("b").fetched_at
    assert cache.get("a").topic == "a"
    assert asked[-1] == ["a", "b", "c"] and cache.cached("b").fetched_at > before
    m.call(m.admin.DeleteTopic, apb.DeleteTopicRequest(topic="c"))
    assert cache.get("b").topic == "b", "an aged deleted topic does not fail the others"
    assert cache.cached("c") is None
    with pytest.raises(errors.UnknownTopic):
        cache.get("c")


def test_an_aged_route_takes_the_half_aged_along_and_leaves_the_fresh(m, routes_asked):
    """Topics first fetched one by one come to share their refreshes: the aged one's call
    takes every entry past half its age, and none younger."""
    from lib.routes import RouteCache
    client, asked = routes_asked
    for name in ("old", "half", "fresh"):
        create(m, name)

    def until(t: float) -> None:  # the entries' ages are what is tested: time must pass
        time.sleep(max(0.0, t - time.monotonic()))

    cache = RouteCache(client, max_age_s=4.0)
    t0 = cache.get("old").fetched_at
    until(t0 + 1.0)
    cache.get("half")  # about 3 s old when "old" ages: past half of 4
    until(t0 + 3.3)
    cache.get("fresh")  # about 0.75 s old then
    until(t0 + 4.05)
    assert cache.get("old").fetched_at > t0
    assert asked == [["old"], ["half"], ["fresh"], ["half", "old"]]
