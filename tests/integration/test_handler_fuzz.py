"""Fuzz every public request handler over real gRPC (hypothesis): random bytes as the request,
and random well-formed messages built from each method's descriptor, sent anonymously, as the
admin and as the cluster identity (which passes every check, so the fuzz reaches the handler's
own code). Whatever arrives, a server answers with a status that names the problem: never an
internal error (an exception the handler did not expect), never a hang, never a crash.

Methods are enumerated from the service descriptors, so a method added later is fuzzed too.
"""
from __future__ import annotations

import os
from typing import NamedTuple

import grpc
import pytest
from google.protobuf import message_factory
from google.protobuf.descriptor import FieldDescriptor as F
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lib.admin import AdminClient
from lib.auth.settings import cluster_header
from lib.proto import admin_pb2 as apb
from lib.records import Record, encode_batch
from tests.cluster import Cluster
from tests.integration.test_auth_matrix import methods, servers

TOPIC, GROUP = "fz", "fz-group"
# What a handler may answer: a refusal or an error that names the problem. INTERNAL and UNKNOWN
# mean an exception the handler did not expect; DEADLINE_EXCEEDED means it hung.
BUGS = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED}
# Streams that legitimately wait for data (their first message may never come).
WAITING = ("/Subscribe", "/Watch")
DEADLINE_S = 10.0
FETCH_MAX_WAIT_MS = 200  # the broker's long-poll cap, so a fuzzed Fetch returns quickly

VALID_BATCH = encode_batch([Record(value=b"fuzz", key=b"k", tag="t")] * 3)
# Strings: names the cluster knows and values the handlers accept (so calls get past the
# argument checks), then the odd ones, then anything.
VALID = st.sampled_from([TOPIC, GROUP, "fz-user", "user:fz-user", "user:*", "group:*", "*",
                         "10.9.8.0/24", "a-long-enough-password"])
ODD = st.sampled_from(["", "admin", "x" * 300, "a/../b", "é€𝄞", "user:admin", "\x00",
                       "127.0.0.1/32", "0.0.0.0/0", "role:admin", "-1"])
TEXT = st.one_of(VALID, ODD, st.text(max_size=24))
# What a field of this name usually holds when the request is right: drawn three times in four,
# so most requests pass the argument checks with one or two odd fields, and reach deep code.
LIKELY = {"topic": st.just(TOPIC), "topics": st.just(TOPIC), "group": st.just(GROUP),
          "sink": st.just("fz-sink"), "user": st.just("fz-user"), "task": st.just("t1"),
          "password": st.just("a-long-enough-password"), "principal": st.just("user:fz-user"),
          "network": st.just("10.9.8.0/24"), "entity": st.just("user:fz-user"),
          "resource": st.sampled_from(["topic", "group", "cluster"]),
          "operation": st.sampled_from(["produce", "consume", "describe", "all"]),
          "effect": st.sampled_from(["allow", "deny"]), "batch": st.just(VALID_BATCH),
          "partition": st.integers(0, 1), "partitions": st.integers(1, 3),
          "member_id": st.just("fz-member"), "role": st.just("viewer"),
          "roles": st.just("viewer")}
I32, U32, I64, U64 = (-2**31, 2**31 - 1), (0, 2**32 - 1), (-2**63, 2**63 - 1), (0, 2**64 - 1)
INTS = {F.TYPE_INT32: I32, F.TYPE_SINT32: I32, F.TYPE_SFIXED32: I32, F.TYPE_UINT32: U32,
        F.TYPE_FIXED32: U32, F.TYPE_INT64: I64, F.TYPE_SINT64: I64, F.TYPE_SFIXED64: I64,
        F.TYPE_UINT64: U64, F.TYPE_FIXED64: U64}


def _bytes() -> st.SearchStrategy[bytes]:
    flipped = st.builds(lambda i, b: VALID_BATCH[:i] + bytes([b]) + VALID_BATCH[i + 1:],
                        st.integers(0, len(VALID_BATCH) - 1), st.integers(0, 255))
    return st.one_of(st.binary(max_size=256), st.just(VALID_BATCH), flipped,
                     st.just(VALID_BATCH[:40]))


def _scalar(field) -> st.SearchStrategy:
    if field.type == F.TYPE_STRING:
        return TEXT
    if field.type == F.TYPE_BYTES:
        return _bytes()
    if field.type == F.TYPE_BOOL:
        return st.booleans()
    if field.type in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
        return st.floats(allow_nan=True, width=32 if field.type == F.TYPE_FLOAT else 64)
    if field.type == F.TYPE_ENUM:
        numbers = [v.number for v in field.enum_type.values]
        return st.one_of(st.sampled_from(numbers), st.integers(-5, 1000))
    low, high = INTS[field.type]
    near = st.integers(max(low, -2), 8)  # offsets, partitions, counts near the real ones
    return st.one_of(near, st.integers(low, high))


def message_of(descriptor, depth: int = 0) -> st.SearchStrategy:
    """Random messages of ``descriptor``'s type, each field set or left at its default."""
    cls = message_factory.GetMessageClass(descriptor)
    fields = {}
    for field in descriptor.fields:
        if field.type == F.TYPE_MESSAGE:
            if depth >= 3:
                continue
            inner = message_of(field.message_type, depth + 1)
        else:
            inner = _scalar(field)
            if field.name in LIKELY:
                likely = LIKELY[field.name]
                inner = st.one_of(likely, likely, likely, inner)
        if field.is_repeated:
            fields[field.name] = st.lists(inner, max_size=4)
        elif field.type == F.TYPE_MESSAGE:
            fields[field.name] = st.one_of(st.none(), inner)
        else:  # set: most handlers refuse a request whose names are empty
            fields[field.name] = inner
    return st.fixed_dictionaries(fields).map(lambda values: _build(cls, values))


