"""Helpers for the consumer tests (no tests here): topics and records through raw gRPC.

Records are produced with raw ``ProduceRequest`` + ``encode_batch`` so the consumer tests do not
depend on the Producer; topics are created with the master's Admin service.
"""
from __future__ import annotations

import time
from collections.abc import Callable

from lib import errors
from lib.auth.client import auth_for
from lib.proto import (
    admin_pb2,
    admin_pb2_grpc,
    broker_pb2,
    broker_pb2_grpc,
    master_pb2,
    master_pb2_grpc,
)
from lib.records import Record, encode_batch
from lib.rpc import ChannelPool, MasterClient, invoke


def wait_for(cond: Callable[[], object], timeout: float, what: str = "condition",
             interval: float = 0.05) -> object:
    """Poll ``cond`` until it is truthy; fail the test with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


class Feeder:
    """Creates topics and appends records, retrying while placements reach the brokers."""

    def __init__(self, masters: str) -> None:
        self.pool = ChannelPool(auth_for(masters))  # the session's admin (tests/conftest.py)
        self.masters = MasterClient(masters, self.pool)

    def create_topic(self, topic: str, partitions: int, stores: int = 1) -> None:
        req = admin_pb2.CreateTopicRequest(topic=topic, settings=master_pb2.TopicSettings(
            partitions=partitions, stores=stores))
        self.masters.call(admin_pb2_grpc.AdminStub, "CreateTopic", req)
        wait_for(lambda: self._all_available(topic, partitions), 20, f"routes of {topic}")

    def _all_available(self, topic: str, partitions: int) -> bool:
        resp = self.masters.call(master_pb2_grpc.MasterStub, "GetRoutes",
                                 master_pb2.GetRoutesRequest(topics=[topic]))
        parts = [p for r in resp.routes for p in r.partitions if p.available and p.address]
        return len(parts) == partitions

    def address(self, topic: str, partition: int) -> str:
        resp = self.masters.call(master_pb2_grpc.MasterStub, "GetRoutes",
                                 master_pb2.GetRoutesRequest(topics=[topic]))
        return next(p.address for r in resp.routes for p in r.partitions
                    if p.partition == partition)

    def produce(self, topic: str, partition: int, values: list[bytes], tag: str | None = None,
                timestamp: int | None = None, timeout: float = 20.0) -> tuple[int, int]:
        """Append ``values`` as one batch; returns (base_offset, last_offset)."""
        ts = int(time.time() * 1000) if timestamp is None else timestamp
        batch = encode_batch([Record(v, tag=tag, timestamp=ts) for v in values])
        req = broker_pb2.ProduceRequest(topic=topic, partition=partition, batch=batch)
        deadline = time.monotonic() + timeout
        while True:
            stub = broker_pb2_grpc.BrokerStub(self.pool.get(self.address(topic, partition)))
            try:
                resp = invoke(stub.Produce, req, 10.0)
                return resp.base_offset, resp.last_offset
            except errors.TubeqError as exc:
                if not (exc.retriable or exc.refresh_metadata) or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def fill(self, topic: str, partitions: int, per_partition: int, batch: int = 500,
             size: int = 0) -> dict[int, list[bytes]]:
        """``per_partition`` records ``b"p<part>-<i>"`` (padded to ``size``) in each partition."""
        out: dict[int, list[bytes]] = {}
        for p in range(partitions):
            vals = [f"p{p}-{i}".encode().ljust(size, b".") for i in range(per_partition)]
            for i in range(0, per_partition, batch):
                self.produce(topic, p, vals[i:i + batch])
            out[p] = vals
        return out

    def close(self) -> None:
        self.masters.close()
        self.pool.close()


def poll_until(consumer, count: int, timeout: float = 30.0) -> list[Record]:
    """Poll until ``count`` records came back (fails on timeout)."""
    got: list[Record] = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        assert time.monotonic() < deadline, f"only {len(got)} of {count} records in {timeout} s"
        got += consumer.poll(timeout=0.5)
    return got
