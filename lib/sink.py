"""Client side of exactly-once sinks (broker/sinks.py): stage from tasks, commit from a driver.

A sink writes numbered micro-batches. Each task of micro-batch ``batch_id`` opens a
:class:`TaskStaging`, adds its rows column-wise (encoded like ``Producer.send_batch``, cut into
batches of about ``batch_bytes``) and ends with :meth:`TaskStaging.finish`, whose
:class:`Staged` (pieces per broker) goes to the driver. The driver calls
:meth:`SinkClient.commit` with every successful task's ``Staged``: each broker appends those
tasks' batches and records the batch id, once. Nothing staged is visible before that commit, and
a batch id a broker has committed is never applied there again.

Example (one process playing both roles)::

    with SinkClient(masters) as sinks:
        task = sinks.task("orders-to-totals", batch_id=7, task="0.0")
        task.add("totals", 0, [b"a", b"b"])
        sinks.commit("orders-to-totals", 7, [task.finish()])
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from lib.auth.client import Credentials
from lib.closing import Closeable
from lib.errors import InvalidArgument, TubeqError, Unavailable, UnknownTopic
from lib.names import check_name
from lib.producer.bulk import batch_bounds
from lib.proto import broker_pb2 as pb
from lib.proto import broker_pb2_grpc
from lib.records import EncodedRun, batch_head, encode_run
from lib.routes import RouteCache, confirm_unknown
from lib.rpc import MasterClient, client_pool, invoke
from lib.tls import Tls

BATCH_BYTES = 512 * 1024
RETRIES = 5


@dataclass
class Staged:
    """What one task staged: its id, its number of pieces on each broker (by broker id: a
    restarted broker may listen elsewhere) and the topics (to find the brokers again). Small
    and plain, so it travels to the driver as a commit message."""

    task: str
    pieces: dict[int, int] = field(default_factory=dict)
    topics: set[str] = field(default_factory=set)
    records: int = 0


class SinkClient(Closeable):
    """Stages and commits micro-batches of exactly-once sinks; thread-safe."""

    def __init__(self, masters: str | Sequence[str], *, batch_bytes: int = BATCH_BYTES,
                 request_timeout_s: float = 30.0, retries: int = RETRIES,
                 credentials: Credentials | None = None, tls: Tls | None = None) -> None:
        if batch_bytes <= 0:
            raise InvalidArgument("batch_bytes must be > 0")
        self.batch_bytes = batch_bytes
        self.timeout = request_timeout_s
        self.retries = retries
        self._pool = client_pool(masters, credentials, request_timeout_s, tls)
        self._master = MasterClient(masters, pool=self._pool, timeout=request_timeout_s)
        self.routes = RouteCache(self._master, 30.0, request_timeout_s)

    def task(self, sink: str, batch_id: int, task: str) -> TaskStaging:
        """Start staging one task's share of micro-batch ``batch_id``."""
        check_name(sink, "sink")
        if batch_id < 0:
            raise InvalidArgument(f"batch_id must be >= 0, got {batch_id}")
        return TaskStaging(self, sink, batch_id, task)

    def commit(self, sink: str, batch_id: int, staged: Iterable[Staged]) -> int:
        """Make the micro-batch visible on every broker it was staged on; returns the records
        appended by this call (0 where a broker had committed the batch id already: a replay).
        Raises SinkStagingLost when a broker no longer holds what the tasks staged (nothing of
        it is applied there: run the micro-batch again)."""
        staged = sorted(staged, key=lambda s: s.task)
        by_broker: dict[int, list[pb.SinkTask]] = {}
        for st in staged:
            for broker, pieces in st.pieces.items():
                by_broker.setdefault(broker, []).append(pb.SinkTask(task=st.task, pieces=pieces))
        addresses = self._addresses(staged)
        records = 0
        for broker in sorted(by_broker):
            if broker not in addresses:
                raise Unavailable(f"broker {broker} holds staged batches of sink {sink} batch "
                                  f"{batch_id} but hosts none of their topics now")
            request = pb.SinkCommitRequest(sink=sink, batch_id=batch_id, tasks=by_broker[broker])
            records += self._call(addresses[broker], "SinkCommit", request).records
        return records

    def abort(self, sink: str, batch_id: int, staged: Iterable[Staged]) -> None:
        """Drop what the tasks staged (best effort: staging also expires on the brokers)."""
        staged = list(staged)
        try:
            addresses = self._addresses(staged)
        except TubeqError:
            return
        for address in sorted({addresses[b] for st in staged for b in st.pieces
                               if b in addresses}):
            try:
                self._call(address, "SinkAbort", pb.SinkAbortRequest(sink=sink,
                                                                      batch_id=batch_id))
            except TubeqError:
                pass  # the broker is gone: so is its staging

    def _addresses(self, staged: list[Staged]) -> dict[int, str]:
        """Broker id -> address now, from fresh routes of the staged topics."""
        topics = set().union(*(st.topics for st in staged)) if staged else set()
        routes = self.routes.refresh(topics) if topics else {}
        return {p.broker_id: p.address for r in routes.values() for p in r.partitions
                if p.address}

    def close(self) -> None:
        self._master.close()
        self._pool.close()

    def _call(self, address: str, method: str, request: object) -> object:
        """One call with retries of retriable errors (backoff 0.1 s doubling to 1 s)."""
        stub = broker_pb2_grpc.BrokerStub(self._pool.get(address))
        delay = 0.1
        for attempt in range(self.retries + 1):
            try:
                return invoke(getattr(stub, method), request, self.timeout)
            except TubeqError as exc:
                if not exc.retriable or attempt == self.retries:
                    raise
            time.sleep(delay)
            delay = min(1.0, delay * 2)
        raise AssertionError("unreachable")