def _build(cls, values: dict):
    msg = cls()
    for name, value in values.items():
        if value is None:
            continue
        field = cls.DESCRIPTOR.fields_by_name[name]
        target = getattr(msg, name) if field.is_repeated else None
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            for entry in value:
                key, item = entry.key, entry.value
                if field.message_type.fields_by_name["value"].type == F.TYPE_MESSAGE:
                    target[key].CopyFrom(item)
                else:
                    target[key] = item
        elif target is not None:
            target.extend(value)
        elif field.type == F.TYPE_MESSAGE:
            getattr(msg, name).CopyFrom(value)
        else:
            setattr(msg, name, value)
    return msg


def call(channel: grpc.Channel, name: str, method, raw: bytes, metadata) -> grpc.StatusCode:
    """The status of one call of ``name`` with ``raw`` as its serialized request."""
    parse = message_factory.GetMessageClass(method.output_type).FromString
    try:
        if method.client_streaming:
            stream = channel.stream_stream(name, None, parse)(
                iter([raw]), metadata=metadata, timeout=DEADLINE_S)
            next(stream, None)
        elif method.server_streaming:
            next(channel.unary_stream(name, None, parse)(raw, metadata=metadata,
                                                          timeout=DEADLINE_S), None)
        else:
            channel.unary_unary(name, None, parse)(raw, metadata=metadata, timeout=DEADLINE_S)
    except grpc.RpcError as err:
        if err.code() == grpc.StatusCode.DEADLINE_EXCEEDED and name.endswith(WAITING):
            return grpc.StatusCode.OK
        assert err.code() not in BUGS, (name, err.code(), err.details())
        return err.code()
    return grpc.StatusCode.OK


class Fuzzed(NamedTuple):
    cluster: Cluster
    channels: dict[str, grpc.Channel]
    identities: dict[str, tuple]

    def __repr__(self) -> str:  # hypothesis prints its arguments: no token or secret there
        return "Fuzzed(...)"


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    config = root / "broker.toml"
    config.write_text(f"[broker]\nfetch_max_wait_ms = {FETCH_MAX_WAIT_MS}\n")
    cluster = Cluster(root, broker_args=["--config", str(config)]).start(1)
    try:
        admin = cluster.admin_credentials()
        with AdminClient(cluster.master_addresses, credentials=admin) as root_client:
            root_client.create_topic(TOPIC, partitions=2)
            token = root_client.login(admin.user, admin.password).token
        identities = {
            "anonymous": (),
            "admin": (("authorization", f"Bearer {token}"),),
            "cluster": cluster_header(os.environ["TUBEQ_CLUSTER_SECRET"]),
        }
        channels = {"master": grpc.insecure_channel(cluster.masters[0].address),
                    "broker": grpc.insecure_channel(cluster.brokers[1].address)}
        yield Fuzzed(cluster, channels, identities)
        for channel in channels.values():
            channel.close()
    finally:
        cluster.stop_all()


FUZZ = settings(max_examples=40, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
METHODS = methods()


@pytest.mark.parametrize("name,method", METHODS, ids=[n for n, _ in METHODS])
@FUZZ
@given(data=st.data())
def test_handlers_answer_any_request_with_a_clear_status(fuzzed, name, method, data):
    cluster, channels, identities = fuzzed
    who = data.draw(st.sampled_from(["cluster", "cluster", "admin", "anonymous"]),
                    label="identity")
    message = message_of(method.input_type).map(lambda m: m.SerializeToString())
    raw = data.draw(st.one_of(message, message, message, st.binary(max_size=512)),
                    label="request")
    for server in servers(name):
        call(channels[server], name, method, raw, identities[who])


def test_servers_survive_the_fuzz(fuzzed):
    """Runs after the fuzz (file order): every process is alive and still serves. (The fuzz
    may have changed the admin's password or denied 127.0.0.1, so the cluster identity asks.)"""
    cluster, channels, identities = fuzzed
    assert [str(p.data_dir) for p in cluster.all_processes() if not p.alive()] == []
    for channel in channels.values():
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(),
                                                           timeout=5)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
    channels["master"].unary_unary(
        "/tubeq.admin.Admin/ListTopics", apb.ListTopicsRequest.SerializeToString,
        apb.ListTopicsResponse.FromString)(apb.ListTopicsRequest(),
                                           metadata=identities["cluster"], timeout=5)


@pytest.mark.parametrize("name", ["/tubeq.broker.Broker/Produce", "/tubeq.admin.Admin/CreateTopic",
                                  "/tubeq.broker.Broker/Subscribe"])
def test_undecodable_request_is_an_invalid_argument_naming_the_method(fuzzed, name):
    """Not grpc's own INTERNAL or UNKNOWN, which read as a server bug and name nothing."""
    method = dict(METHODS)[name]
    channel = fuzzed.channels[servers(name)[0]]
    with pytest.raises(grpc.RpcError) as caught:
        if method.client_streaming:
            next(channel.stream_stream(name)(iter([b"\xff\xff\xff"]), timeout=5,
                                             metadata=fuzzed.identities["cluster"]))
        else:
            channel.unary_unary(name)(b"\xff\xff\xff", timeout=5,
                                      metadata=fuzzed.identities["cluster"])
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"malformed request to {name}: 3 bytes" in caught.value.details()
