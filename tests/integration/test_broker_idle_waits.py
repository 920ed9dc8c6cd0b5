"""Idle long-polls and push streams must not starve writes (Robustness issue, defect 2).

With a thread per waiting call, ~70 idle 30 s long-polls on one broker held up a produce to
another topic for 20-40 s, and push streams held their threads for good. Here far more waiters
than ``grpc_workers`` (64) are open, and a produce must still be answered, within a bound loose
enough for a noisy machine (the old broker needed the 30 s wait to expire, or never answered).
"""
from __future__ import annotations

import time

from lib.auth.client import auth_for
from lib.errors import UnknownTopic
from lib.proto import broker_pb2, broker_pb2_grpc
from lib.records import Record, encode_batch
from lib.rpc import invoke
from load.bench_idle_waits import IdleLoad
from tests.integration.test_consumer_common import Feeder, wait_for

LONG_POLLS = 300
STREAMS = 100


def produce(stub, topic: str, partition: int, value: bytes, timeout: float):
    batch = encode_batch([Record(value, timestamp=int(time.time() * 1000))])
    return invoke(stub.Produce, broker_pb2.ProduceRequest(topic=topic, partition=partition,
                                                          batch=batch), timeout)


def knows(stub, topic: str) -> bool:
    """The broker serves ``topic`` (it learns of a new topic from the master's next answer:
    on a busy machine, after the first ListOffsets asked)."""
    try:
        invoke(stub.ListOffsets, broker_pb2.ListOffsetsRequest(topic=topic), 5)
    except UnknownTopic:
        return False
    return True


def test_idle_long_polls_and_push_streams_do_not_starve_produce(cluster_factory):
    cluster = cluster_factory(1)
    feeder = Feeder(cluster.master_addresses)
    ch = cluster.channel(cluster.brokers[1].address)
    load = None
    try:
        feeder.create_topic("hot", 1)
        feeder.create_topic("idle", 2)
        feeder.produce("hot", 0, [b"warm"])  # both topics are served by the broker now
        stub = broker_pb2_grpc.BrokerStub(ch)
        wait_for(lambda: knows(stub, "idle"), 60, "the idle topic on the broker")
        token = auth_for(cluster.master_addresses).header()  # the session's admin
        load = IdleLoad(cluster.brokers[1].address, "idle", 2, LONG_POLLS, STREAMS,
                        token).start()
        time.sleep(1.0)  # every call reaches the broker and waits there

        for i in range(5):
            assert produce(stub, "hot", 0, b"through %d" % i, timeout=10).base_offset == i + 1

        produce(stub, "idle", 0, b"for the waiters", timeout=10)
        produce(stub, "idle", 1, b"for the waiters", timeout=10)
        wait_for(lambda: (load.stats()["pollers_with_data"] == LONG_POLLS
                          and load.stats()["streams_with_data"] == STREAMS),
                 20, "every long-poll and push stream to receive the new records")
        stats = load.stats()
        assert stats["fetch_errors"] == 0 and stats["stream_errors"] == 0, stats
    finally:
        if load is not None:
            load.stop()
        ch.close()
        feeder.close()
