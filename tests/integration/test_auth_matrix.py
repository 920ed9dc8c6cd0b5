"""Every gRPC method of every service (enumerated from the service descriptors, so a method added
later is covered without touching this file) called with each kind of credential, against real
masters and brokers: none, an expired token, a tampered token, a token signed with a key the
cluster does not hold (rotated out, or another cluster's), a valid token without the ACL, and a
valid token with it. Only the last gets past the checks; the refusals say why and leak neither
the password nor a signature. Methods only brokers and masters may call refuse every client
identity, the ACL notwithstanding."""
from __future__ import annotations

import base64
import json
import os
import time
from dataclasses import replace

import grpc
import pytest
from google.protobuf import message_factory

from lib.admin import AdminClient
from lib.auth.client import Credentials
from lib.auth.rules import RULES
from lib.auth.settings import cluster_header
from lib.auth.tokens import Claims, new_signing_key, sign
from lib.proto import broker_pb2 as bpb
from lib.proto import master_pb2 as mpb
from lib.proto import master_pb2_grpc
from lib.proto import security_pb2 as spb
from lib.records import Record, encode_batch
from lib.rpc import MasterClient
from tests.unit.test_auth_rules import MODULES, read_by

ALICE = Credentials("alice", "alice-matrix-password")
NAMES = {"topic": "matrix", "group": "matrix-g", "transactional_id": "matrix-t"}
DENIED, UNAUTH = grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED
SINK = "matrix-sink"


def methods():
    """(full name, method descriptor) of every method of every service, DeleteTopic last (with
    the ACL it deletes the topic the others use)."""
    out = [(f"/{s.full_name}/{m.name}", m) for module in MODULES
           for s in module.DESCRIPTOR.services_by_name.values() for m in s.methods]
    return sorted(out, key=lambda pair: (pair[0].endswith("/DeleteTopic"), pair[0]))


def request_for(name: str, method):
    """A request naming the matrix's topic and group wherever the method's rule reads names."""
    cls = message_factory.GetMessageClass(method.input_type)
    if name.endswith("/Subscribe"):
        return bpb.SubscribeRequest(start=bpb.SubscribeStart(
            topic="matrix", partitions=[bpb.PartitionFetch(partition=0, offset=0)]))
    if name.endswith("/SinkCommit"):
        return bpb.SinkCommitRequest(sink=SINK, batch_id=1,
                                     tasks=[bpb.SinkTask(task="t", pieces=1)])
    if name.endswith("/Login"):
        return spb.LoginRequest(user=ALICE.user, password=ALICE.password)
    if name.endswith("/SinkAbort"):
        return bpb.SinkAbortRequest(sink=SINK, batch_id=1)
    if name.endswith("/ProduceMany"):
        return bpb.ProduceManyRequest(entries=[bpb.ProduceRequest(
            topic="matrix", batch=encode_batch([Record(value=b"many")]))])
    msg = cls()
    for need in RULES[name].needs:
        for field in cls.DESCRIPTOR.fields:
            if need.resource != "cluster" and read_by(need, cls, field):
                value = NAMES[need.resource]
                if field.is_repeated:
                    getattr(msg, field.name).append(value)
                else:
                    setattr(msg, field.name, value)
    return msg


def call(channel: grpc.Channel, name: str, method, request, header: str | None):
    """(status code, details) of one raw call with ``header`` as its authorization."""
    response = message_factory.GetMessageClass(method.output_type)
    metadata = () if header is None else (("authorization", header),)
    serialize, parse = type(request).SerializeToString, response.FromString
    try:
        if method.client_streaming:
            stream = channel.stream_stream(name, serialize, parse)(
                iter([request]), metadata=metadata, timeout=3)
            next(stream, None)
        elif method.server_streaming:
            stream = channel.unary_stream(name, serialize, parse)(request, metadata=metadata,
                                                                  timeout=3)
            next(stream, None)
        else:
            answer = channel.unary_unary(name, serialize, parse)(request, metadata=metadata,
                                                                 timeout=5)
            if name.endswith("/ProduceMany") and answer.results[0].error_code:
                entry = answer.results[0]  # checked per entry: the entry's error is the answer
                assert entry.error_code == "PERMISSION_DENIED", entry
                return DENIED, entry.error_message
    except grpc.RpcError as err:
        return err.code(), err.details() or ""
    return grpc.StatusCode.OK, ""


def claims_of(token: str) -> dict:
    return json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))


def forged(token: str, secret: bytes | None, **changes) -> str:
    """``token`` with its claims changed, signed with ``secret`` (None: keep the signature)."""
    raw = claims_of(token)
    claims = Claims(raw["sub"], tuple(raw["roles"]), raw["kind"], raw["kid"], raw["iat"],
                    raw["exp"])
    claims = replace(claims, **changes)
    if secret is None:
        body = base64.urlsafe_b64encode(json.dumps(
            {"sub": claims.subject, "roles": list(claims.roles), "kind": claims.kind,
             "kid": claims.key_id, "iat": claims.issued_ms, "exp": claims.expires_ms},
            separators=(",", ":"), sort_keys=True).encode()).rstrip(b"=").decode()
        head, _, signature = token.split(".")
        return f"{head}.{body}.{signature}"
    return sign(claims, secret)


