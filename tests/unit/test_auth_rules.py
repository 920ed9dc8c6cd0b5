"""The method -> ACL table (lib/auth/rules.py) covers every method of every service, from the
service descriptors, so a method added later without a rule fails here (and is refused by the
servers: fail closed); the fields a rule reads exist and hold names."""
from __future__ import annotations

from collections import namedtuple

import pytest
from google.protobuf import message_factory
from google.protobuf.descriptor import FieldDescriptor
from grpc_health.v1 import health_pb2

from lib.auth.access import Access
from lib.auth.acl import Acl, Authorizer
from lib.auth.gate import Gate
from lib.auth.identities import CLUSTER_IDENTITY, Identity
from lib.auth.rules import CLUSTER_METHODS, PUBLIC_METHODS, RULES
from lib.errors import PermissionDenied
from lib.proto import admin_pb2, broker_pb2, master_pb2, security_pb2
from lib.proto import broker_pb2 as bpb
from lib.proto import security_pb2 as spb

MODULES = (master_pb2, admin_pb2, security_pb2, broker_pb2, health_pb2)


def every_method():
    for module in MODULES:
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                yield f"/{service.full_name}/{method.name}", method


def test_every_method_of_every_service_has_a_rule_and_every_rule_a_method():
    methods = dict(every_method())
    assert len(methods) > 40
    assert set(methods) == set(RULES), set(methods) ^ set(RULES)


@pytest.mark.parametrize("name", sorted(RULES))
def test_a_rule_reads_its_names_from_one_string_field_of_the_request(name):
    rule = RULES[name]
    assert rule.kind in ("public", "cluster", "needs", "handler")
    assert (rule.kind == "needs") == bool(rule.needs)
    request = message_factory.GetMessageClass(dict(every_method())[name].input_type)
    for need in rule.needs:
        if need.resource == "cluster":
            assert list(need.names(request())) == ["cluster"]
        else:
            assert len([f for f in request.DESCRIPTOR.fields if read_by(need, request, f)]) == 1


def read_by(need, request, field) -> bool:
    """Whether a name set in ``field`` is one of the names the need checks."""
    if field.type != FieldDescriptor.TYPE_STRING:
        return False
    msg = request()
    if field.is_repeated:
        getattr(msg, field.name).append("probe-name")
    else:
        setattr(msg, field.name, "probe-name")
    return "probe-name" in list(need.names(msg))


def test_only_login_status_and_health_are_public_and_broker_calls_cluster_only():
    assert PUBLIC_METHODS == {"/tubeq.security.Security/Login", "/tubeq.admin.Admin/MasterStatus",
                              "/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch",
                              "/grpc.health.v1.Health/List"}
    assert CLUSTER_METHODS == {"/tubeq.master.Master/RegisterBroker",
                               "/tubeq.master.Master/BrokerHeartbeat",
                               "/tubeq.master.Master/AlterIsr",
                               "/tubeq.master.Master/KafkaGroup",
                               "/tubeq.security.Security/ScramStep",
                               "/tubeq.master.Master/BrokerShutdown",
                               "/tubeq.master.Master/CheckOpenTxns",
                               "/tubeq.broker.Broker/ResetOffsets",
                               "/tubeq.broker.Broker/ReplicaFetch",
                               "/tubeq.broker.Broker/WriteTxnMarkers"}


Details = namedtuple("Details", "method invocation_metadata")


class Everyone:
    """An authenticator for the gate tests: the header names the identity."""

    def identify(self, header: str) -> Identity:
        return CLUSTER_IDENTITY if header == "cluster" else Identity(header, (), "user")


def test_the_gate_refuses_a_method_without_a_rule_and_clients_on_cluster_methods():
    gate = Gate(Everyone(), lambda: Authorizer())  # type: ignore[arg-type]
    refused = gate.decide(Details("/tubeq.broker.Broker/NewThing", [("authorization", "bob")]))
    assert isinstance(refused.error, PermissionDenied)
    assert "has no access rule" in refused.error.message and refused.principal == ""
    refused = gate.decide(Details("/tubeq.broker.Broker/ResetOffsets",
                                  [("authorization", "bob")]))
    assert isinstance(refused.error, PermissionDenied) and refused.principal == "bob"
    assert "brokers and masters only" in refused.error.message
    identity, rule = gate.decide(Details("/tubeq.broker.Broker/ResetOffsets",
                                       [("authorization", "cluster")]))
    assert identity is CLUSTER_IDENTITY and rule.kind == "cluster"
    assert gate.decide(Details("/tubeq.security.Security/Login", [])) is None


def test_a_rule_checks_every_name_the_request_gives():
    acls = Authorizer([Acl("user:bob", "topic", "a", "produce"),
                       Acl("user:bob", "group", "g", "consume"),
                       Acl("user:bob", "topic", "in-", "consume", pattern="prefix")])
    bob = Access(Identity("bob", (), "user"), acls)
    bob.enforce(RULES["/tubeq.broker.Broker/Produce"], bpb.ProduceRequest(topic="a"))
    with pytest.raises(PermissionDenied, match="bob may not produce on topic 'b'"):
        bob.enforce(RULES["/tubeq.broker.Broker/Produce"], bpb.ProduceRequest(topic="b"))
    join = RULES["/tubeq.master.Master/JoinGroup"]
    bob.enforce(join, master_pb2.JoinGroupRequest(group="g", topics=["in-1", "in-2"]))
    with pytest.raises(PermissionDenied, match="consume on topic 'a'"):
        bob.enforce(join, master_pb2.JoinGroupRequest(group="g", topics=["in-1", "a"]))
    with pytest.raises(PermissionDenied, match="consume on group 'h'"):
        bob.enforce(join, master_pb2.JoinGroupRequest(group="h", topics=["in-1"]))
    with pytest.raises(PermissionDenied, match="admin on the cluster"):
        bob.enforce(RULES["/tubeq.security.Security/AddUser"], spb.AddUserRequest(name="x"))


def test_a_user_may_set_its_own_password_only():
    bob = Access(Identity("bob", (), "user"), Authorizer())
    rule = RULES["/tubeq.security.Security/SetPassword"]
    bob.enforce(rule, spb.SetPasswordRequest(name="bob", password="x"))
    with pytest.raises(PermissionDenied):
        bob.enforce(rule, spb.SetPasswordRequest(name="alice", password="x"))