class TaskStaging:
    """One task's staging of one micro-batch (not thread-safe: one task, one thread)."""

    def __init__(self, client: SinkClient, sink: str, batch_id: int, task: str) -> None:
        self._client = client
        self.sink = sink
        self.batch_id = batch_id
        self.staged = Staged(task)
        self.committed_before = False  # a broker said the batch id is committed: a replay

    def add(self, topic: str, partition: int, values: Sequence[bytes],
            keys: Sequence[bytes] | None = None, tags: Sequence[str] | None = None,
            headers: Sequence[Mapping[str, bytes] | None] | None = None,
            timestamp: int | None = None) -> None:
        """Stage records for one partition, in order (after what this task staged before)."""
        if not len(values):
            return
        route = self._client.routes.get(topic)
        if not 0 <= partition < route.count:
            raise InvalidArgument(f"topic {topic} has {route.count} partitions, no partition "
                                  f"{partition}")
        ts = time.time_ns() // 1_000_000 if timestamp is None else int(timestamp)
        run = encode_run(values, ts, keys, tags, headers)
        for batch, count in _batches(run, ts, self._client.batch_bytes):
            self._stage(topic, partition, batch)
            self.staged.records += count

    def _stage(self, topic: str, partition: int, batch: bytes) -> None:
        """Stage one batch on the partition's broker, retrying retriable errors (a broker that
        has not learned a new topic yet, one that moved); the piece number counts per broker
        and only moves on success, so a retry restages the same piece."""
        client, delay = self._client, 0.1
        for attempt in range(client.retries + 1):
            try:
                where = client.routes.get(topic).partitions[partition]
                address, broker = where.address, where.broker_id
                if not address:
                    raise Unavailable(f"no broker hosts {topic}/{partition} right now",
                                      topic=topic, partition=partition)
                piece = self.staged.pieces.get(broker, 0)
                request = pb.SinkStageRequest(sink=self.sink, batch_id=self.batch_id,
                                              task=self.staged.task, piece=piece, topic=topic,
                                              partition=partition, batch=batch)
                stub = broker_pb2_grpc.BrokerStub(client._pool.get(address))
                reply = invoke(stub.SinkStage, request, client.timeout)
            except TubeqError as exc:
                if isinstance(exc, UnknownTopic):
                    exc = confirm_unknown(topic, exc, lambda: client.routes.get(topic))
                if not exc.retriable or attempt == client.retries:
                    raise exc from None
                if exc.refresh_metadata:
                    client.routes.invalidate(topic)
                time.sleep(delay)
                delay = min(1.0, delay * 2)
                continue
            self.committed_before = self.committed_before or reply.committed
            self.staged.pieces[broker] = piece + 1
            self.staged.topics.add(topic)
            return

    def finish(self) -> Staged:
        return self.staged


def _batches(run: EncodedRun, ts: int, batch_bytes: int) -> Iterable[tuple[bytes, int]]:
    """Wire batches of about ``batch_bytes`` from an encoded run (whole frames each)."""
    sizes = run.sizes
    starts, bounds = batch_bounds(sizes, batch_bytes)
    frames = memoryview(run.frames)
    for i, j in zip(bounds, bounds[1:], strict=False):
        a, b = int(starts[i]), int(starts[j])
        tags = None if run.tag_hashes is None else run.tag_hashes[i:j]
        body = frames[a:b]
        head = batch_head(body, sizes[i:j], tags, np.full(j - i, ts, np.int64))
        yield head + bytes(body), j - i

