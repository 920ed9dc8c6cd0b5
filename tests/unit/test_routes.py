"""Route conversion from the master's TopicRoute message (the cache itself is tested against a
real master in tests/integration/test_producer_cluster.py)."""
from __future__ import annotations

import pytest

from lib.errors import Unavailable
from lib.proto import master_pb2
from lib.records import DEFAULT_MAX_MESSAGE_BYTES
from lib.routes import RouteCache, topic_routes
from lib.types import TopicPartition


def _route(max_message_bytes: int = 0) -> master_pb2.TopicRoute:
    msg = master_pb2.TopicRoute(
        topic="orders",
        partitions=[
            master_pb2.PartitionRoute(partition=2, broker_id=1, address="h:2", available=True),
            master_pb2.PartitionRoute(partition=0, broker_id=1, address="h:2", available=True),
            master_pb2.PartitionRoute(partition=1, broker_id=2, address="h:3", available=False),
        ],
        settings=master_pb2.TopicSettings(partitions=3, max_message_bytes=max_message_bytes,
                                          topic_id=99),
    )
    return master_pb2.TopicRoute.FromString(msg.SerializeToString())


def test_topic_routes_sorts_partitions_and_lists_the_available_ones():
    routes = topic_routes(_route(), now=5.0)
    assert [p.partition for p in routes.partitions] == [0, 1, 2]
    assert routes.available == (0, 2)
    assert routes.count == 3
    assert routes.address(1) == "h:3"
    assert routes.topic_id == 99
    assert routes.fetched_at == 5.0


def test_topic_routes_takes_max_message_bytes_from_settings_or_the_default():
    assert topic_routes(_route(1000), 0).max_message_bytes == 1000
    assert topic_routes(_route(0), 0).max_message_bytes == DEFAULT_MAX_MESSAGE_BYTES


def test_partition_without_address_is_not_available():
    msg = master_pb2.TopicRoute(topic="t", partitions=[
        master_pb2.PartitionRoute(partition=0, broker_id=-1, address="", available=True)])
    assert topic_routes(msg, 0).available == ()


class _Master:
    """Answers GetRoutes from a fixed list (what the active master would say)."""

    def __init__(self, routes):
        self.routes = routes

    def call(self, _stub, _method, request, timeout=None):
        return master_pb2.GetRoutesResponse(
            routes=[r for r in self.routes if r.topic in request.topics])


def test_producer_and_consumers_agree_a_topic_without_placed_partitions_is_unavailable():
    """Regression: the consumers' own route table called such a topic unknown (final) while
    the producer's cache called it unavailable (retriable)."""
    cache = RouteCache(_Master([master_pb2.TopicRoute(topic="new")]))
    assert cache.get("new").count == 0  # the producer's view: known, nothing placed yet
    with pytest.raises(Unavailable, match="no partitions placed"):
        cache.refresh(["new"], placed=True)  # the consumers' view
    assert cache.partitions("new") == 0 and cache.by_broker([]) == ({}, [])


def test_the_address_table_follows_each_update_of_a_topic_and_leaves_the_others():
    """update() changes the table in place (a copy per update made a producer's first sends
    to 10,000 topics quadratic): a partition that became unavailable loses its address, the
    other topics keep theirs, and the version moves only on a change."""
    cache = RouteCache(master=None)
    other = master_pb2.TopicRoute(topic="other", partitions=[
        master_pb2.PartitionRoute(partition=0, broker_id=1, address="h:9", available=True)])
    cache.update([_route(), other])
    v = cache.version
    assert [cache.address(TopicPartition("orders", p)) for p in range(3)] == ["h:2", None, "h:2"]
    cache.update([_route()])
    assert cache.version == v, "the same routes: no change"
    moved = master_pb2.TopicRoute(topic="orders", partitions=[
        master_pb2.PartitionRoute(partition=0, broker_id=2, address="h:3", available=True),
        master_pb2.PartitionRoute(partition=1, broker_id=2, address="h:3", available=True),
        master_pb2.PartitionRoute(partition=2, broker_id=1, address="h:2", available=False)])
    cache.update([moved])
    assert cache.version == v + 1
    assert [cache.address(TopicPartition("orders", p)) for p in range(3)] == ["h:3", "h:3", None]
    assert cache.address(TopicPartition("other", 0)) == "h:9"
