"""Masters and brokers with ``auth = "token"``: every call but a login needs a valid token,
brokers verify tokens with the keys the masters send them, brokers and masters reach each other
with the cluster secret, and the audit log names the authenticated principal."""
from __future__ import annotations

import pytest

from lib.admin import AdminClient
from lib.auth.client import Credentials
from lib.consumer.pull import PullConsumer
from lib.errors import PermissionDenied, Unauthenticated
from lib.producer.producer import Producer
from lib.proto import broker_pb2, broker_pb2_grpc, master_pb2, master_pb2_grpc
from lib.rpc import MasterClient, channel, invoke
from tests.integration.test_consumer_common import poll_until, wait_for

SECRET = "test-cluster-secret-0123456789"


@pytest.fixture
def secured(cluster_factory, tmp_path, monkeypatch):
    monkeypatch.setenv("TUBEQ_CLUSTER_SECRET", SECRET)  # masters and brokers inherit it
    for var in ("TUBEQ_USER", "TUBEQ_PASSWORD", "TUBEQ_API_KEY", "TUBEQ_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    master_conf, broker_conf = tmp_path / "master.toml", tmp_path / "broker.toml"
    master_conf.write_text('[master]\nauth = "token"\n')
    broker_conf.write_text('[broker]\nauth = "token"\n')
    cluster = cluster_factory(1, master_args=["--config", str(master_conf)],
                              broker_args=["--config", str(broker_conf)])
    return cluster, cluster.admin_credentials()  # it waited for the broker as this admin


def test_calls_without_valid_credentials_are_refused_and_say_why(secured):
    cluster, admin = secured
    masters = cluster.master_addresses
    with AdminClient(masters) as anonymous, pytest.raises(Unauthenticated, match="no credentials"):
        anonymous.list_topics()
    wrong = Credentials("admin", "not the password at all")
    with AdminClient(masters, credentials=wrong) as client, \
            pytest.raises(Unauthenticated, match="wrong user or password"):
        client.list_topics()
    with AdminClient(masters, credentials=admin) as client:
        token = client.login(admin.user, admin.password).token
        assert [s.role for s in client.master_status()] == ["leader"]
    head, body, sig = token.split(".")
    for bad, why in ((f"{head}.{body}.{sig[:-4]}AAAA", "signature does not match"),
                     ("tq1.e30.AAAA", "malformed token"), ("x" * 5000, "more than 4096")):
        with AdminClient(masters, credentials=Credentials(token=bad)) as client, \
                pytest.raises(Unauthenticated, match=why) as info:
            client.list_topics()
        assert admin.password not in info.value.message
    with Producer(masters, request_timeout_ms=3000) as producer, \
            pytest.raises(Unauthenticated, match="no credentials"):
        producer.send_sync("anything", b"x")


def test_a_logged_in_admin_works_and_the_audit_names_it(secured):
    cluster, admin = secured
    with AdminClient(cluster.master_addresses, credentials=admin,
                     principal="somebody-else") as client:
        client.create_topic("secured", partitions=2)
        assert [b.alive for b in client.list_brokers()] == [True]  # the cluster secret worked
        entry = next(e for e in client.audit_log() if e.action == "create_topic")
        assert entry.principal == "admin"  # not what the metadata claimed


def test_broker_only_methods_refuse_a_client_identity(secured):
    cluster, admin = secured
    with AdminClient(cluster.master_addresses, credentials=admin) as client:
        token = client.login(admin.user, admin.password).token
    master = MasterClient(cluster.master_addresses)
    try:
        with pytest.raises(PermissionDenied,
                           match="BrokerHeartbeat is for brokers and masters only"):
            master.call(master_pb2_grpc.MasterStub, "BrokerHeartbeat",
                        master_pb2.BrokerHeartbeatRequest(broker_id=1),
                        metadata=(("authorization", f"Bearer {token}"),))
        with pytest.raises(Unauthenticated, match="wrong cluster credential"):
            master.call(master_pb2_grpc.MasterStub, "RegisterBroker",
                        master_pb2.RegisterBrokerRequest(broker_id=9, address="127.0.0.1:1"),
                        metadata=(("authorization", "Cluster guessed-secret"),))
    finally:
        master.close()


def broker_call(address: str, method: str, request, header: str | None):
    ch = channel(address)
    try:
        metadata = None if header is None else (("authorization", header),)
        return invoke(getattr(broker_pb2_grpc.BrokerStub(ch), method), request, 5, metadata)
    finally:
        ch.close()


def test_brokers_check_tokens_and_masters_reach_them_with_the_cluster_secret(secured):
    cluster, admin = secured
    masters = cluster.master_addresses
    with AdminClient(masters, credentials=admin) as client:
        client.create_topic("guarded", partitions=2)
        token = client.login(admin.user, admin.password).token
    with Producer(masters, credentials=admin) as producer:
        for i in range(20):
            producer.send_sync("guarded", f"m{i}".encode())
    with PullConsumer(masters, credentials=admin, group="readers",
                      auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
        consumer.subscribe("guarded")
        got = [r.value for r in poll_until(consumer, 20)]
        consumer.commit()
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(20))

    broker = cluster.brokers[1].address
    fetch = broker_pb2.FetchRequest(topic="guarded", partitions=[
        broker_pb2.PartitionFetch(partition=0, offset=0)])
    head, body, sig = token.split(".")
    for header, why in ((None, "no credentials"),
                        (f"Bearer {head}.{body}.{sig[:-4]}AAAA", "signature does not match"),
                        ("Cluster guessed-secret", "wrong cluster credential")):
        with pytest.raises(Unauthenticated, match=why) as info:
            broker_call(broker, "Fetch", fetch, header)
        assert admin.password not in info.value.message and sig not in info.value.message
    assert broker_call(broker, "Fetch", fetch, f"Bearer {token}").partitions  # a valid token

    reset = broker_pb2.ResetOffsetsRequest(group="readers", topic="guarded", offsets=[
        broker_pb2.OffsetCommit(partition=0, offset=0)], term=99)
    with pytest.raises(PermissionDenied, match="ResetOffsets is for brokers and masters only"):
        broker_call(broker, "ResetOffsets", reset, f"Bearer {token}")
    with AdminClient(masters, credentials=admin) as client:  # the master's own calls get in
        described = client.reset_group_offsets("readers", "guarded", to_earliest=True)
        assert {p.committed for p in described.partitions} == {0}


def test_a_rotated_signing_key_reaches_the_brokers_before_it_signs(secured):
    cluster, admin = secured
    masters = cluster.master_addresses
    with AdminClient(masters, credentials=admin) as client:
        client.create_topic("rotated", partitions=1)
        new_key, _ = client.rotate_signing_key()
        fresh = wait_for(lambda: (lambda t: t if new_key in _key_id(t) else None)(
            client.login(admin.user, admin.password).token), 15, "a token of the new key")
    # At once, with no wait: the broker had the key before the master signed with it.
    with Producer(masters, credentials=Credentials(token=fresh)) as producer:
        assert producer.send_sync("rotated", b"after rotation").offset == 0


def _key_id(token: str) -> str:
    import base64
    import json
    return json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))["kid"]
