"""The audit log with real masters and brokers: logins (ok and failed), calls refused by the
masters and by the brokers (summarised: a flood costs a few entries with counts, not one each),
the failed-login backoff per source, and ``tubeq audit``."""
from __future__ import annotations

import json
import time
from collections import Counter

import grpc
import pytest

from broker.replica_stream import ReplicaStreamClient
from lib.admin import AdminClient
from lib.auth.client import Credentials
from lib.errors import PermissionDenied, Unauthenticated
from lib.proto import broker_pb2 as bpb
from lib.records import Record, encode_batch
from tests.integration.test_cli import tubeq
from tests.integration.test_consumer_common import wait_for

ALICE = Credentials("alice", "alice-audit-password")
WINDOW_S = 0.5


@pytest.fixture
def audited(cluster_factory, tmp_path):
    master_conf, broker_conf = tmp_path / "master.toml", tmp_path / "broker.toml"
    master_conf.write_text(f"[master]\naudit_refusal_window_s = {WINDOW_S}\n"
                           "login_backoff_after = 3\n")
    broker_conf.write_text(f"[broker]\naudit_refusal_window_s = {WINDOW_S}\n")
    cluster = cluster_factory(1, master_args=["--config", str(master_conf)],
                              broker_args=["--config", str(broker_conf)])
    root = AdminClient(cluster.master_addresses, credentials=cluster.admin_credentials())
    root.add_user(ALICE.user, ALICE.password)
    root.create_topic("audited", partitions=1)
    try:
        yield cluster, root
    finally:
        root.close()


def refused(root: AdminClient, method: str, principal: str) -> list[dict]:
    """The details of the refusal summaries of ``method`` for ``principal``."""
    return [json.loads(e.details) for e in root.audit_log(10_000)
            if e.action == "refused" and e.target == method and e.principal == principal]


def test_logins_are_audited_and_failures_from_one_host_back_off(audited):
    cluster, root = audited
    masters = cluster.master_addresses
    assert root.login(ALICE.user, ALICE.password).principal == "alice"
    for _ in range(3):
        with pytest.raises(Unauthenticated, match="wrong user or password"):
            root.login(ALICE.user, "not-her-password")
    with pytest.raises(Unauthenticated, match=r"too many failed logins from this address: "
                                              r"try again in 1 s"):
        root.login(ALICE.user, ALICE.password)  # not even checked
    time.sleep(1.1)
    assert root.login(ALICE.user, ALICE.password).principal == "alice"
    logins = [e for e in root.audit_log(1000) if e.action == "login" and e.target == "alice"]
    assert len(logins) == 2 and all(e.principal == "alice" and e.peer for e in logins)
    def reasons() -> Counter:
        """Refusal counts by reason, summed: a window may end between two failures."""
        counts: Counter = Counter()
        for summary in refused(root, "Login", "alice"):
            counts[summary["reason"]] += summary["count"]
        return counts
    counts = wait_for(lambda: (c := reasons())["wrong user or password"] >= 3 and c, 10,
                      "failed logins audited")
    assert counts["wrong user or password"] == 3 and any("too many" in r for r in counts)
    everything = " ".join(e.details for e in root.audit_log(10_000))
    assert "not-her-password" not in everything and ALICE.password not in everything

    shown = tubeq(masters, "audit", "--action", "login", "--json")
    assert shown.returncode == 0, shown.stderr
    assert {e["target"] for e in json.loads(shown.stdout)} >= {"alice"}
    assert {e["action"] for e in json.loads(shown.stdout)} == {"login"}


def test_a_flood_of_refused_calls_costs_a_few_summaries(audited):
    cluster, root = audited
    with AdminClient(cluster.master_addresses, credentials=ALICE) as alice:
        with pytest.raises(PermissionDenied):
            alice.create_topic("not-hers")
        token = alice.login(ALICE.user, ALICE.password).token
    calls = 300
    request = bpb.ProduceRequest(topic="audited", partition=0,
                                 batch=encode_batch([Record(value=b"x")]))
    with grpc.insecure_channel(cluster.brokers[1].address) as channel:
        produce = channel.unary_unary("/tubeq.broker.Broker/Produce",
                                      bpb.ProduceRequest.SerializeToString,
                                      bpb.ProduceResponse.FromString)
        for _ in range(calls):
            with pytest.raises(grpc.RpcError) as info:
                produce(request, metadata=(("authorization", f"Bearer {token}"),), timeout=5)
            assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    summaries = wait_for(lambda: (lambda s: s if sum(x["count"] for x in s) >= calls else None)(
        refused(root, "Produce", "alice")), 15, "the broker's refusals in the audit log")
    assert sum(s["count"] for s in summaries) == calls
    assert len(summaries) <= 20  # one per window the flood spanned, not one per call
    assert {s["server"] for s in summaries} == {"broker 1"}
    assert all("alice may not produce on topic 'audited'" in s["reason"] for s in summaries)
    (on_master,) = wait_for(lambda: refused(root, "CreateTopic", "alice"), 10,
                            "the master's refusal in the audit log")
    assert on_master["count"] == 1 and on_master["server"].startswith("master ")


def test_refusals_inside_handlers_are_audited_too(audited):
    """A push Subscribe is checked on its first message, in the handler, not the interceptor."""
    cluster, root = audited
    with AdminClient(cluster.master_addresses, credentials=ALICE) as alice:
        token = alice.login(ALICE.user, ALICE.password).token
    start = bpb.SubscribeRequest(start=bpb.SubscribeStart(
        topic="audited", partitions=[bpb.PartitionFetch(partition=0, offset=0)]))
    with grpc.insecure_channel(cluster.brokers[1].address) as channel:
        subscribe = channel.stream_stream("/tubeq.broker.Broker/Subscribe",
                                          bpb.SubscribeRequest.SerializeToString,
                                          bpb.SubscribeResponse.FromString)
        for _ in range(2):
            with pytest.raises(grpc.RpcError) as info:
                next(iter(subscribe(iter([start]), timeout=5,
                                    metadata=(("authorization", f"Bearer {token}"),))))
            assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    summaries = wait_for(lambda: (lambda s: s if sum(x["count"] for x in s) >= 2 else None)(
        refused(root, "Subscribe", "alice")), 15, "the Subscribe refusals in the audit log")
    assert sum(s["count"] for s in summaries) == 2
    assert all("alice may not consume on topic 'audited'" in s["reason"] for s in summaries)


def test_a_replica_stream_hello_without_the_cluster_credential_is_audited(audited):
    """A broker's replica stream port (broker/replica_stream.py) counts its refusals as its
    gRPC port does."""
    cluster, root = audited
    port = cluster.brokers[1].info["replica_stream"]
    for _ in range(3):
        with pytest.raises(Unauthenticated, match="cluster credential only"):
            ReplicaStreamClient("127.0.0.1", port, "Cluster a-guessed-secret-of-some-length", None)
    summaries = wait_for(lambda: (lambda s: s if sum(x["count"] for x in s) >= 3 else None)(
        refused(root, "ReplicaStream", "-")), 15, "the stream's refusals in the audit log")
    assert sum(s["count"] for s in summaries) == 3
    assert all(s["server"] == "broker 1" and "cluster credential" in s["reason"]
               for s in summaries)
