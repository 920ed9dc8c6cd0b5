"""ProduceMany against real masters and brokers: a producer sends the batches it has ready for
one broker in one call, each entry is checked, appended and answered on its own (errors and
ACLs per entry, order kept), and a producer meeting a broker that does not know the method
(an older one) sends each batch in a call of its own, losing nothing."""
from __future__ import annotations

import re
import urllib.request
from collections import Counter

import grpc
import pytest

from lib import AdminClient, Producer, TopicPartition
from lib.auth.client import Credentials
from lib.errors import PermissionDenied
from lib.produce_wire import produce_many_request, produce_request
from lib.proto import broker_pb2 as bpb
from lib.records import Record, encode_batch
from tests.cluster import Cluster
from tests.integration.reads import read_to_end
from tests.integration.test_consumer_common import wait_for
from tests.old_broker import OldBroker

MANY = "/tubeq.broker.Broker/ProduceMany"
ALICE = Credentials("alice", "alice-many-password")


def calls_of(metrics_address: str, method: str) -> int:
    """How many calls of ``method`` the broker at ``metrics_address`` answered."""
    with urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=5) as r:
        text = r.read().decode()
    found = re.search(rf'tubeq_broker_request_seconds_count{{method="{method}"}} (\S+)', text)
    return int(float(found.group(1))) if found else 0


def produce_keyed(masters: str, topics: list[str], per_partition: int, partitions: int,
                  **options) -> list[tuple[str, int, bytes]]:
    """Records to every partition of ``topics`` (partition given), all acknowledged."""
    sent = [(t, p, f"{t}-{p}-{i}".encode()) for i in range(per_partition)
            for t in topics for p in range(partitions)]
    with Producer(masters, linger_ms=20, **options) as producer:
        futures = [producer.send(t, v, partition=p) for t, p, v in sent]
        for f in futures:
            f.result(60)
    return sent


def by_partition(sent: list[tuple[str, int, bytes]]) -> dict[TopicPartition, list[bytes]]:
    out: dict[TopicPartition, list[bytes]] = {}
    for t, p, v in sent:
        out.setdefault(TopicPartition(t, p), []).append(v)
    return out


def test_a_producer_sends_many_partitions_batches_in_one_call_in_order(cluster_factory):
    cluster = cluster_factory(1)
    masters, broker = cluster.master_addresses, cluster.brokers[1]
    topics = ["many-a", "many-b"]
    with AdminClient(masters) as admin:
        for t in topics:
            admin.create_topic(t, partitions=4)
    before = calls_of(broker.info["metrics"], "ProduceMany")
    sent = produce_keyed(masters, topics, 300, 4)
    assert calls_of(broker.info["metrics"], "ProduceMany") > before, \
        "eight partitions' batches ready together never went as one call"
    expected = by_partition(sent)
    got = read_to_end(masters, list(expected), "read_uncommitted")
    assert {tp: [r.value for r in rs] for tp, rs in got.items()} == expected


def test_each_entry_is_answered_on_its_own_and_a_bad_one_stops_nothing(cluster_factory):
    cluster = cluster_factory(1)
    masters, broker = cluster.master_addresses, cluster.brokers[1]
    with AdminClient(masters) as admin:
        admin.create_topic("entries", partitions=2)
    creds = cluster.admin_credentials()
    with AdminClient(masters) as admin:
        token = admin.login(creds.user, creds.password).token
    batch = encode_batch([Record(value=b"one"), Record(value=b"two")])
    entries = [
        produce_request(TopicPartition("entries", 0), b"", batch),
        produce_request(TopicPartition("no-such-topic", 0), b"", batch),
        produce_request(TopicPartition("entries", 1), b"", b""),  # an empty batch
        produce_request(TopicPartition("bad name!", 0), b"", batch),
        produce_request(TopicPartition("entries", 1), b"", b"not a batch at all"),
        produce_request(TopicPartition("entries", 1), b"", batch),
        produce_request(TopicPartition("entries", 0), b"", batch),
    ]
    with grpc.insecure_channel(broker.address) as channel:
        call = channel.unary_unary(MANY, None, bpb.ProduceManyResponse.FromString)
        metadata = (("authorization", f"Bearer {token}"),)
        answer = wait_for(lambda: _when_hosted(call, produce_many_request(entries), metadata),
                          30, "the broker to host the new topic")
        codes = [r.error_code for r in answer.results]
        assert codes == ["", "UNKNOWN_TOPIC", "INVALID_ARGUMENT", "INVALID_NAME",
                         "CORRUPT_RECORD", "", ""], [(r.error_code, r.error_message)
                                                     for r in answer.results]
        assert "empty batch for entries/1" in answer.results[2].error_message
        offsets = [(r.base_offset, r.last_offset) for r in answer.results if not r.error_code]
        assert offsets == [(0, 1), (0, 1), (2, 3)]  # entries/0, entries/1, entries/0 again
        with pytest.raises(grpc.RpcError) as refused:  # a call that cannot be read at all
            call(b"\x0a\xff\xff\xff\x0f", metadata=metadata, timeout=10)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    got = read_to_end(masters, [TopicPartition("entries", 0), TopicPartition("entries", 1)],
                      "read_uncommitted")
    assert [r.value for r in got[TopicPartition("entries", 0)]] == [b"one", b"two"] * 2
    assert [r.value for r in got[TopicPartition("entries", 1)]] == [b"one", b"two"]


