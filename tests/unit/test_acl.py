"""The ACL decision (lib/auth/acl.py): deny by default, deny wins, prefixes, roles, implied
describe, the superuser role and the cluster identity, and the cache dropped on replace."""
from __future__ import annotations

import pytest

from lib.auth.access import Access
from lib.auth.acl import Acl, Authorizer
from lib.auth.identities import Identity
from lib.errors import InvalidArgument, InvalidName, PermissionDenied


def may(auth: Authorizer, principal: str, operation: str, resource: str, name: str,
        roles: tuple[str, ...] = (), kind: str = "user") -> bool:
    return auth.allowed(principal, roles, kind, operation, resource, name)


def test_nothing_is_allowed_without_an_entry_but_to_admins_and_the_cluster():
    auth = Authorizer()
    assert not may(auth, "alice", "produce", "topic", "orders")
    assert not may(auth, "alice", "describe", "cluster", "cluster")
    assert may(auth, "root", "delete", "topic", "orders", roles=("admin",))
    assert may(auth, "cluster", "produce", "topic", "orders", kind="cluster")
    with pytest.raises(PermissionDenied, match="alice may not produce on topic 'orders'"):
        Access(Identity("alice", (), "user"), auth).check("produce", "topic", "orders")


def test_literal_prefix_role_and_anyone_entries_match_only_what_they_name():
    auth = Authorizer([Acl("user:alice", "topic", "orders", "produce"),
                       Acl("role:etl", "topic", "raw-", "consume", pattern="prefix"),
                       Acl("*", "group", "public", "consume")])
    assert may(auth, "alice", "produce", "topic", "orders")
    assert not may(auth, "alice", "produce", "topic", "orders2")
    assert not may(auth, "alice", "consume", "topic", "orders")
    assert not may(auth, "bob", "produce", "topic", "orders")
    assert may(auth, "bob", "consume", "topic", "raw-clicks", roles=("etl",))
    assert not may(auth, "bob", "consume", "topic", "raw-clicks")
    assert not may(auth, "bob", "consume", "topic", "clicks-raw", roles=("etl",))
    assert may(auth, "anyone", "consume", "group", "public")
    assert not may(auth, "anyone", "consume", "topic", "public")  # another resource type


def test_deny_wins_over_any_allow_whatever_the_order():
    entries = [Acl("*", "topic", "", "all", pattern="prefix"),
               Acl("user:mallory", "topic", "pay", "consume", effect="deny", pattern="prefix")]
    for ordered in (entries, entries[::-1]):
        auth = Authorizer(ordered)
        assert may(auth, "alice", "consume", "topic", "payments")
        assert not may(auth, "mallory", "consume", "topic", "payments")
        assert may(auth, "mallory", "produce", "topic", "payments")
        assert may(auth, "mallory", "consume", "topic", "orders")


def test_every_operation_but_admin_grants_describe_and_all_grants_everything():
    auth = Authorizer([Acl("user:p", "topic", "t", "produce"),
                       Acl("user:a", "cluster", "cluster", "admin"),
                       Acl("user:x", "topic", "t", "all")])
    assert may(auth, "p", "describe", "topic", "t")
    assert not may(auth, "p", "delete", "topic", "t")
    assert not may(auth, "a", "describe", "topic", "t")
    assert may(auth, "a", "admin", "cluster", "cluster")
    assert all(may(auth, "x", op, "topic", "t") for op in
               ("produce", "consume", "describe", "create", "alter", "delete"))


def test_replacing_the_entries_drops_cached_decisions():
    auth = Authorizer([Acl("user:alice", "topic", "orders", "produce")], version=1)
    assert may(auth, "alice", "produce", "topic", "orders")
    auth.replace([Acl("user:alice", "topic", "orders", "produce", effect="deny")], version=2)
    assert not may(auth, "alice", "produce", "topic", "orders") and auth.version == 2


