"""A master with ``auth = "token"``: every call but a login needs a valid token, brokers get
in with the cluster secret, and the audit log names the authenticated principal."""
from __future__ import annotations

import pytest

from lib.admin import AdminClient
from lib.auth.client import Credentials
from lib.errors import PermissionDenied, Unauthenticated
from lib.producer.producer import Producer
from lib.proto import master_pb2, master_pb2_grpc
from lib.rpc import MasterClient

SECRET = "test-cluster-secret-0123456789"


@pytest.fixture
def secured(cluster_factory, tmp_path, monkeypatch):
    monkeypatch.setenv("TUBEQ_CLUSTER_SECRET", SECRET)  # masters and brokers inherit it
    for var in ("TUBEQ_USER", "TUBEQ_PASSWORD", "TUBEQ_API_KEY", "TUBEQ_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    conf = tmp_path / "master.toml"
    conf.write_text('[master]\nauth = "token"\n')
    cluster = cluster_factory(1, master_args=["--config", str(conf)])
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
        with pytest.raises(PermissionDenied, match="BrokerHeartbeat is for brokers only"):
            master.call(master_pb2_grpc.MasterStub, "BrokerHeartbeat",
                        master_pb2.BrokerHeartbeatRequest(broker_id=1),
                        metadata=(("authorization", f"Bearer {token}"),))
        with pytest.raises(Unauthenticated, match="wrong cluster credential"):
            master.call(master_pb2_grpc.MasterStub, "RegisterBroker",
                        master_pb2.RegisterBrokerRequest(broker_id=9, address="127.0.0.1:1"),
                        metadata=(("authorization", "Cluster guessed-secret"),))
    finally:
        master.close()