def _when_hosted(call, request: bytes, metadata):
    """The answer once the first entry's partition is hosted (the topic is new)."""
    answer = call(request, metadata=metadata, timeout=10)
    waiting = ("UNKNOWN_TOPIC", "PARTITION_NOT_HOSTED")
    return None if answer.results[0].error_code in waiting else answer


def test_acls_are_checked_per_entry(cluster_factory):
    cluster = cluster_factory(1)
    masters = cluster.master_addresses
    with AdminClient(masters, credentials=cluster.admin_credentials()) as root:
        root.add_user(ALICE.user, ALICE.password)
        for t in ("allowed", "refused"):
            root.create_topic(t, partitions=2)
            root.add_acl("user:alice", "describe", "topic", t)  # routes to both
        root.add_acl("user:alice", "produce", "topic", "allowed")
    sent = [(t, p, f"{t}-{p}-{i}".encode()) for i in range(100)
            for t in ("allowed", "refused") for p in range(2)]
    with Producer(masters, credentials=ALICE, linger_ms=20, retries=0) as producer:
        wait_for(lambda: _may_produce(producer), 30, "the broker to get alice's ACL")
        futures = [(t, producer.send(t, v, partition=p)) for t, p, v in sent]
        outcomes = Counter((t, type(f.exception(60)).__name__) for t, f in futures)
    assert outcomes == {("allowed", "NoneType"): 200,
                        ("refused", PermissionDenied.__name__): 200}, outcomes
    got = read_to_end(masters, [TopicPartition("allowed", p) for p in range(2)],
                      "read_uncommitted")
    expected = by_partition([("allowed", 0, b"probe")] + [s for s in sent if s[0] == "allowed"])
    assert {tp: [r.value for r in rs] for tp, rs in got.items()} == expected
    assert calls_of(cluster.brokers[1].info["metrics"], "ProduceMany") > 0


def _may_produce(producer: Producer) -> bool:
    try:
        producer.send_sync("allowed", b"probe", partition=0)
        return True
    except PermissionDenied:
        return False


@pytest.fixture
def old_broker_cluster(tmp_path):
    old = OldBroker(unknown={MANY})
    cluster = Cluster(tmp_path / "old", broker_args=["--advertised-address", old.address])
    try:
        cluster.start_master(0)
        broker = cluster.start_broker(1)
        old.relay_to(broker.address)
        with AdminClient(cluster.master_addresses) as admin:
            wait_for(lambda: any(b.alive for b in admin.list_brokers()), 30,
                     "the broker to register")
        yield cluster, old
    finally:
        cluster.stop_all()
        old.close()


def test_a_broker_without_produce_many_gets_one_call_per_batch(old_broker_cluster):
    cluster, old = old_broker_cluster
    masters = cluster.master_addresses
    with AdminClient(masters) as admin:
        admin.create_topic("old", partitions=4)
    sent = produce_keyed(masters, ["old"], 200, 4)
    # one ProduceMany refused as UNIMPLEMENTED, then every batch through Produce
    assert old.relayed[MANY] == 1 and old.relayed["/tubeq.broker.Broker/Produce"] >= 4, \
        old.relayed
    expected = by_partition(sent)
    got = read_to_end(masters, list(expected), "read_uncommitted")
    assert {tp: [r.value for r in rs] for tp, rs in got.items()} == expected
