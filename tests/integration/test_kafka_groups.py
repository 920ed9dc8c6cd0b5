"""Kafka consumer groups on the Kafka port: librdkafka's and kafka-python's members split
partitions, hand them on and commit; group offsets are one through both APIs; a group is
either Kafka's or tubeq's while it lives."""
from __future__ import annotations

import threading

import pytest
from confluent_kafka import Consumer as CkConsumer
from confluent_kafka import KafkaException
from confluent_kafka import TopicPartition as CkTp

from lib.admin import AdminClient
from lib.consumer.pull import PullConsumer
from lib.types import TopicPartition
from tests.helpers import wait_until
from tests.integration.kafka_kit import produce_values, python_login, python_values, sasl


class GroupMember(threading.Thread):
    """A librdkafka consumer of a group in its own thread, committing every record it got."""

    def __init__(self, conf: dict, group: str, topic: str, strategy: str) -> None:
        super().__init__(daemon=True)
        self.consumer = CkConsumer({**conf, "group.id": group, "enable.auto.commit": False,
                                    "auto.offset.reset": "earliest",
                                    "partition.assignment.strategy": strategy})
        self.topic, self.values, self.assigned = topic, [], []
        self.stopping, self.closed = threading.Event(), threading.Event()

    def run(self) -> None:
        c = self.consumer
        c.subscribe([self.topic])
        try:
            while not self.stopping.is_set():
                m = c.poll(0.2)
                self.assigned = sorted(tp.partition for tp in c.assignment())
                if m is None or m.error():
                    continue
                self.values.append(m.value())
                try:
                    c.commit(m, asynchronous=False)
                except KafkaException:
                    pass  # a rebalance began: its next owner reads from the last commit
        finally:
            c.close()  # leaves the group: the others take its partitions at once
            self.closed.set()


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_a_group_of_three_splits_the_partitions_and_hands_them_on(kcluster, strategy):
    conf, topic = sasl(kcluster), f"k-{strategy}"
    first = [b"a-%d" % i for i in range(600)]
    produce_values(conf, topic, first)
    members = [GroupMember(conf, f"grp-{strategy}", topic, strategy) for _ in range(3)]
    for m in members:
        m.start()
    try:
        def settled(group: list[GroupMember]) -> bool:
            owned = sorted(p for m in group for p in m.assigned)
            return owned == list(range(6)) and all(m.assigned for m in group)
        wait_until(lambda: settled(members), "three members own two partitions each", 60)
        wait_until(lambda: {v for m in members for v in m.values} >= set(first),
                   "every record of the first batch consumed", 60)
        members[0].stopping.set()  # one leaves: the other two take its partitions
        members[0].closed.wait(30)
        wait_until(lambda: settled(members[1:]), "two members own all six partitions", 60)
        second = [b"b-%d" % i for i in range(300)]
        produce_values(conf, topic, second)
        wait_until(lambda: {v for m in members[1:] for v in m.values} >= set(second),
                   "every record of the second batch consumed by the two left", 60)
    finally:
        for m in members:
            m.stopping.set()
        for m in members:
            m.join(30)
    consumed = [v for m in members for v in m.values]
    assert set(consumed) == set(first) | set(second)  # nothing lost
    # committed after every record: only a record read when a rebalance began comes twice
    assert len(consumed) - len(set(consumed)) <= 6


def test_group_offsets_are_the_same_through_both_apis(kcluster):
    conf, admin = sasl(kcluster), kcluster.admin_credentials()
    produce_values(conf, "k-shared", [b"s-%d" % i for i in range(40)], partitions=2)
    consumer = CkConsumer({**conf, "group.id": "shared", "enable.auto.commit": False})
    consumer.commit(offsets=[CkTp("k-shared", 0, 7), CkTp("k-shared", 1, 5)],
                    asynchronous=False)
    consumer.close()
    with PullConsumer(kcluster.master_addresses, credentials=admin, group="shared") as tq:
        assert tq.committed(TopicPartition("k-shared", 0)) == 7
        assert tq.committed(TopicPartition("k-shared", 1)) == 5
        tq.commit({TopicPartition("k-shared", 0): 9})
    reader = CkConsumer({**conf, "group.id": "shared"})
    got = reader.committed([CkTp("k-shared", 0), CkTp("k-shared", 1)], timeout=10)
    reader.close()
    assert [(tp.partition, tp.offset) for tp in got] == [(0, 9), (1, 5)]


def test_a_live_kafka_group_refuses_tubeq_members_and_the_other_way(kcluster):
    from lib.errors import GroupModeConflict

    conf, admin = sasl(kcluster), kcluster.admin_credentials()
    member = GroupMember(conf, "kafka-owned", "k-shared", "range")
    member.start()
    try:
        wait_until(lambda: member.assigned == [0, 1], "the Kafka member owns the topic", 60)
        with AdminClient(kcluster.master_addresses, credentials=admin) as tq_admin:
            assert tq_admin.describe_group("kafka-owned").mode == "kafka"
        from confluent_kafka.admin import AdminClient as CkAdmin  # ListGroups, DescribeGroups

        ck_admin = CkAdmin(conf)
        listed = ck_admin.list_consumer_groups(request_timeout=10).result().valid
        assert "kafka-owned" in {g.group_id for g in listed}
        described = ck_admin.describe_consumer_groups(["kafka-owned"])["kafka-owned"].result()
        [only] = described.members
        assert sorted((tp.topic, tp.partition) for tp in only.assignment.topic_partitions) == \
            [("k-shared", 0), ("k-shared", 1)]
        with PullConsumer(kcluster.master_addresses, credentials=admin,
                          group="kafka-owned") as tq:
            with pytest.raises(GroupModeConflict, match="Kafka-managed"):
                tq.subscribe(["k-shared"])
                tq.poll(timeout=5)
    finally:
        member.stopping.set()
        member.join(30)


def test_kafka_python_group_consumer_commits(kcluster):
    from kafka import KafkaConsumer

    conf = sasl(kcluster)
    produce_values(conf, "k-kpgroup", [b"kp-%d" % i for i in range(100)], partitions=2)
    consumer = KafkaConsumer("k-kpgroup", group_id="kp-group", enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=15000,
                             **python_login(kcluster))
    values = python_values(consumer, 100)
    consumer.commit()
    consumer.close()
    assert sorted(values) == sorted(b"kp-%d" % i for i in range(100))
    reader = CkConsumer({**conf, "group.id": "kp-group"})
    got = reader.committed([CkTp("k-kpgroup", 0), CkTp("k-kpgroup", 1)], timeout=10)
    reader.close()
    assert sum(tp.offset for tp in got) == 100
