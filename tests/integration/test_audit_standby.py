"""Calls a standby master refuses leave a trace: a summary line per window in its own log, and
the summaries in the replicated audit log (the standby hands them to the active master through
Raft, as brokers send theirs with their heartbeats). Three real masters, one broker."""
from __future__ import annotations

import json

import grpc
import pytest

from lib.admin import AdminClient
from lib.proto import admin_pb2, admin_pb2_grpc
from tests.integration.test_consumer_common import wait_for

WINDOW_S = 0.5
CALLS = 5


def refused_list_topics(root: AdminClient) -> list[dict]:
    return [{**json.loads(e.details), "peer": e.peer} for e in root.audit_log(10_000)
            if e.action == "refused" and e.target == "ListTopics" and e.principal == "-"]


def logged_summaries(log_text: str) -> list[dict]:
    lines = [json.loads(line) for line in log_text.splitlines() if line.startswith("{")]
    return [e for e in lines if e.get("event") == "master.refused"
            and e.get("method") == "ListTopics"]


def test_anonymous_calls_a_standby_refuses_reach_its_log_and_the_audit_log(cluster_factory,
                                                                            tmp_path):
    conf = tmp_path / "master.toml"
    conf.write_text(f"[master]\naudit_refusal_window_s = {WINDOW_S}\n")
    c = cluster_factory(1, master_args=["--config", str(conf)], masters=3)
    leader = c.leader()
    standby = next(m for m in c.masters if m is not leader)
    with grpc.insecure_channel(standby.address) as channel:
        stub = admin_pb2_grpc.AdminStub(channel)
        for _ in range(CALLS):
            with pytest.raises(grpc.RpcError) as info:
                stub.ListTopics(admin_pb2.ListTopicsRequest(), timeout=5)
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED

    with AdminClient(c.master_addresses, credentials=c.admin_credentials()) as root:
        summaries = wait_for(
            lambda: (lambda s: s if sum(x["count"] for x in s) >= CALLS else None)(
                refused_list_topics(root)), 15, "the standby's refusals in the audit log")
    assert sum(s["count"] for s in summaries) == CALLS
    assert {s["server"] for s in summaries} == {f"master {standby.address} (standby)"}
    assert {s["peer"] for s in summaries} == {"127.0.0.1"}
    assert all("credentials" in s["reason"] or "token" in s["reason"] for s in summaries), \
        summaries

    lines = wait_for(lambda: (lambda s: s if sum(x["count"] for x in s) >= CALLS else None)(
        logged_summaries((standby.data_dir / "log.txt").read_text())), 10,
        "the summary in the standby's own log")
    assert sum(x["count"] for x in lines) == CALLS
    assert all(x["level"] in ("info", "warning") and x["standby"] for x in lines)
