"""Draining a broker with real masters and brokers: a drained broker gets no new partition (topic
create, partition increase) and the ones it hosts move off with their records; undrain brings it
back; only admins may drain; an unknown id is UnknownBroker; with every live broker draining a
create fails saying so; the flag is Raft state (it survives a failover and a master restart);
the CLI drains, undrains and lists it."""
from __future__ import annotations

import json
import time

import pytest

from lib import errors
from lib.admin import AdminClient
from lib.auth.client import Credentials
from lib.producer.producer import Producer
from tests.cluster import Cluster
from tests.integration.test_cli import tubeq

DORA = Credentials("dora", "dora-drain-password")  # may describe the cluster, not change it
FAILOVER_S = 15.0


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """One master, two brokers; every test leaves both undrained."""
    made = Cluster(tmp_path_factory.mktemp("drain"))
    try:
        made.start(2)
        with AdminClient(made.master_addresses) as root:
            root.add_user(DORA.user, DORA.password)
            root.add_acl(f"user:{DORA.user}", "describe", "cluster", "cluster")
        yield made
    finally:
        made.stop_all()


@pytest.fixture
def admin(pair):
    with AdminClient(pair.master_addresses) as client:
        try:
            yield client
        finally:
            for b in client.list_brokers():
                client.undrain_broker(b.broker_id)


def brokers_of(info) -> list[int]:
    return [p.broker_id for p in info.partitions]


def draining(admin: AdminClient) -> dict[int, bool]:
    return {b.broker_id: b.draining for b in admin.list_brokers()}


def test_a_drained_broker_gets_no_new_partitions_and_undrain_brings_it_back(pair, admin):
    before = admin.create_topic("drain-before", partitions=4)
    assert sorted(brokers_of(before)) == [1, 1, 2, 2]
    on_two = next(p.partition for p in before.partitions if p.broker_id == 2)
    with Producer(pair.master_addresses) as producer:
        assert producer.send_sync("drain-before", b"moved", partition=on_two).offset == 0
    info = admin.drain_broker(2)
    assert info.broker_id == 2 and info.draining and info.alive and info.staying == 0
    assert draining(admin) == {1: False, 2: True}
    assert brokers_of(admin.create_topic("drain-during", partitions=4)) == [1, 1, 1, 1]
    grown = admin.alter_topic("drain-before", partitions=7)
    assert brokers_of(grown)[4:] == [1, 1, 1]

    # its partitions move to broker 1 with their records, and keep serving
    deadline = time.monotonic() + 30
    while any(p.replicas != [1] for p in admin.describe_topic("drain-before").partitions):
        assert time.monotonic() < deadline, "the drain did not move every partition"
        time.sleep(0.2)
    assert next(b for b in admin.list_brokers() if b.broker_id == 2).replicas == 0
    with Producer(pair.master_addresses) as producer:
        assert producer.send_sync("drain-before", b"after", partition=on_two).offset == 1
    # broker 1 hears that it is the only replica at its next heartbeat: until then its high
    # watermark (what describe reports as latest) may still wait for broker 2
    deadline = time.monotonic() + 10
    while (kept := admin.describe_topic("drain-before").partitions[on_two]).latest != 2 \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    assert kept.broker_id == 1 and kept.available and kept.latest == 2

    assert admin.drain_broker(2).draining  # idempotent: no error, no second audit entry
    drains = [e for e in admin.audit_log(100) if e.action == "drain_broker"]
    assert len(drains) == 1 and drains[0].target == "broker 2"
    assert drains[0].principal == "admin" and json.loads(drains[0].details)["draining"]

    assert not admin.undrain_broker(2).draining
    assert draining(admin) == {1: False, 2: False}
    after = admin.create_topic("drain-after", partitions=12)  # broker 2 is least loaded
    assert set(brokers_of(after)) == {1, 2}
    assert [e.target for e in admin.audit_log(100) if e.action == "undrain_broker"] == \
        ["broker 2"]


