"""A partition leader cut off by the network (Jepsen-style), on real processes.

Broker 1 leads a partition replicated on brokers 1, 2 and 3 (acks=all, min_insync_replicas 2,
sync durability). Its links go through TCP proxies the test controls (load/faultproxy.py): it
reaches the master through one, and the master, the followers and the clients reach it
through another (its advertised address). Cutting both isolates it from everyone but the
test, which still reaches its real port and keeps writing to it there, as a producer on its
side of the partition would.

What must hold: the isolated leader acknowledges no acks=all write (it stores them, but its
high watermark cannot move without its followers, so no consumer reads them either); the
master elects a new leader among the followers, which takes acks=all writes; once the network
heals the old leader learns it follows, truncates every record only it held and catches up;
at the end all three copies are identical and hold exactly the acknowledged records.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest

from lib import errors
from lib.admin import AdminClient
from lib.consumer.pull import PullConsumer
from lib.process import free_ports
from lib.producer.producer import Producer
from lib.proto import broker_pb2 as pb
from lib.proto import broker_pb2_grpc
from lib.records import Record, decode_frames, encode_batch
from lib.rpc import invoke
from lib.types import TopicPartition
from load.faultproxy import FaultProxy, Mode
from storage.store import Store
from tests.cluster import Cluster, ServerProcess
from tests.helpers import read_all
from tests.integration.fault_kit import wait_until

TOPIC = "split"
VICTIM = 1  # placement picks the least loaded broker, ties by lowest id: it leads TOPIC
ACKS_ALL_DEADLINE_S = 2.0  # each acks=all attempt at the isolated leader waits this long


@dataclass
class Partitioned:
    """A cluster whose broker 1 the test can cut off from the master and the other brokers."""

    cluster: Cluster
    to_master: FaultProxy  # broker 1 -> the master
    to_victim: FaultProxy  # the master, the followers and clients -> broker 1 (advertised)
    direct: str  # broker 1's real address: the test's side of the cut

    def cut(self) -> None:
        """Reset every link of broker 1 now, and every new one until :meth:`heal`."""
        self.to_master.set_mode(Mode.RESET)
        self.to_victim.set_mode(Mode.RESET)

    def heal(self) -> None:
        self.to_master.set_mode(Mode.PASS)
        self.to_victim.set_mode(Mode.PASS)


@pytest.fixture
def partitioned(tmp_path) -> Iterator[Partitioned]:
    master_conf, broker_conf = tmp_path / "master.toml", tmp_path / "broker.toml"
    master_conf.write_text("[master]\n"
                           "broker_heartbeat_interval_ms = 300\nbroker_timeout_ms = 2000\n")
    broker_conf.write_text("[broker]\nreplica_lag_max_ms = 1500\n")
    cluster = Cluster(tmp_path / "cluster", master_args=["--config", str(master_conf)],
                      broker_args=["--config", str(broker_conf)])
    with contextlib.ExitStack() as stack:
        stack.callback(cluster.stop_all)  # the master, should a proxy fail to start
        cluster.start_master()
        to_master = stack.enter_context(FaultProxy(cluster.master_addresses))
        port = free_ports(1)[0]
        to_victim = stack.enter_context(FaultProxy(f"127.0.0.1:{port}"))
        # every process, before the proxies stop: broker 1's clean stop reaches the master
        stack.callback(cluster.stop_all)
        victim = cluster.broker_process(VICTIM)
        victim.args += ["--masters", to_master.address, "--port", str(port),  # the last wins
                        "--advertised-address", to_victim.address]
        victim.start()
        for broker in (2, 3):
            cluster.start_broker(broker)
        _wait_registered(cluster, {VICTIM: to_victim.address, 2: cluster.brokers[2].address,
                                   3: cluster.brokers[3].address})
        net = Partitioned(cluster, to_master, to_victim, victim.address)
        stack.callback(net.heal)  # a test failing while cut: its brokers stop as usual
        yield net


def _wait_registered(cluster: Cluster, want: dict[int, str], timeout: float = 30.0) -> None:
    """Every broker alive at the master under the address it advertises (Cluster's own wait
    expects the bound address, which broker 1 does not advertise)."""
    with AdminClient(cluster.master_addresses) as admin:
        def registered() -> bool:
            try:
                alive = {b.broker_id: b.address for b in admin.list_brokers() if b.alive}
            except errors.Unauthenticated:  # the admin is not replicated yet
                return False
            return all(alive.get(b) == address for b, address in want.items())

        wait_until(registered, f"brokers registered at {want}", timeout)




def produce_acked(cluster: Cluster, prefix: str, n: int) -> list[bytes]:
    """``n`` records through the normal producer (routed by the master), acks=all; returns
    their values once every one is acknowledged."""
    values = [b"%s-%d" % (prefix.encode(), i) for i in range(n)]
    with Producer(cluster.master_addresses, acks="all") as producer:
        sent = [producer.send(TOPIC, v, partition=0) for v in values]
        producer.flush()
        offsets = [f.result(15).offset for f in sent]
    assert offsets == list(range(offsets[0], offsets[0] + n)), f"acks=all offsets {offsets}"
    return values


def consume_from_start(cluster: Cluster, want: int, timeout: float = 20.0) -> list[Record]:
    """What a consumer routed by the master reads from offset 0: until ``want`` records came,
    then one more poll, so that anything beyond them shows too."""
    with PullConsumer(cluster.master_addresses, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(TOPIC, 0)])
        got: list[Record] = []
        deadline = time.monotonic() + timeout
        while len(got) < want and time.monotonic() < deadline:
            got += consumer.poll(timeout=0.2)
        got += consumer.poll(timeout=0.5)
    return got


def produce_direct(stub: broker_pb2_grpc.BrokerStub, values: list[bytes], acks_all: bool,
                   timeout: float) -> pb.ProduceResponse:
    request = pb.ProduceRequest(topic=TOPIC, partition=0, acks_all=acks_all,
                                batch=encode_batch([Record(v) for v in values]))
    return invoke(stub.Produce, request, timeout)


def fetch_direct(stub: broker_pb2_grpc.BrokerStub, offset: int = 0,
                 wait_ms: int = 0) -> tuple[list[Record], int]:
    """What a consumer fetching from broker 1 itself gets from ``offset`` on, and the
    ``latest`` it is told (the high watermark)."""
    got: list[Record] = []
    while True:
        request = pb.FetchRequest(topic=TOPIC, max_wait_ms=wait_ms, partitions=[
            pb.PartitionFetch(partition=0, offset=offset, max_bytes=1 << 20)])
        part = invoke(stub.Fetch, request, 10 + wait_ms / 1e3).partitions[0]
        assert not part.error_code, f"{part.error_code}: {part.error_message}"
        got += decode_frames(part.frames, np.frombuffer(part.offsets, "<i8"), 0, TOPIC)
        if not part.frames or part.next_offset >= part.latest:
            return got, part.latest
        offset = part.next_offset


def on_disk(proc: ServerProcess) -> list[tuple]:
    """The partition's records in a stopped broker's files."""
    store = Store(proc.data_dir / "topics", TOPIC, 0, [0])
    try:
        return [(r.offset, r.key, r.value, r.tag, r.timestamp) for r in read_all(store, 0)]
    finally:
        store.close()


def is_cut(value: bytes) -> bool:
    return value.startswith(b"cut-")


def test_a_leader_cut_off_by_the_network_never_acknowledges_what_only_it_holds(partitioned):
    net, cluster = partitioned, partitioned.cluster
    read: list[bytes] = []  # every value any consumer was given, through the whole test

    def consumed(want: list[bytes]) -> None:
        got = consume_from_start(cluster, len(want))
        read.extend(r.value for r in got)
        assert [r.value for r in got] == want, "a consumer read other than the acked records"
        assert [r.offset for r in got] == list(range(len(want)))

    with AdminClient(cluster.master_addresses) as admin:
        def partition():
            return admin.describe_topic(TOPIC).partitions[0]

        first = admin.create_topic(TOPIC, partitions=1, replication_factor=3,
                                   min_insync_replicas=2, durability="sync").partitions[0]
        assert first.broker_id == VICTIM, \
            f"broker {first.broker_id} leads {TOPIC}, the test needs broker {VICTIM} to"
        assert sorted(first.isr) == [1, 2, 3]
        acked = produce_acked(cluster, "before", 20)  # every replica holds them
        consumed(acked)
        held = len(acked)  # the isolated leader's high watermark, all through the cut

        net.cut()
        with cluster.channel(net.direct) as channel:
            victim = broker_pb2_grpc.BrokerStub(channel)
            for i in range(3):
                values = [b"cut-all-%d-%d" % (i, j) for j in range(2)]
                try:
                    r = produce_direct(victim, values, True, ACKS_ALL_DEADLINE_S)
                except (errors.RequestTimedOut, errors.NotEnoughReplicas):
                    continue
                pytest.fail(f"the isolated leader acknowledged acks=all {values} at offsets "
                            f"{r.base_offset}..{r.last_offset}")
            isolated_end = 0
            for i in range(3):  # acks=1: the isolated leader alone stores them, and says so
                r = produce_direct(victim, [b"cut-one-%d-%d" % (i, j) for j in range(2)],
                                   False, 10)
                assert r.base_offset >= held + 2 * i, r
                isolated_end = r.last_offset + 1
            seen, latest = fetch_direct(victim)
            assert ([r.value for r in seen], latest) == (acked, held), \
                "the isolated leader's high watermark moved without its followers"

            wait_until(lambda: partition().broker_id != VICTIM
                       and partition().leader_epoch > first.leader_epoch,
                       "the master to elect a new leader among brokers 2 and 3", 20)
            now = partition()
            assert now.broker_id in (2, 3) and sorted(now.isr) == [2, 3], now
            acked += produce_acked(cluster, "after", 20)  # at the new leader
            consumed(acked)
            seen, latest = fetch_direct(victim, held, wait_ms=500)
            assert (seen, latest) == ([], held), "the isolated leader still shows nothing new"

        net.heal()
        wait_until(lambda: sorted(partition().isr) == [1, 2, 3],
                   "broker 1 to truncate, catch up and rejoin the ISR", 40)
        assert (partition().broker_id, partition().leader_epoch) == (now.broker_id,
                                                                     now.leader_epoch)
        consumed(acked)

    assert not [v for v in read if is_cut(v)], "a consumer read a record only the cut-off " \
        "leader held"
    leader = now.broker_id
    for broker in [b for b in (1, 2, 3) if b != leader] + [leader]:
        assert cluster.brokers[broker].stop() == 0, f"broker {broker} did not stop cleanly"
    copies = {b: on_disk(cluster.brokers[b]) for b in (1, 2, 3)}
    assert copies[1] == copies[2] == copies[3], "the three copies differ"
    assert [r[2] for r in copies[1]] == acked
    assert [r[0] for r in copies[1]] == list(range(len(acked)))
    cuts = cluster.brokers[VICTIM].log_events("replica.truncated")
    assert cuts, "the old leader's divergent tail was never cut"
    assert (cuts[0]["from_offset"], cuts[0]["to_offset"]) == (isolated_end, held), cuts
