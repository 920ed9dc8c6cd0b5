"""Client side of exactly-once sinks (broker/sinks.py): stage from tasks, commit from a driver.

A sink writes numbered micro-batches. Each task of micro-batch ``batch_id`` opens a
:class:`TaskStaging`, adds its rows column-wise (encoded like ``Producer.send_batch``, cut into
batches of about ``batch_bytes``) and ends with :meth:`TaskStaging.finish`, whose
:class:`Staged` (pieces per broker) goes to the driver. The driver calls
:meth:`SinkClient.commit` with every successful task's ``Staged``: each broker appends those
tasks' batches and records the batch id, once. Nothing staged is visible before that commit, and
a batch id a broker has committed is never applied there again.

Failover: a task stages each batch on the partition's leader and a *copy* on each of its other
in-sync replicas (held, never appended by a follower), and notes which brokers hold every batch
it staged for each partition. The driver commits each partition on its leader *now* and, when a
broker is gone, moved or not answering (any retriable error), asks the master for the routes
again and commits there, for up to ``request_timeout_s`` after the first failure; a stage is
retried at the new leader the same way. A new leader that holds the copies completes the
commit (an interrupted one once, by its intent: broker/sinks.py); one that does not hold them
fails the commit with SinkStagingLost (nothing applied: Spark replays the micro-batch).

Example (one process playing both roles)::

    with SinkClient(masters) as sinks:
        task = sinks.task("orders-to-totals", batch_id=7, task="0.0")
        task.add("totals", 0, [b"a", b"b"])
        sinks.commit("orders-to-totals", 7, [task.finish()])
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import grpc
import numpy as np

from lib.auth.client import Credentials
from lib.closing import Closeable
from lib.errors import InvalidArgument, SinkStagingLost, TubeqError, Unavailable, UnknownTopic
from lib.names import check_name
from lib.producer.bulk import batch_bounds
from lib.proto import broker_pb2 as pb
from lib.proto import broker_pb2_grpc
from lib.proto.master_pb2 import PartitionRoute
from lib.records import EncodedRun, batch_head, encode_run
from lib.routes import RouteCache, confirm_unknown
from lib.rpc import MasterClient, client_pool, invoke
from lib.sink_routes import ReplicaRoutes, Retry
from lib.tls import Tls
from lib.wire_errors import from_rpc_error

log = logging.getLogger(__name__)
BATCH_BYTES = 512 * 1024
# How long a stage waits for its copies after the leader answered: at least this, or this many
# times the leader's call. A copy that is later is cancelled (a paused follower must not stall
# every stage for a request timeout); that follower then holds no copy of the partition.
COPY_GRACE_S, COPY_GRACE_FACTOR = 5.0, 4.0

Key = tuple[str, int]  # (topic, partition)


@dataclass
class Staged:
    """What one task staged: its id, its number of pieces on each broker (by broker id: a
    restarted broker may listen elsewhere; leaders' pieces and copies alike), the topics, and
    per partition the brokers that hold *every* piece of it this task staged (those that can
    commit it). Small and plain, so it travels to the driver as a commit message."""

    task: str
    pieces: dict[int, int] = field(default_factory=dict)
    topics: set[str] = field(default_factory=set)
    records: int = 0
    holders: dict[Key, set[int]] = field(default_factory=dict)


class SinkClient(Closeable):
    """Stages and commits micro-batches of exactly-once sinks; thread-safe."""

    def __init__(self, masters: str | Sequence[str], *, batch_bytes: int = BATCH_BYTES,
                 request_timeout_s: float = 30.0, credentials: Credentials | None = None,
                 tls: Tls | None = None) -> None:
        if batch_bytes <= 0:
            raise InvalidArgument("batch_bytes must be > 0")
        self.batch_bytes = batch_bytes
        self.timeout = request_timeout_s
        self._pool = client_pool(masters, credentials, request_timeout_s, tls)
        self._master = MasterClient(masters, pool=self._pool, timeout=request_timeout_s)
        self.routes = RouteCache(self._master, 30.0, request_timeout_s)
        self.replicas = ReplicaRoutes(self._master, self.routes, request_timeout_s)

    def task(self, sink: str, batch_id: int, task: str) -> TaskStaging:
        """Start staging one task's share of micro-batch ``batch_id``."""
        check_name(sink, "sink")
        if batch_id < 0:
            raise InvalidArgument(f"batch_id must be >= 0, got {batch_id}")
        return TaskStaging(self, sink, batch_id, task)

    def commit(self, sink: str, batch_id: int, staged: Iterable[Staged]) -> int:
        """Make the micro-batch visible on every partition it was staged for, each on its
        leader of the moment (following failovers); returns the records appended by this
        call (0 where a partition held the batch already: a replay). Raises SinkStagingLost
        when a leader no longer holds what the tasks staged (nothing of it is applied there:
        run the micro-batch again)."""
        staged = sorted(staged, key=lambda s: s.task)
        todo = {key for st in staged for key in st.holders}
        records, retry = 0, Retry(self.timeout)
        while todo:
            try:
                for broker, (address, parts) in sorted(self._plan(staged, todo).items()):
                    request = pb.SinkCommitRequest(
                        sink=sink, batch_id=batch_id,
                        tasks=[pb.SinkTask(task=st.task, pieces=st.pieces[broker])
                               for st in staged if any(k in st.holders for k in parts)],
                        partitions=[pb.SinkPartition(topic=t, partition=p) for t, p in parts])
                    stub = self.broker_stub(address)
                    records += invoke(stub.SinkCommit, request, self.timeout).records
                    todo -= set(parts)
            except TubeqError as exc:
                retry.after(exc)  # raises when it must not or may no longer retry
        return records

    def _plan(self, staged: list[Staged], todo: set[Key]) -> dict[int, tuple[str, list[Key]]]:
        """Leader broker id -> (its address, the partitions of ``todo`` it leads), from fresh
        routes; SinkStagingLost when a leader holds no full copy of a task's pieces."""
        routes = self.replicas.refresh({t for t, _ in todo})
        plan: dict[int, tuple[str, list[Key]]] = {}
        for key in sorted(todo):
            where = self.replicas.partition(routes[key[0]], key[1])
            if not where.address or not where.available:
                raise Unavailable(f"partition {key[0]}/{key[1]} has no leader right now (its "
                                  "broker is down; the master is electing another)",
                                  topic=key[0], partition=key[1])
            for st in staged:
                if key in st.holders and where.broker_id not in st.holders[key]:
                    raise SinkStagingLost(
                        f"partition {key[0]}/{key[1]} is led by broker {where.broker_id}, which "
                        f"does not hold what task {st.task} staged for it (held by brokers "
                        f"{sorted(st.holders[key])}); nothing of it was applied there: run the "
                        "micro-batch again", topic=key[0], partition=key[1], task=st.task)
            plan.setdefault(where.broker_id, (where.address, []))[1].append(key)
        return plan

    def abort(self, sink: str, batch_id: int, staged: Iterable[Staged]) -> None:
        """Drop what the tasks staged (best effort: staging also expires on the brokers)."""
        staged = list(staged)
        try:
            addresses = self.replicas.addresses({t for st in staged for t in st.topics})
        except TubeqError:
            return
        for address in sorted({addresses[b] for st in staged for b in st.pieces
                               if b in addresses}):
            stub = self.broker_stub(address)
            try:
                invoke(stub.SinkAbort, pb.SinkAbortRequest(sink=sink, batch_id=batch_id),
                       self.timeout)
            except TubeqError:
                pass  # the broker is gone: so is its staging

    def broker_stub(self, address: str) -> broker_pb2_grpc.BrokerStub:
        """A stub on the pooled channel to the broker at ``address`` (one per broker)."""
        return broker_pb2_grpc.BrokerStub(self._pool.get(address))

    def close(self) -> None:
        self._master.close()
        self._pool.close()


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
        """Stage one batch on the partition's leader and copies on its other in-sync
        replicas, retrying the leader's retriable errors at the leader of the moment (a broker
        that has not learned a new topic yet, one that moved or died). Piece numbers count
        per broker and move only on success, so a retry restages the same piece there."""
        client, retry, fresh = self._client, Retry(self._client.timeout), False
        key = (topic, partition)
        while True:
            copies: dict[int, tuple[int, grpc.Future]] = {}
            try:
                where = client.replicas.partition(client.replicas.get(topic, fresh), partition)
                if not where.address:
                    raise Unavailable(f"no broker hosts {topic}/{partition} right now",
                                      topic=topic, partition=partition)
                copies = self._send_copies(where, key, batch)
                started = time.monotonic()
                reply = self._send(where.broker_id, where.address, key, batch, copy=False)
            except TubeqError as exc:
                for _, future in copies.values():
                    future.cancel()  # restaged under the same numbers with the next attempt
                if isinstance(exc, UnknownTopic):
                    exc = confirm_unknown(topic, exc, lambda: client.replicas.get(topic, True))
                retry.after(exc)
                fresh = True
                continue
            self.committed_before = self.committed_before or reply.committed
            grace = max(COPY_GRACE_S, COPY_GRACE_FACTOR * (time.monotonic() - started))
            took = {where.broker_id} | self._settle(copies, time.monotonic() + grace)
            have = self.staged.holders.get(key)
            self.staged.holders[key] = took if have is None else have & took
            self.staged.topics.add(topic)
            return

    def _send(self, broker: int, address: str, key: Key, batch: bytes,
              copy: bool) -> pb.SinkStageResponse:
        request = self._request(broker, key, batch, copy)
        stub = self._client.broker_stub(address)
        reply = invoke(stub.SinkStage, request, self._client.timeout)
        self.staged.pieces[broker] = request.piece + 1
        return reply

    def _request(self, broker: int, key: Key, batch: bytes, copy: bool) -> pb.SinkStageRequest:
        return pb.SinkStageRequest(sink=self.sink, batch_id=self.batch_id, task=self.staged.task,
                                   piece=self.staged.pieces.get(broker, 0), topic=key[0],
                                   partition=key[1], batch=batch, copy=copy)

    def _send_copies(self, where: PartitionRoute, key: Key,
                     batch: bytes) -> dict[int, tuple[int, grpc.Future]]:
        """Start the copies (concurrent with the leader's stage) on the in-sync followers
        that hold every earlier piece of the partition; broker id -> (piece, call future)."""
        have = self.staged.holders.get(key)
        out = {}
        for broker, address in zip(where.replicas, where.replica_addresses, strict=False):
            if broker == where.broker_id or broker not in where.isr or not address or \
                    (have is not None and broker not in have):
                continue
            request = self._request(broker, key, batch, copy=True)
            stub = self._client.broker_stub(address)
            out[broker] = (request.piece, stub.SinkStage.future(request,
                                                                timeout=self._client.timeout))
        return out

    def _settle(self, copies: dict[int, tuple[int, grpc.Future]], until: float) -> set[int]:
        """The followers whose copy was stored by ``until`` (a failed or late copy only drops
        that follower from the partition's holders: it cannot take over this task's share of
        the partition; the commit says so if it must)."""
        took = set()
        for broker, (piece, future) in copies.items():
            try:
                future.result(timeout=max(0.0, until - time.monotonic()))
            except grpc.RpcError as exc:
                err: object = from_rpc_error(exc)
            except grpc.FutureTimeoutError:
                future.cancel()
                err = "no answer in time"
            except grpc.FutureCancelledError:
                err = "cancelled"
            else:
                self.staged.pieces[broker] = piece + 1
                took.add(broker)
                continue
            log.info("sink copy of %s piece %d on broker %d failed: %s", self.staged.task,
                     piece, broker, err)
        return took

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

