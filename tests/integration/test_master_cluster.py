"""The master with real brokers: live offsets in describe, group lag, offset resets."""
from __future__ import annotations

import json

import pytest

from lib import errors
from lib.proto import admin_pb2 as apb
from lib.proto import admin_pb2_grpc, broker_pb2, broker_pb2_grpc, master_pb2_grpc
from lib.proto import master_pb2 as mpb
from lib.records import Record, encode_batch
from lib.rpc import invoke
from tests.integration.test_master_common import wait_for

pytestmark = pytest.mark.shared_cluster


@pytest.fixture
def name(request):
    """The test's topic and group: the file's cluster is shared."""
    return request.node.name


@pytest.fixture
def env(cluster, name):
    ch = cluster.channel(cluster.masters[0].address)
    admin, master = admin_pb2_grpc.AdminStub(ch), master_pb2_grpc.MasterStub(ch)
    wait_for(lambda: sum(b.alive for b in invoke(admin.ListBrokers, apb.ListBrokersRequest(),
                                                 5).brokers) == 2, 15, "both brokers")
    invoke(admin.CreateTopic, apb.CreateTopicRequest(
        topic=name, settings=mpb.TopicSettings(partitions=2)), 5)
    routes = invoke(master.GetRoutes, mpb.GetRoutesRequest(topics=[name]), 5).routes[0]
    brokers = {p.partition: broker_pb2_grpc.BrokerStub(cluster.channel(p.address))
               for p in routes.partitions}
    yield admin, master, brokers
    ch.close()


def produce(broker, topic, partition, timestamps):
    batch = encode_batch([Record(b"v%d" % ts, timestamp=ts) for ts in timestamps])
    req = broker_pb2.ProduceRequest(topic=topic, partition=partition, batch=batch)

    def attempt():
        try:
            return invoke(broker.Produce, req, 5)
        except (errors.PartitionNotHosted, errors.UnknownTopic):
            return None  # the broker learns its placement with its next heartbeat
    return wait_for(attempt, 10, f"partition {partition} to be hosted", interval=0.1)


def lags(admin, group):
    desc = invoke(admin.DescribeGroup, apb.DescribeGroupRequest(group=group), 5)
    return {p.partition: (p.committed, p.latest, p.lag) for p in desc.partitions}


def reset(admin, name, **target):
    """Reset group ``name``'s offsets in topic ``name``."""
    return invoke(admin.ResetGroupOffsets,
                  apb.ResetGroupOffsetsRequest(group=name, topic=name, **target), 5)


def test_describe_lag_and_every_kind_of_reset(env, name):
    admin, master, brokers = env
    produce(brokers[0], name, 0, range(1000, 1010))
    produce(brokers[1], name, 1, range(2000, 2005))
    desc = invoke(admin.DescribeTopic, apb.DescribeTopicRequest(topic=name), 5)
    assert [(p.earliest, p.latest) for p in desc.partitions] == [(0, 10), (0, 5)]

    member = invoke(master.JoinGroup, mpb.JoinGroupRequest(group=name, topics=[name]), 5)
    invoke(brokers[0].CommitOffsets, broker_pb2.CommitOffsetsRequest(
        group=name, topic=name, member_id=member.member_id, generation=member.generation,
        offsets=[broker_pb2.OffsetCommit(partition=0, offset=4)]), 5)
    assert lags(admin, name) == {0: (4, 10, 6), 1: (-1, 5, 5)}
    with pytest.raises(errors.GroupNotEmpty):
        reset(admin, name, earliest=True)
    invoke(master.LeaveGroup, mpb.LeaveGroupRequest(group=name, member_id=member.member_id), 5)

    preview = reset(admin, name, latest=True, dry_run=True)
    assert [(m.partition, m.from_offset, m.to_offset) for m in preview.moves] == [
        (0, 4, 10), (1, -1, 5)]
    assert lags(admin, name) == {0: (4, 10, 6), 1: (-1, 5, 5)}, "a dry run changes nothing"
    moved = reset(admin, name, latest=True)
    assert [(m.from_offset, m.to_offset) for m in moved.moves] == [(4, 10), (-1, 5)]
    assert lags(admin, name) == {0: (10, 10, 0), 1: (5, 5, 0)}
    reset(admin, name, earliest=True)
    assert lags(admin, name) == {0: (0, 10, 10), 1: (0, 5, 5)}
    with pytest.raises(errors.OffsetOutOfRange):
        reset(admin, name, offset=11, dry_run=True)
    reset(admin, name, offset=7, partitions=[0])
    assert lags(admin, name) == {0: (7, 10, 3), 1: (0, 5, 5)}
    reset(admin, name, timestamp_ms=1005)
    assert lags(admin, name) == {0: (5, 10, 5), 1: (0, 5, 5)}
    with pytest.raises(errors.OffsetOutOfRange):
        reset(admin, name, offset=11)
    with pytest.raises(errors.UnknownPartition):
        reset(admin, name, earliest=True, partitions=[2])
    assert lags(admin, name)[0] == (5, 10, 5), "a refused reset changes nothing"

    entries = invoke(admin.AuditLog, apb.AuditLogRequest(limit=100), 5).entries
    resets = [json.loads(e.details) for e in entries
              if e.action == "reset_group_offsets" and e.target == name]
    assert len(resets) == 4 and resets[-1]["offsets"] == {"0": 5, "1": 0}  # no dry run


def test_deleted_topic_data_is_dropped_by_brokers_and_recreated_topic_starts_empty(env, name):
    admin, master, brokers = env
    produce(brokers[0], name, 0, range(3))
    invoke(admin.DeleteTopic, apb.DeleteTopicRequest(topic=name), 5)
    invoke(admin.CreateTopic, apb.CreateTopicRequest(
        topic=name, settings=mpb.TopicSettings(partitions=2)), 5)

    def empty():
        desc = invoke(admin.DescribeTopic, apb.DescribeTopicRequest(topic=name), 5)
        return all(p.available and p.latest == 0 for p in desc.partitions)
    wait_for(empty, 10, "the re-created topic to be hosted empty", interval=0.2)
