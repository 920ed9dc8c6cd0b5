"""IP allow/deny rules: validation, the decision per scope (deny wins; an allow rule makes an
allow list), peer strings, and the Access checks servers run with them."""
from __future__ import annotations

import pytest

from lib.auth.access import Access
from lib.auth.addresses import (
    AddressRules,
    IpRule,
    decide,
    from_pb,
    make_rule,
    peer_address,
    to_pb,
)
from lib.auth.identities import CLUSTER_IDENTITY, Identity
from lib.errors import InvalidArgument, PermissionDenied

ALICE = Identity("alice", (), "user")


def test_networks_are_normalised_and_round_trip():
    assert IpRule("10.1.2.3/8").network == "10.0.0.0/8"
    assert IpRule("192.168.1.7").network == "192.168.1.7/32"
    assert IpRule("::1").network == "::1/128"
    rule = make_rule("10.0.0.0/8", "deny", "raw-", prefix=True)
    assert from_pb(to_pb(rule)) == rule
    assert rule.describe() == "deny 10.0.0.0/8 on topic raw-*"


@pytest.mark.parametrize("kwargs,message", [
    ({"network": "10.0.0.300"}, "not an IP address or network"),
    ({"network": "example.com"}, "not an IP address or network"),
    ({"network": "10.0.0.0/8", "effect": "block"}, "effect must be one of allow, deny"),
    ({"network": "10.0.0.0/8", "scope": "group", "name": "g"}, "scope must be one of"),
    ({"network": "10.0.0.0/8", "name": "orders"}, "names no topic"),
    ({"network": "10.0.0.0/8", "scope": "topic", "name": "bad name"}, "topic"),
])
def test_bad_rules_name_the_problem(kwargs, message):
    with pytest.raises(InvalidArgument, match=message):
        IpRule(**kwargs)


@pytest.mark.parametrize("peer,ip", [("ipv4:127.0.0.1:5000", "127.0.0.1"),
                                     ("ipv6:[::1]:5000", "::1"),
                                     ("ipv6:[fe80::1%eth0]:80", "fe80::1%eth0"),
                                     ("unix:/tmp/sock", "")])
def test_peer_strings(peer, ip):
    assert peer_address(peer) == ip


def test_no_rules_let_everyone_in_and_deny_wins():
    assert decide([], "10.0.0.1", "cluster")
    rules = [make_rule("10.0.0.0/8"), make_rule("10.9.0.0/16", "deny")]
    assert decide(rules, "10.1.0.1", "cluster")
    assert not decide(rules, "10.9.0.1", "cluster")  # deny wins
    assert not decide(rules, "192.168.0.1", "cluster")  # an allow list: not on it
    assert not decide(rules, "::1", "cluster")  # another family is not inside a v4 network
    assert not decide(rules, "", "cluster")  # no address: an allow list refuses it
    assert decide([make_rule("10.0.0.0/8", "deny")], "", "cluster")


def test_topic_rules_cover_their_topics_only():
    rules = [make_rule("10.9.0.0/16", "deny", "payments"),
             make_rule("10.1.0.0/16", topic="raw-", prefix=True)]
    assert not decide(rules, "10.9.0.1", "topic", "payments")
    assert decide(rules, "10.9.0.1", "topic", "orders")
    assert decide(rules, "10.9.0.1", "cluster")  # a topic rule says nothing of the cluster
    assert decide(rules, "10.1.2.3", "topic", "raw-clicks")
    assert not decide(rules, "10.2.0.1", "topic", "raw-clicks")  # the prefix's allow list


def test_access_checks_the_lists_before_the_acls_and_the_cluster_identity_passes():
    rules = AddressRules([make_rule("127.0.0.0/8", "deny", "secret"),
                          make_rule("10.0.0.0/8")], version=2)
    reports = []
    inside = Access(ALICE, None, reports.append, "10.0.0.7", rules)
    inside.check_address()
    inside.check("produce", "topic", "secret")
    loopback = Access(ALICE, None, reports.append, "127.0.0.1", rules)
    with pytest.raises(PermissionDenied,
                       match=r"address 127.0.0.1 may not reach this cluster \(an IP allow"):
        loopback.check_address()
    with pytest.raises(PermissionDenied, match="address 127.0.0.1 may not reach topic 'secret'"):
        loopback.check("produce", "topic", "secret")
    assert not loopback.allowed("describe", "topic", "secret")  # listings leave it out
    assert len(reports) == 2
    cluster = Access(CLUSTER_IDENTITY, None, None, "127.0.0.1", rules)
    cluster.check_address()
    cluster.check("produce", "topic", "secret")


def test_decisions_are_cached_until_the_rules_change():
    rules = AddressRules([make_rule("10.0.0.0/8", "deny")], version=1)
    assert not rules.allowed("10.0.0.1", "cluster")
    rules.replace([], version=2)
    assert rules.allowed("10.0.0.1", "cluster") and not rules.active