def test_only_an_admin_may_drain_and_an_unknown_broker_is_named(pair, admin):
    with AdminClient(pair.master_addresses, credentials=DORA) as dora:
        assert [b.broker_id for b in dora.list_brokers()] == [1, 2]  # describe is enough
        for change in (dora.drain_broker, dora.undrain_broker):
            with pytest.raises(errors.PermissionDenied, match="dora may not admin"):
                change(1)
    assert draining(admin) == {1: False, 2: False}
    with pytest.raises(errors.UnknownBroker, match="unknown broker 77") as err:
        admin.drain_broker(77)
    assert err.value.broker_id == 77
    for bad in (-1, 2**31, "1", True, 1.0):
        with pytest.raises(errors.InvalidArgument, match="broker_id must be an integer"):
            admin.drain_broker(bad)


def test_with_every_live_broker_draining_a_create_fails_saying_so(admin):
    admin.create_topic("drain-all-kept", partitions=2)
    admin.drain_broker(1)
    admin.drain_broker(2)
    with pytest.raises(errors.NotEnoughBrokers, match=r"every live broker is draining "
                                                      r"\(broker\(s\) 1, 2\)"):
        admin.create_topic("drain-nowhere", partitions=1)
    with pytest.raises(errors.NotEnoughBrokers, match="every live broker is draining"):
        admin.alter_topic("drain-all-kept", partitions=3)
    assert admin.alter_topic("drain-all-kept", retention_ms=60_000).retention_ms == 60_000
    assert "drain-nowhere" not in {t.name for t in admin.list_topics()}
    admin.undrain_broker(1)
    assert brokers_of(admin.create_topic("drain-somewhere", partitions=2)) == [1, 1]


def test_the_cli_drains_lists_and_undrains_a_broker(pair, admin):
    masters = pair.master_addresses
    done = tubeq(masters, "broker", "drain", "2")
    assert done.returncode == 0 and b"broker 2" in done.stdout and b"is draining" in done.stdout
    listed = json.loads(tubeq(masters, "broker", "list", "--json").stdout)
    assert {b["broker_id"]: b["draining"] for b in listed} == {1: False, 2: True}
    table = tubeq(masters, "broker", "list").stdout.decode().splitlines()
    at = table[0].index("DRAINING")  # rack is an empty column: find it by position
    assert [row[at:].split()[0] for row in table[1:]] == ["False", "True"]
    back = tubeq(masters, "broker", "undrain", "2", "--json")
    assert back.returncode == 0 and json.loads(back.stdout)["draining"] is False
    unknown = tubeq(masters, "broker", "drain", "99")
    assert unknown.returncode == 1 and b"unknown broker 99" in unknown.stderr
    assert tubeq(masters, "broker", "drain", "-3").returncode == 2  # a usage error


def test_draining_survives_a_failover_and_a_master_restart(tmp_path):
    ha = Cluster(tmp_path / "ha", masters=3)
    try:
        ha.start(brokers=2)
        with AdminClient(ha.master_addresses) as admin:
            admin.drain_broker(1)
        old = ha.leader()
        old.kill()
        new = ha.leader(timeout=FAILOVER_S)
        ha.wait_brokers_registered()
        with AdminClient(ha.master_addresses) as admin:
            assert draining(admin) == {1: True, 2: False}
            assert brokers_of(admin.create_topic("after-failover", partitions=3)) == [2, 2, 2]
        old.start()  # from its own journal and LMDB state, then caught up
        new.stop()
        assert ha.leader(timeout=FAILOVER_S) is not new
        ha.wait_brokers_registered()
        with AdminClient(ha.master_addresses) as admin:
            assert draining(admin) == {1: True, 2: False}
            assert brokers_of(admin.create_topic("after-restart", partitions=2)) == [2, 2]
            admin.undrain_broker(1)
            assert brokers_of(admin.create_topic("undrained", partitions=2)) == [1, 1]
    finally:
        ha.stop_all()