@pytest.mark.parametrize("fields, error, match", [
    (("alice", "topic", "t", "produce"), InvalidArgument, "user:<name>, role:<name> or"),
    (("user:alice", "queue", "t", "produce"), InvalidArgument, "resource must be one of"),
    (("user:alice", "topic", "t", "read"), InvalidArgument, "operation must be one of"),
    (("user:alice", "topic", "t", "write"), InvalidArgument, "operation of a transactional_id"),
    (("user:alice", "topic", "../t", "produce"), InvalidName, "invalid topic name"),
    (("user:alice", "cluster", "other", "admin"), InvalidArgument, "resource 'cluster'"),
    (("user:a/b", "topic", "t", "produce"), InvalidName, "invalid user name"),
])
def test_bad_entries_are_refused_naming_the_field(fields, error, match):
    with pytest.raises(error, match=match):
        Acl(*fields)


def somewhere(auth: Authorizer, principal: str, roles: tuple[str, ...] = (),
              kind: str = "user") -> bool:
    return auth.allowed_somewhere(principal, roles, kind, "produce", "topic")


def test_produce_somewhere_needs_an_allow_no_deny_covers_whole():
    assert not somewhere(Authorizer(), "alice")
    assert somewhere(Authorizer(), "root", roles=("admin",))
    assert somewhere(Authorizer(), "cluster", kind="cluster")
    auth = Authorizer([Acl("user:alice", "topic", "orders", "produce"),
                       Acl("role:etl", "topic", "raw-", "all", pattern="prefix"),
                       Acl("user:carol", "topic", "orders", "consume"),
                       Acl("user:carol", "group", "g", "produce"),
                       Acl("*", "topic", "", "produce", "deny", "prefix")])
    assert not somewhere(auth, "alice")  # deny on every topic covers her literal allow
    assert not somewhere(auth, "bob", roles=("etl",))
    assert not somewhere(auth, "carol")  # consume, and produce on a group: not produce on a topic
    auth = Authorizer([Acl("user:alice", "topic", "orders", "produce"),
                       Acl("user:alice", "topic", "orders", "produce", "deny"),
                       Acl("role:etl", "topic", "raw-", "all", pattern="prefix"),
                       Acl("role:etl", "topic", "raw-x", "produce", "deny"),
                       Acl("user:dave", "topic", "logs-", "produce", pattern="prefix"),
                       Acl("user:dave", "topic", "logs", "produce", "deny", "prefix"),
                       Acl("user:erin", "topic", "logs-", "produce", pattern="prefix"),
                       Acl("user:erin", "topic", "logs-a", "produce", "deny", "prefix")])
    assert not somewhere(auth, "alice")  # her one topic is denied
    assert somewhere(auth, "bob", roles=("etl",))  # raw-y is still allowed
    assert not somewhere(auth, "dave")  # the deny prefix covers the allow prefix
    assert somewhere(auth, "erin")  # logs-b
    assert not somewhere(auth, "frank")


def test_a_refusal_to_produce_anywhere_names_the_principal_and_the_call():
    alice = Access(Identity("alice", (), "user"), Authorizer())
    with pytest.raises(PermissionDenied, match="alice may not produce on any topic "
                                               r"\(a producer id needs produce"):
        alice.check_somewhere("produce", "topic", "a producer id")
    Access(Identity("alice", (), "user"), None).check_somewhere("produce", "topic", "x")
    Access(Identity("alice", (), "user"), Authorizer([Acl("user:alice", "topic", "t", "produce")])
           ).check_somewhere("produce", "topic", "x")


def test_a_transactional_id_takes_write_and_describe_and_write_belongs_to_it_alone():
    auth = Authorizer([Acl("user:p", "transactional_id", "orders-", "write", pattern="prefix"),
                       Acl("user:r", "transactional_id", "orders-1", "describe")])
    assert may(auth, "p", "write", "transactional_id", "orders-1")
    assert may(auth, "p", "describe", "transactional_id", "orders-1"), "write grants describe"
    assert not may(auth, "p", "write", "topic", "orders-1"), "another resource type"
    assert may(auth, "r", "describe", "transactional_id", "orders-1")
    assert not may(auth, "r", "write", "transactional_id", "orders-1")
    with pytest.raises(InvalidArgument, match="transactional_id ACL takes write, describe"):
        Acl("user:p", "transactional_id", "t", "produce")
    with pytest.raises(InvalidArgument, match="write is an operation of a transactional_id"):
        Acl("user:p", "topic", "t", "write")
    with pytest.raises(InvalidName, match="transactional_id"):
        Acl("user:p", "transactional_id", "../x", "write")
