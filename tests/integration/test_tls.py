"""TLS and mutual TLS with real masters and brokers: produce, consume and admin over TLS;
plaintext to a TLS port (and TLS to a plaintext one) fails with a clear error; under mutual
TLS a client certificate is a principal (CN) with roles (O), ACLs apply to it, and a client
without a certificate cannot even connect."""
from __future__ import annotations

import pytest

from lib.admin import AdminClient
from lib.auth.client import Credentials
from lib.auth.pki import LocalPki, issue
from lib.consumer import PullConsumer
from lib.errors import PermissionDenied, Unavailable
from lib.producer import Producer
from lib.tls import Tls
from tests.integration.test_acl import producing
from tests.integration.test_consumer_common import wait_for

ALICE = Credentials("alice", "alice-tls-password")


@pytest.fixture
def pki(tmp_path) -> LocalPki:
    return LocalPki(tmp_path / "tls").ensure([])


def client_cert(pki: LocalPki, tmp_path, name: str, roles: tuple[str, ...] = ()) -> Tls:
    cert, key = issue(pki.ca.read_bytes(), pki.ca_key.read_bytes(), name, roles=roles)
    (tmp_path / f"{name}.pem").write_bytes(cert)
    (tmp_path / f"{name}.key").write_bytes(key)
    return Tls(str(pki.ca), str(tmp_path / f"{name}.pem"), str(tmp_path / f"{name}.key"))


def round_trip(masters: str, topic: str, tls: Tls, credentials: Credentials | None,
               count: int = 50) -> list[bytes]:
    """Produce ``count`` records and read them back through a group."""
    with Producer(masters, credentials=credentials, tls=tls) as producer:
        for i in range(count):
            producer.send(topic, f"m{i}".encode())
        producer.flush()
    with PullConsumer(masters, group=f"g-{topic}", auto_offset_reset="earliest",
                      credentials=credentials, tls=tls) as consumer:
        consumer.subscribe([topic])
        got: list[bytes] = []
        for _ in range(100):
            got += [r.value for r in consumer.poll(timeout=0.2)]
            if len([v for v in got if v != b"probe"]) >= count:
                break
    return got


def test_produce_consume_and_admin_over_tls(cluster_factory, pki):
    tls = Tls(str(pki.ca))
    cluster = cluster_factory(1, master_args=pki.server_args(), broker_args=pki.server_args(),
                              tls=tls)
    masters = cluster.master_addresses
    admin = cluster.admin_credentials()
    with AdminClient(masters, credentials=admin, tls=tls) as root:
        root.create_topic("secure", partitions=2)
        assert [t.name for t in root.list_topics()] == ["secure"]
    assert sorted(round_trip(masters, "secure", tls, admin)) == sorted(
        f"m{i}".encode() for i in range(50))

    with pytest.raises(Unavailable) as info:  # plaintext to the TLS port
        with AdminClient(masters, credentials=admin, tls=None, timeout=2) as plain:
            plain.list_topics()
    assert "TLS" in info.value.message, info.value.message


def test_tls_to_a_plaintext_port_fails_clearly(cluster_factory, pki):
    cluster = cluster_factory(1)
    with pytest.raises(Unavailable) as info:
        with AdminClient(cluster.master_addresses, credentials=cluster.admin_credentials(),
                         tls=Tls(str(pki.ca)), timeout=2) as admin:
            admin.list_topics()
    assert "TLS" in info.value.message, info.value.message


def test_mutual_tls_maps_a_certificate_to_a_principal(cluster_factory, pki, tmp_path,
                                                      monkeypatch):
    for var in ("TUBEQ_USER", "TUBEQ_PASSWORD"):  # the session's admin: certificates only
        monkeypatch.delenv(var)
    admin_tls = Tls(str(pki.ca), str(pki.admin_cert), str(pki.admin_key))
    cluster = cluster_factory(1, master_args=pki.server_args(True),
                              broker_args=pki.server_args(True), tls=admin_tls)
    masters = cluster.master_addresses
    with AdminClient(masters, tls=admin_tls) as root:  # no token: the certificate's admin
        root.create_topic("mtls", partitions=1)
        root.add_user(ALICE.user, ALICE.password)
    carol = client_cert(pki, tmp_path, "carol")
    with AdminClient(masters, tls=carol) as as_carol:
        with pytest.raises(PermissionDenied, match="carol may not create"):
            as_carol.create_topic("not-carols")
    with pytest.raises(PermissionDenied, match="carol may not (describe|produce) on topic .mtls."):
        with Producer(masters, tls=carol, retries=0) as producer:
            producer.send_sync("mtls", b"x", timeout=10)
    with AdminClient(masters, tls=admin_tls) as root:
        for op in ("produce", "consume"):
            root.add_acl("user:carol", op, "topic", "mtls")
        root.add_acl("user:carol", "consume", "group", "g-mtls")
    wait_for(lambda: producing(masters, None, "mtls", carol), 15, "carol's ACL on the broker")
    got = round_trip(masters, "mtls", carol, None, count=10)
    assert [v for v in got if v != b"probe"] == [f"m{i}".encode() for i in range(10)]

    # A token still wins over the certificate: alice, with no ACL, is refused.
    with AdminClient(masters, credentials=ALICE, tls=carol) as as_alice:
        assert as_alice.login(ALICE.user, ALICE.password).principal == "alice"
        with pytest.raises(PermissionDenied, match="alice may not"):
            as_alice.create_topic("not-alices")

    with pytest.raises(Unavailable):  # no certificate: the handshake fails
        with AdminClient(masters, credentials=ALICE, tls=Tls(str(pki.ca)),
                         timeout=2) as bare:
            bare.list_topics()
