"""AdminClient and RouteCache against a real master and brokers."""
from __future__ import annotations

import dataclasses
import json
import socket
import time

import pytest

from lib.admin import AdminClient
from lib.errors import InvalidArgument, TopicExists, Unavailable, UnknownTopic
from lib.routes import RouteCache
from lib.types import BrokerInfo, TopicInfo

pytestmark = pytest.mark.shared_cluster


@pytest.fixture
def admin(cluster):
    client = AdminClient(cluster.master_addresses, principal="alice")
    yield client
    client.close()


def test_create_describe_alter_list_delete_topic(admin):
    info = admin.create_topic("orders", partitions=2, durability="sync", max_message_bytes=5000)
    assert isinstance(info, TopicInfo)
    assert (info.name, info.partition_count, info.durability, info.max_message_bytes) == \
        ("orders", 2, "sync", 5000)
    assert [p.partition for p in info.partitions] == [0, 1]
    described = admin.describe_topic("orders")
    assert all(p.address and p.available for p in described.partitions)
    assert described.topic_id == info.topic_id != 0
    altered = admin.alter_topic("orders", partitions=3, retention_ms=60_000)
    assert (altered.partition_count, altered.retention_ms, altered.durability) == \
        (3, 60_000, "sync")
    assert "orders" in [t.name for t in admin.list_topics()]  # the file's cluster is shared
    with pytest.raises(TopicExists):
        admin.create_topic("orders")
    admin.delete_topic("orders")
    assert "orders" not in [t.name for t in admin.list_topics()]
    with pytest.raises(UnknownTopic):
        admin.describe_topic("orders")


def test_results_serialise_to_json_with_asdict(admin):
    admin.create_topic("js", partitions=1)
    json.dumps(dataclasses.asdict(admin.describe_topic("js")))
    json.dumps([dataclasses.asdict(b) for b in admin.list_brokers()])
    json.dumps([dataclasses.asdict(e) for e in admin.audit_log(10)])


def test_list_brokers_shows_both_brokers_alive(admin, cluster):
    brokers = admin.list_brokers()
    assert all(isinstance(b, BrokerInfo) for b in brokers)
    assert [(b.broker_id, b.alive) for b in brokers] == [(1, True), (2, True)]
    assert {b.address for b in brokers} == {p.address for p in cluster.brokers.values()}


def test_audit_log_records_changes_with_the_principal(admin):
    admin.create_topic("audited", partitions=1)
    admin.delete_topic("audited")
    entries = admin.audit_log(limit=10)
    # The logged-in user, not the principal the client claims (auth is on).
    assert any(e.principal == "admin" and "audited" in e.target for e in entries)
    assert not any(e.principal == "alice" for e in entries)


def test_bad_arguments_are_refused_before_calling_the_master(admin):
    with pytest.raises(InvalidArgument, match="durability"):
        admin.create_topic("t", durability="fast")
    with pytest.raises(InvalidArgument, match="partitions"):
        admin.create_topic("t", partitions=0)
    with pytest.raises(InvalidArgument, match="exactly one"):
        admin.reset_group_offsets("g", "t", to_earliest=True, to_offset=3)


def test_unknown_group_describe_and_empty_group_list(admin):
    assert admin.list_groups() == []


def test_admin_with_unreachable_master_list_raises_unavailable_within_timeout():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    client = AdminClient(dead, timeout=1.5)
    start = time.monotonic()
    with pytest.raises(Unavailable, match="no active master"):
        client.list_topics()
    assert time.monotonic() - start < 5
    client.close()


def test_route_cache_fetches_refreshes_after_invalidate_and_raises_unknown_topic(admin, cluster):
    admin.create_topic("routed", partitions=2)
    master = cluster.master_client()
    try:
        cache = RouteCache(master, max_age_s=60)
        first = cache.get("routed")
        assert first.count == 2 and first.available == (0, 1)
        assert cache.get("routed") is first  # fresh: no master call
        admin.alter_topic("routed", partitions=3)
        assert cache.get("routed") is first
        cache.invalidate("routed")
        assert cache.get("routed").count == 3
        with pytest.raises(UnknownTopic):
            cache.get("missing")
    finally:
        master.close()


def test_a_broker_started_with_a_rack_is_listed_with_it(cluster_factory):
    racked = cluster_factory(1, broker_args=["--rack", "zone-a"])
    with AdminClient(racked.master_addresses) as client:
        assert [(b.broker_id, b.rack) for b in client.list_brokers()] == [(1, "zone-a")]
        info = client.create_topic("racked", partitions=2, replication_factor=1)
        assert info.replication_factor == 1 and info.min_insync_replicas == 1
        assert [(p.replicas, p.isr, p.leader_epoch) for p in info.partitions] == \
            [([1], [1], 1)] * 2
