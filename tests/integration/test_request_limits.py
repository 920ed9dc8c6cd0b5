"""Large requests against real servers: a caller without valid credentials cannot make a broker
or a master buffer its request. The auth interceptor refuses before the request message is
read (lib/auth/server.py, ``_unread``), so a 60 MB request (under the 64 MiB receive limit)
costs the server what a 100 MB one does (over it): a few MB, not three times the request.

Memory is read from /proc/<pid>/status: VmRSS now, VmHWM the peak since it was last reset
(``5`` written to /proc/<pid>/clear_refs), so a buffer freed before the reading still counts.
"""
from __future__ import annotations

import re
import time
from pathlib import Path

import grpc
import pytest

from lib.admin import AdminClient
from lib.producer.producer import Producer
from lib.proto import admin_pb2 as apb
from lib.proto import broker_pb2 as bpb
from lib.records import Record, encode_batch

MB = 1 << 20
GROWTH_MB = 50  # the most a refused request may add to the server's resident set
HEADERS = {"no credentials": (None, "no credentials"),
           "a garbage token": ("Bearer garbage.garbage.garbage", "malformed token")}
CLIENT_OPTIONS = (("grpc.max_send_message_length", 256 * MB),)  # the server's limit is tested

# One master and one broker for the file (auth on); each test produces to a topic of its own.
pytestmark = pytest.mark.shared_cluster(brokers=1)


def memory_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of process ``pid`` in MB."""
    fields = dict(line.split(":", 1) for line in
                  Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return tuple(int(fields[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM"))


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS


def status_of(channel: grpc.Channel, method: str, request, response_type,
              header: str | None) -> tuple[grpc.StatusCode, str]:
    call = channel.unary_unary(method, type(request).SerializeToString, response_type.FromString)
    metadata = () if header is None else (("authorization", header),)
    try:
        call(request, metadata=metadata, timeout=30)
    except grpc.RpcError as err:
        return err.code(), err.details() or ""
    return grpc.StatusCode.OK, ""


def growth_of_refused_calls(pid: int, channel: grpc.Channel, method: str, request,
                            response_type) -> dict[str, tuple[float, float]]:
    """Send ``request`` with each bad header of HEADERS; assert each is refused as
    UNAUTHENTICATED; (RSS growth, peak growth) in MB per header."""
    out = {}
    for what, (header, why) in HEADERS.items():
        reset_peak(pid)
        rss_before, _ = memory_mb(pid)
        code, details = status_of(channel, method, request, response_type, header)
        assert code == grpc.StatusCode.UNAUTHENTICATED and why in details, (what, code, details)
        time.sleep(0.3)  # whatever the server still does with the call, it shows by now
        rss, peak = memory_mb(pid)
        out[what] = (rss - rss_before, peak - rss_before)
    return out


def produce_request(topic: str, size_mb: int) -> bpb.ProduceRequest:
    return bpb.ProduceRequest(topic=topic, partition=0, batch=b"\0" * (size_mb * MB))


@pytest.fixture
def limits(cluster, request):
    """(cluster, an admin's token, the test's own topic holding one record)."""
    topic = "limits-" + re.sub(r"[^A-Za-z0-9._-]", "-", request.node.name)
    admin = cluster.admin_credentials()
    with AdminClient(cluster.master_addresses, credentials=admin) as root:
        root.create_topic(topic, partitions=1)
        token = root.login(admin.user, admin.password).token
    with Producer(cluster.master_addresses, credentials=admin) as producer:
        producer.send_sync(topic, b"first")  # the broker hosts the topic from here on
    return cluster, token, topic


@pytest.mark.parametrize("size_mb", [100, 60])
def test_a_big_request_without_valid_credentials_does_not_grow_the_broker(limits, size_mb):
    """100 MB is over the broker's 64 MiB receive limit, 60 MB under it: refused alike, as
    UNAUTHENTICATED, before the broker reads the message (it then could not even tell that
    100 MB is too big)."""
    cluster, token, topic = limits
    broker = cluster.brokers[1]
    with grpc.insecure_channel(broker.address, options=CLIENT_OPTIONS) as channel:
        grown = growth_of_refused_calls(broker.pid, channel, "/tubeq.broker.Broker/Produce",
                                        produce_request(topic, size_mb), bpb.ProduceResponse)
        for what, (rss, peak) in grown.items():
            assert rss < GROWTH_MB and peak < GROWTH_MB, \
                f"{size_mb} MB with {what}: RSS +{rss:.0f} MB, peak +{peak:.0f} MB"
        # The connection that carried the refused calls still serves a valid one.
        small = bpb.ProduceRequest(topic=topic, partition=0,
                                   batch=encode_batch([Record(value=b"after")]))
        assert status_of(channel, "/tubeq.broker.Broker/Produce", small, bpb.ProduceResponse,
                         f"Bearer {token}") == (grpc.StatusCode.OK, "")
    with Producer(cluster.master_addresses) as producer:  # the session's admin
        assert producer.send_sync(topic, b"still serving").offset == 2


def test_a_valid_token_does_not_lift_the_receive_limit(limits):
    """With valid credentials the broker reads the message: over 64 MiB, gRPC refuses it
    from its length prefix, RESOURCE_EXHAUSTED, without buffering it either."""
    cluster, token, topic = limits
    broker = cluster.brokers[1]
    reset_peak(broker.pid)
    rss_before, _ = memory_mb(broker.pid)
    with grpc.insecure_channel(broker.address, options=CLIENT_OPTIONS) as channel:
        code, details = status_of(channel, "/tubeq.broker.Broker/Produce",
                                  produce_request(topic, 100), bpb.ProduceResponse,
                                  f"Bearer {token}")
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in details, details
    time.sleep(0.3)
    rss, peak = memory_mb(broker.pid)
    assert rss - rss_before < GROWTH_MB and peak - rss_before < GROWTH_MB, (rss_before, rss, peak)


def test_a_big_request_without_valid_credentials_does_not_grow_the_master(limits):
    """The master's synchronous server refuses the same way (60 MB: under the limit)."""
    cluster, _, topic = limits
    master = cluster.masters[0]
    request = apb.CreateTopicRequest(topic="x" * (60 * MB))
    with grpc.insecure_channel(master.address, options=CLIENT_OPTIONS) as channel:
        grown = growth_of_refused_calls(master.pid, channel, "/tubeq.admin.Admin/CreateTopic",
                                        request, apb.TopicDescription)
    for what, (rss, peak) in grown.items():
        assert rss < GROWTH_MB and peak < GROWTH_MB, \
            f"60 MB with {what}: RSS +{rss:.0f} MB, peak +{peak:.0f} MB"
    with AdminClient(cluster.master_addresses) as admin:  # the session's admin
        assert topic in {t.name for t in admin.list_topics()}