@pytest.fixture
def matrix(cluster_factory):
    cluster = cluster_factory(1)
    admin = cluster.admin_credentials()
    root = AdminClient(cluster.master_addresses, credentials=admin)
    root.create_topic("matrix", partitions=1)
    root.add_user(ALICE.user, ALICE.password)
    token = root.login(ALICE.user, ALICE.password).token
    # The cluster credential gets the signing keys, as a broker does: to forge expired tokens.
    master = MasterClient(cluster.master_addresses)
    keys = master.call(master_pb2_grpc.MasterStub, "RegisterBroker", mpb.RegisterBrokerRequest(
        broker_id=999, address="127.0.0.1:9"),
        metadata=cluster_header(os.environ["TUBEQ_CLUSTER_SECRET"])).signing_keys
    master.close()
    secret = {k.key_id: k.secret for k in keys}[claims_of(token)["kid"]]
    leader = next(s.address for s in root.master_status() if s.role == "leader")
    channels = {"master": grpc.insecure_channel(leader),
                "broker": grpc.insecure_channel(cluster.brokers[1].address)}
    try:
        yield cluster.master_addresses, root, admin, token, secret, channels
    finally:
        for ch in channels.values():
            ch.close()
        root.close()


def servers(name: str) -> list[str]:
    if name.startswith("/grpc.health"):
        return ["master", "broker"]
    return ["broker" if name.startswith("/tubeq.broker.") else "master"]


def stage_as_admin(root_token: str, channels) -> None:
    """A staged sink batch on topic matrix, so SinkCommit and SinkAbort have topics to check."""
    stub = channels["broker"].unary_unary("/tubeq.broker.Broker/SinkStage",
                                          bpb.SinkStageRequest.SerializeToString,
                                          bpb.SinkStageResponse.FromString)
    request = bpb.SinkStageRequest(sink=SINK, batch_id=1, task="t", piece=0, topic="matrix",
                                   partition=0, batch=encode_batch([Record(value=b"staged")]))
    deadline = time.monotonic() + 15
    while True:  # until the broker has the new topic
        try:
            stub(request, metadata=(("authorization", f"Bearer {root_token}"),), timeout=5)
            return
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.NOT_FOUND or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_every_method_refuses_every_bad_credential_and_passes_only_with_the_acl(matrix):
    masters, root, admin, token, secret, channels = matrix
    hour_ago = int((time.time() - 3600) * 1000)
    other_key_id, other_secret = new_signing_key()
    bad = {
        "none": (None, "no credentials"),
        "expired": ("Bearer " + forged(token, secret, issued_ms=hour_ago - 60_000,
                                       expires_ms=hour_ago), "token expired"),
        "tampered": (f"Bearer {forged(token, None, roles=('admin',))}",
                     "signature does not match"),
        "unknown key": (f"Bearer {forged(token, other_secret, key_id=other_key_id)}",
                        "key this cluster does not accept"),
    }
    alice = f"Bearer {token}"
    login = next(m for n, m in methods() if n.endswith("/Login"))
    code, details = call(channels["master"], "/tubeq.security.Security/Login", login,
                         spb.LoginRequest(user=ALICE.user, password="wrong-password!"), None)
    assert (code, details) == (UNAUTH, "wrong user or password")
    stage_as_admin(root.login(admin.user, admin.password).token, channels)
    every = methods()
    assert len(every) == len(RULES)
    for name, method in every:
        rule = RULES[name]
        request = request_for(name, method)
        for server in servers(name):
            channel = channels[server]
            for what, (header, why) in bad.items():
                code, details = call(channel, name, method, request, header)
                if rule.kind == "public":  # whatever the header says (Health/List: the
                    # servicer of this grpcio version answers UNIMPLEMENTED)
                    assert code in (grpc.StatusCode.OK, grpc.StatusCode.UNIMPLEMENTED), \
                        (name, what, details)
                    continue
                assert code == UNAUTH and why in details, (name, what, server, code, details)
                assert ALICE.password not in details and token.split(".")[2] not in details
            code, details = call(channel, name, method, request, alice)
            if rule.kind == "cluster":
                assert code == DENIED and "brokers and masters only" in details, (name, details)
            elif rule.kind in ("needs", "handler") and not name.endswith(
                    ("/ListTopics", "/ListGroups", "/ListTransactions")):
                assert code == DENIED and "alice may not" in details, (name, code, details)
    with AdminClient(masters, credentials=ALICE) as client:
        assert client.list_topics() == [] and client.list_groups() == []
        assert client.list_transactions(every=True) == []

    for resource, name in (("topic", "matrix"), ("group", "matrix-g"),
                           ("transactional_id", "matrix-t"), ("cluster", "cluster")):
        root.add_acl("user:alice", "all", resource, name)
    fetch = next(m for n, m in every if n == "/tubeq.broker.Broker/Fetch")
    deadline = time.monotonic() + 15
    while call(channels["broker"], "/tubeq.broker.Broker/Fetch", fetch,
               request_for("/tubeq.broker.Broker/Fetch", fetch), alice)[0] == DENIED:
        assert time.monotonic() < deadline, "the broker never got alice's ACLs"
        time.sleep(0.2)
    for name, method in every:
        for server in servers(name):
            code, details = call(channels[server], name, method, request_for(name, method), alice)
            if RULES[name].kind == "cluster":
                assert code == DENIED, (name, details)  # no ACL opens them to a client
            else:
                assert code not in (UNAUTH, DENIED), (name, code, details)

