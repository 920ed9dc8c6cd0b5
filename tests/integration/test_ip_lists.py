"""IP allow/deny lists on a real master and broker. Every test client calls from 127.0.0.1,
so the rules here name that address: a topic rule fences one topic off (at the broker and at
the master, for every principal, the admin included), a cluster rule that would lock the
caller out is refused unless forced, and a forced one refuses every client call, public ones
included, while brokers and masters (the cluster secret) keep working."""
from __future__ import annotations

import os

import pytest

from lib.admin import AdminClient
from lib.auth.client import Credentials
from lib.auth.settings import cluster_header
from lib.errors import InvalidArgument, PermissionDenied
from lib.producer.producer import Producer
from lib.proto import security_pb2 as spb
from lib.proto import security_pb2_grpc
from lib.rpc import channel
from tests.integration.test_acl import producing
from tests.integration.test_consumer_common import wait_for
from tests.integration.test_quotas import tubeq

ALICE = Credentials("alice", "alice-iplist-password")
FENCE = "127.0.0.1 may not reach"


@pytest.fixture
def fenced(cluster_factory):
    cluster = cluster_factory(1)
    masters = cluster.master_addresses
    root = AdminClient(masters, credentials=cluster.admin_credentials())
    root.add_user(ALICE.user, ALICE.password)
    for topic in ("open", "fenced"):
        root.create_topic(topic)
        root.add_acl("user:alice", "produce", "topic", topic)
    wait_for(lambda: producing(masters, ALICE, "fenced"), 20, "alice's ACLs on the broker")
    try:
        yield cluster, masters, root
    finally:
        root.close()


def refused_at_broker(masters: str, creds: Credentials, topic: str) -> str:
    """The PermissionDenied message of a produce to ``topic`` ("" if it went through)."""
    with Producer(masters, credentials=creds, request_timeout_ms=5000, retries=0) as producer:
        try:
            producer.send_sync(topic, b"probe", partition=0)
            return ""
        except PermissionDenied as err:
            return err.message


def test_a_topic_rule_fences_the_topic_off_for_everyone_from_that_address(fenced):
    cluster, masters, root = fenced
    assert root.add_ip_rule("127.0.0.1", effect="deny", topic="fenced") is True
    assert root.add_ip_rule("127.0.0.1", effect="deny", topic="fenced") is False
    with pytest.raises(PermissionDenied, match=f"address {FENCE} topic 'fenced'"):
        root.describe_topic("fenced")  # at the master, the admin role notwithstanding
    assert [t.name for t in root.list_topics()] == ["open"]
    wait_for(lambda: FENCE in refused_at_broker(masters, ALICE, "fenced"), 20,
             "the rule on the broker")
    assert refused_at_broker(masters, ALICE, "open") == ""
    assert [r.describe() for r in root.list_ip_rules()] == ["deny 127.0.0.1/32 on topic fenced"]
    root.remove_ip_rule("127.0.0.1", effect="deny", topic="fenced")
    wait_for(lambda: refused_at_broker(masters, ALICE, "fenced") == "", 20,
             "the rule gone from the broker")
    with pytest.raises(InvalidArgument, match="no IP rule"):
        root.remove_ip_rule("127.0.0.1", effect="deny", topic="fenced")
    audit = [e.action for e in root.audit_log(50)]
    assert "add_ip_rule" in audit and "remove_ip_rule" in audit


def test_a_cluster_allow_list_without_the_callers_address_needs_force_then_shuts_it_out(
        fenced):
    cluster, masters, root = fenced
    with pytest.raises(InvalidArgument, match="would refuse your own address 127.0.0.1"):
        root.add_ip_rule("10.0.0.0/8")
    assert root.list_ip_rules() == []
    root.add_ip_rule("10.0.0.0/8", force=True)
    with pytest.raises(PermissionDenied, match=f"address {FENCE} this cluster"):
        root.list_topics()
    with pytest.raises(PermissionDenied, match=f"address {FENCE} this cluster"):
        AdminClient(masters, credentials=ALICE).login(ALICE.user, ALICE.password)  # public
    wait_for(lambda: "this cluster" in refused_at_broker(masters, cluster.admin_credentials(),
                                                         "open"), 20, "the rule on the broker")
    # The cluster secret is never refused: brokers keep heartbeating, and it can lift the list.
    secret = os.environ["TUBEQ_CLUSTER_SECRET"]
    with channel(cluster.master_process(0).address, None) as ch:  # the only master
        security_pb2_grpc.SecurityStub(ch).RemoveIpRule(
            spb.IpRuleRequest(rule=spb.IpRule(network="10.0.0.0/8")),
            metadata=cluster_header(secret), timeout=10)
    assert [t.name for t in root.list_topics()] == ["fenced", "open"]
    wait_for(lambda: refused_at_broker(masters, ALICE, "open") == "", 20,
             "the list gone from the broker")
    assert all(b.alive for b in root.list_brokers())


def test_ip_rules_with_the_cli(fenced):
    _, masters, _ = fenced
    added = tubeq(masters, "ip", "add", "10.9.0.0/16", "--deny", "--topic", "raw-", "--prefix")
    assert added.returncode == 0, added.stderr
    assert b"added: deny 10.9.0.0/16 on topic raw-*" in added.stdout
    locked = tubeq(masters, "ip", "add", "192.168.0.0/16")
    assert locked.returncode == 1 and b"would refuse your own address" in locked.stderr
    assert tubeq(masters, "ip", "list").stdout.split()[3:] == [
        b"deny", b"10.9.0.0/16", b"topic", b"raw-*"]
    bad = tubeq(masters, "ip", "add", "10.0.0.999")
    assert bad.returncode == 1 and b"not an IP address or network" in bad.stderr
    assert tubeq(masters, "ip", "remove", "10.9.0.0/16", "--deny", "--topic", "raw-",
                 "--prefix").returncode == 0
    assert tubeq(masters, "ip", "list", "--json").stdout.strip() == b"[]"

