"""Producer ids from the active master (``Master.InitProducerId``), with real processes: 3
masters (Raft), no brokers (ids need none). Distinct and positive, a standby sends callers to
the active master, a caller needs produce on some topic, a loop of calls costs a Raft round per
block of ids and not per id, and after a failover (SIGKILL) and a restart every new id is above
every id handed out before. The tests share one cluster; the failover test, which kills
masters, runs last."""
from __future__ import annotations

import threading

import pytest

from lib import errors
from lib.admin import AdminClient
from lib.auth.client import Credentials
from lib.producer.ids import init_producer_id
from lib.proto import master_pb2, master_pb2_grpc
from lib.rpc import MasterClient, client_pool, invoke
from master.producer_ids import BLOCK_SIZE
from tests.cluster import Cluster
from tests.integration.test_consumer_common import wait_for

FAILOVER_S = 30.0  # generous: a busy machine; the failover itself takes a few seconds
BOB = Credentials("bob", "bob-producer-ids-password")


@pytest.fixture(scope="module")
def ha(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("pids"), masters=3)
    try:
        c.start(brokers=0)
        yield c
    finally:
        c.stop_all()


@pytest.fixture
def master(ha):
    client = ha.master_client(timeout=FAILOVER_S)
    try:
        yield client
    finally:
        client.close()


def statuses(c: Cluster) -> dict[str, object]:
    with AdminClient(c.master_addresses) as admin:
        return {s.address: s for s in admin.master_status()}


def test_ids_are_positive_distinct_with_epoch_0_from_clients_at_once(master):
    got: list[tuple[int, int]] = []
    lock = threading.Lock()

    def run() -> None:
        for _ in range(25):
            pair = init_producer_id(master, "many", 10)
            with lock:
                got.append(pair)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    ids = [pid for pid, _ in got]
    assert len(ids) == 100 and len(set(ids)) == 100
    assert min(ids) >= 1 and {epoch for _, epoch in got} == {0}


def test_a_standby_names_the_active_master_and_the_client_follows_it(ha):
    leader = ha.leader()
    standby = next(m for m in ha.masters if m is not leader)
    wait_for(lambda: statuses(ha)[standby.address].leader == leader.address, 15,
             "the standby names the leader")
    ch = ha.channel(standby.address)
    try:
        with pytest.raises(errors.NotLeader, match="active master is " + leader.address) as e:
            invoke(master_pb2_grpc.MasterStub(ch).InitProducerId,
                   master_pb2.InitProducerIdRequest(client_id="direct"), 5)
        assert e.value.leader == leader.address
    finally:
        ch.close()
    # a client given only the standby's address follows the hint
    pool = client_pool(standby.address, ha.admin_credentials(), 10, None)
    only_standby = MasterClient(standby.address, pool, timeout=15)
    try:
        assert init_producer_id(only_standby, "via-standby", 15)[0] >= 1
        assert only_standby.current == leader.address
    finally:
        pool.close()


def test_a_caller_needs_produce_on_at_least_one_topic(ha):
    with AdminClient(ha.master_addresses, credentials=ha.admin_credentials()) as admin:
        admin.add_user(BOB.user, BOB.password)
        pool = client_pool(ha.master_addresses, BOB, 10, None)
        bob = MasterClient(ha.master_addresses, pool, timeout=15)
        try:
            admin.add_acl("user:bob", "consume", "topic", "ids-", pattern="prefix")
            with pytest.raises(errors.PermissionDenied, match="bob may not produce on any topic"):
                init_producer_id(bob, "bob", 10)
            admin.add_acl("user:bob", "produce", "topic", "ids-", pattern="prefix")
            assert init_producer_id(bob, "bob", 10)[0] >= 1
        finally:
            pool.close()


def test_calls_in_a_loop_cost_a_raft_round_per_block_of_ids_not_per_id(ha, master):
    def applied() -> int:
        return max(s.applied_index for s in statuses(ha).values() if s.role == "leader")

    before = applied()
    ids = [init_producer_id(master, "loop", 10)[0] for _ in range(300)]
    assert len(set(ids)) == 300 and 300 < BLOCK_SIZE
    # at most one reservation, plus the odd refusal summary of the test before
    assert applied() - before <= 5


def test_no_id_is_handed_out_again_after_a_failover_or_a_restart(ha, master):
    seen = [init_producer_id(master, "before", 10)[0] for _ in range(5)]
    first = ha.leader()
    first.kill()  # SIGKILL: its block's unused rest must never be handed out
    assert ha.leader(timeout=FAILOVER_S) is not first
    after_failover = [init_producer_id(master, "after-failover", FAILOVER_S)[0]
                      for _ in range(5)]
    assert min(after_failover) > max(seen), (seen, after_failover)
    assert len(set(after_failover)) == 5
    seen += after_failover

    first.start()  # back from its data dir, with nothing in memory
    wait_for(lambda: statuses(ha)[first.address].lag == 0
             and statuses(ha)[first.address].role == "standby", FAILOVER_S,
             "the restarted master caught up")
    second = ha.leader()
    second.kill()  # the restarted one or the third takes over
    assert ha.leader(timeout=FAILOVER_S) is not second
    after_restart = [init_producer_id(master, "after-restart", FAILOVER_S)[0]
                     for _ in range(5)]
    assert min(after_restart) > max(seen), (seen, after_restart)
    assert len(set(after_restart)) == 5
