"""ACLs enforced by real masters and brokers: deny by default, literal and prefix entries, roles,
deny wins, listings show only what the caller may describe, security calls are the admins',
and the brokers follow a change within a heartbeat or two."""
from __future__ import annotations

import pytest

from lib.admin import AdminClient
from lib.auth.acl import Acl
from lib.auth.client import Credentials
from lib.consumer.pull import PullConsumer
from lib.errors import InvalidArgument, PermissionDenied
from lib.producer.producer import Producer
from tests.integration.test_consumer_common import poll_until, wait_for

ALICE = Credentials("alice", "alice-password-123")
BOB = Credentials("bob", "bob-password-12345")


@pytest.fixture
def acl_cluster(cluster_factory):
    cluster = cluster_factory(1)
    masters = cluster.master_addresses
    admin = cluster.admin_credentials()
    root = AdminClient(masters, credentials=admin)
    root.add_user(ALICE.user, ALICE.password)
    root.add_user(BOB.user, BOB.password, roles=["etl"])
    root.create_topic("orders", partitions=2)
    root.create_topic("raw-clicks", partitions=1)
    try:
        yield masters, root, admin
    finally:
        root.close()


def producing(masters: str, creds: Credentials | None, topic: str, tls=None) -> bool:
    """Whether ``creds`` (or ``tls``'s client certificate) may produce to ``topic`` now
    (False: PermissionDenied)."""
    with Producer(masters, credentials=creds, tls=tls, request_timeout_ms=5000,
                  retries=0) as producer:
        try:
            producer.send_sync(topic, b"probe")
            return True
        except PermissionDenied:
            return False


def test_nothing_is_allowed_until_an_acl_says_so_and_errors_name_the_gap(acl_cluster):
    masters, root, _ = acl_cluster
    with AdminClient(masters, credentials=ALICE) as alice:
        with pytest.raises(PermissionDenied, match="alice may not create on topic 'mine'"):
            alice.create_topic("mine")
        with pytest.raises(PermissionDenied, match="alice may not describe on topic 'orders'"):
            alice.describe_topic("orders")
        assert alice.list_topics() == []  # a listing shows only what one may describe
        with pytest.raises(PermissionDenied, match="alice may not admin on the cluster"):
            alice.audit_log()
        with pytest.raises(PermissionDenied, match="alice may not describe on the cluster"):
            alice.list_brokers()
    with Producer(masters, credentials=ALICE, request_timeout_ms=5000) as producer, \
            pytest.raises(PermissionDenied, match="alice may not describe on topic 'orders'"):
        producer.send_sync("orders", b"not yet")  # refused at the routes, no retry loop

    assert root.add_acl("user:alice", "produce", "topic", "orders") is True
    assert root.add_acl("user:alice", "produce", "topic", "orders") is False  # already there
    wait_for(lambda: producing(masters, ALICE, "orders"), 15, "alice's ACL on the broker")
    assert not producing(masters, ALICE, "raw-clicks")
    with AdminClient(masters, credentials=ALICE) as alice:
        assert [t.name for t in alice.list_topics()] == ["orders"]  # produce implies describe
        assert alice.describe_topic("orders").partition_count == 2
        with pytest.raises(PermissionDenied, match="alice may not delete on topic 'orders'"):
            alice.delete_topic("orders")

    root.add_acl("user:alice", "produce", "topic", "orders", effect="deny")  # deny wins
    wait_for(lambda: not producing(masters, ALICE, "orders"), 15, "the deny on the broker")
    root.remove_acl("user:alice", "produce", "topic", "orders", effect="deny")
    wait_for(lambda: producing(masters, ALICE, "orders"), 15, "the deny gone from the broker")
    with pytest.raises(InvalidArgument, match="no ACL entry"):
        root.remove_acl("user:alice", "consume", "topic", "orders")


def test_a_role_with_prefix_acls_consumes_in_its_group(acl_cluster):
    masters, root, admin = acl_cluster
    with Producer(masters, credentials=admin) as producer:
        for i in range(10):
            producer.send_sync("raw-clicks", f"c{i}".encode())
    with PullConsumer(masters, credentials=BOB, group="etl-1", auto_offset_reset="earliest",
                      rpc_timeout_s=5) as consumer, \
            pytest.raises(PermissionDenied, match="bob may not describe on topic 'raw-clicks'"):
        consumer.subscribe("raw-clicks")
        consumer.poll(timeout=2)

    root.add_acl("role:etl", "consume", "topic", "raw-", pattern="prefix")
    root.add_acl("role:etl", "consume", "group", "etl-", pattern="prefix")
    with PullConsumer(masters, credentials=BOB, group="etl-1", auto_offset_reset="earliest",
                      enable_auto_commit=False) as consumer:
        consumer.subscribe("raw-clicks")
        got = [r.value for r in poll_until(consumer, 10)]
        consumer.commit()
    assert sorted(got) == sorted(f"c{i}".encode() for i in range(10))
    root.add_acl("role:etl", "describe", "topic", "orders")  # may see it, not read it
    with PullConsumer(masters, credentials=BOB, group="etl-1", rpc_timeout_s=5) as consumer, \
            pytest.raises(PermissionDenied, match="bob may not consume on topic 'orders'"):
        consumer.subscribe("orders")
        consumer.poll(timeout=2)
    with AdminClient(masters, credentials=BOB) as bob:
        assert [t.name for t in bob.list_topics()] == ["orders", "raw-clicks"]
        assert bob.list_groups() == ["etl-1"]


def test_security_calls_are_for_admins_and_a_user_changes_only_its_own_password(acl_cluster):
    masters, root, _ = acl_cluster
    with AdminClient(masters, credentials=ALICE) as alice:
        for call in (lambda: alice.add_user("mallory", "mallory-password-1"),
                     lambda: alice.set_roles("alice", ["admin"]),
                     lambda: alice.add_acl("user:alice", "all", "topic", "", pattern="prefix"),
                     alice.list_acls, alice.list_users,
                     lambda: alice.create_api_key("bob"),
                     lambda: alice.set_password("bob", "taken-over-123")):
            with pytest.raises(PermissionDenied, match="alice may not admin on the cluster"):
                call()
        alice.set_password("alice", "alice-password-456")
    with AdminClient(masters, credentials=Credentials("alice", "alice-password-456")) as alice:
        assert alice.login("alice", "alice-password-456").principal == "alice"
    root.add_acl("user:alice", "admin", "cluster")
    assert Acl("user:alice", "cluster", "cluster", "admin") in root.list_acls()
    with AdminClient(masters, credentials=Credentials("alice", "alice-password-456")) as alice:
        assert "bob" in [u.name for u in alice.list_users()]  # an admin ACL, not the role
    actions = [e.action for e in root.audit_log()]
    assert "add_acl" in actions

