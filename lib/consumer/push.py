"""PushConsumer: the broker streams records (``Subscribe``) and worker threads run a handler.

Flow control: one stream per (broker, topic). Each stream is granted a share of
``max_inflight_messages`` / ``max_inflight_bytes`` (bytes: at least the topic's
``max_message_bytes``, or one big record could never be sent); credit goes back to the broker only
as the handler *finishes* records, so received-but-unhandled records never exceed the credit
however slow the handler is. :meth:`PushConsumer.pause` stops returning credit.

Order: records of a partition always go to the same worker thread (``crc32(topic) +
partition`` modulo ``threads``), which runs them one by one in offset order.

Commits (``commit="after"``, the default, at-least-once): a record counts as processed once the
handler returns; processed positions are committed every ``auto_commit_interval_ms``, when
partitions are revoked and on :meth:`close`. ``commit="before"`` (at-most-once): each chunk the
broker sends is committed before any of its records reaches the handler.

Failures. With ``retry=`` (lib/consumer/retry.py, docs/retry.md), a handler that raises or
returns ``Later`` has its record moved to the group's retry topic (then its dead-letter topic)
with the next commit, and the partition goes on; ``ordered=True`` retries in place instead,
holding the partition. Without, a handler exception is logged and the record is skipped, but
(at-least-once) the partition's commit point stays at that record: the failed record and every
later one of that partition are delivered again after a restart or a rebalance moves the
partition. With at-most-once a failed record is simply lost. A failure's traceback is logged at
most every 10 s (``handler_errors`` counts them all).

Rebalance (coordinator thread): streams are cancelled, records not yet started are dropped (they
are streamed again from the processed position), running handlers are waited for (up to
``session_timeout_ms / 2``), processed positions of revoked partitions are committed, and
streams restart for the new assignment.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from lib import errors
from lib.auth.client import Credentials
from lib.config import require
from lib.consumer.base import ConsumerBase, as_config, check_retry
from lib.consumer.coordinator import Coordinator
from lib.consumer.instance import check_mode
from lib.consumer.push_stream import PushStream, StreamHooks
from lib.consumer.retry import Later, retry_in_place
from lib.logs import Sparse, event
from lib.proto import broker_pb2
from lib.records import Record, decode_records
from lib.retry import RetryPolicy, attempts_of
from lib.tls import Tls
from lib.types import TopicPartition
from lib.wire_errors import error_class

log = logging.getLogger(__name__)
Handler = Callable[[Record], object]
FAILURE_LOG_EVERY_S = 10.0  # one handler failure's traceback per interval; the rest counted


@dataclass(frozen=True)
class PushConfig:
    group: str = ""
    auto_offset_reset: Literal["latest", "earliest", "error"] = "latest"
    commit: Literal["after", "before"] = "after"
    max_inflight_messages: int = 1000
    max_inflight_bytes: int = 8 << 20
    session_timeout_ms: int = 10_000
    auto_commit_interval_ms: int = 5000
    client_id: str = ""
    rpc_timeout_s: float = 10.0
    isolation_level: Literal["read_uncommitted", "read_committed"] = "read_uncommitted"
    mode: Literal["clustering", "broadcast"] = "clustering"  # docs/broadcast.md
    instance_id: str = ""  # broadcast: default client_id, else the host name
    # A handler that raises (or returns lib.consumer.retry.Later) has its record retried
    # through the group's retry topic, then dead-lettered (docs/retry.md): True for the
    # default RetryPolicy, or a RetryPolicy (ordered=True: retried in place, holding the
    # partition). Off: the failure is logged and the commit point stays at the record.
    retry: RetryPolicy | bool | None = None

    def validate(self) -> None:
        require(bool(self.group), "a PushConsumer needs a group")
        check_mode(self.mode, self.group, self.instance_id)
        check_retry(self.retry)
        require(not self.retry or self.commit == "after",
                "retry needs commit='after': an at-most-once consumer has nothing to retry")
        require(not (self.retry and self.mode == "broadcast"),
                "retry is for clustering groups: a broadcast instance's failures are its own")
        require(self.isolation_level in ("read_uncommitted", "read_committed"),
                f"isolation_level must be 'read_uncommitted' or 'read_committed', got "
                f"{self.isolation_level!r}")
        require(1 <= self.max_inflight_messages <= 1_000_000,
                f"max_inflight_messages must be within 1..1000000, "
                f"got {self.max_inflight_messages}")
        require(self.max_inflight_bytes >= 1024,
                f"max_inflight_bytes must be >= 1024, got {self.max_inflight_bytes}")
        require(self.auto_commit_interval_ms >= 10, "auto_commit_interval_ms must be >= 10")


@dataclass(slots=True)
class _Item:
    session: int
    stream: PushStream
    tp: TopicPartition
    epoch: int
    expected: int  # position before this record
    after: int  # position once it is handled
    record: Record
    size: int


class PushConsumer(ConsumerBase):
    """Records pushed to ``handler`` in worker threads; see the module docstring."""

    def __init__(self, masters: str | Iterable[str], *, config: PushConfig | None = None,
                 credentials: Credentials | None = None, tls: Tls | None = None,
                 **settings: Any) -> None:
        """``settings`` are :class:`PushConfig` fields (``group=`` is required, ``commit=``,
        ``max_inflight_messages=``, ...), on top of ``config`` if given; validated either way.
        ``credentials`` (else the environment's) log in."""
        self.config: PushConfig = as_config(PushConfig, config, settings)
        cfg = self.config
        super().__init__(masters, cfg.group, cfg.auto_offset_reset, cfg.session_timeout_ms,
                         cfg.client_id, cfg.rpc_timeout_s, credentials, tls, cfg.mode,
                         cfg.instance_id, cfg.retry)
        self._auto_commit = cfg.commit == "after"
        self._handler: Handler | None = None
        self._session = 0
        self._paused = False
        self._streams: list[PushStream] = []
        self._streams_lock = threading.RLock()
        self._queues: list[queue.SimpleQueue] = []
        self._busy: list[threading.Lock] = []
        self._threads: list[threading.Thread] = []
        self._restart = threading.Event()
        self._stop = threading.Event()
        self._stats_lock = threading.Lock()
        self.inflight_messages = 0  # received, not handled yet
        self.inflight_bytes = 0
        self.max_inflight_seen = (0, 0)
        self.handler_errors = 0
        self._failure_log = Sparse(FAILURE_LOG_EVERY_S)  # tracebacks; handler_errors counts

    def subscribe(self, topics: Iterable[str] | str, group: str | None = None, *,
                  handler: Handler, tags: Iterable[str] | None = None, threads: int = 1) -> None:
        """Start consuming ``topics`` in the group; ``handler(record)`` runs in ``threads``."""
        self._check_open()
        if not callable(handler):
            raise errors.InvalidArgument("handler must be callable: handler(record)")
        if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 256:
            raise errors.InvalidArgument(f"threads must be within 1..256, got {threads!r}")
        self._handler = handler
        self._start_workers(threads)
        try:
            self._start_group(topics, group, tags)
        except BaseException:
            self._stop_workers()
            raise

    def _start_workers(self, threads: int) -> None:
        self._stop.clear()
        for i in range(threads):
            self._queues.append(queue.SimpleQueue())
            self._busy.append(threading.Lock())
            t = threading.Thread(target=self._work, args=(i,), daemon=True,
                                 name=f"tubeq-push-worker-{i}")
            self._threads.append(t)
            t.start()
        sup = threading.Thread(target=self._supervise, daemon=True, name="tubeq-push-sup")
        self._threads.append(sup)
        sup.start()

    def _stop_workers(self) -> None:
        self._stop.set()
        for q in self._queues:
            q.put(None)
        for t in self._threads:
            t.join(timeout=5)
        self._queues, self._busy, self._threads = [], [], []

    def assignment(self) -> set[TopicPartition]:
        return self._sub.assignment()

    def pause(self) -> None:
        """Stop granting credit: handlers finish what they hold, then the broker stops."""
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        with self._streams_lock:
            for s in self._streams:
                s.flush()

    def commit(self) -> None:
        """Commit the processed positions now (raises Fenced if a partition moved)."""
        self._check_open()
        self._commit(self._sub.uncommitted())

    # -- rebalance listener ------------------------------------------------------------------

    def on_revoke(self, tps: set[TopicPartition]) -> None:
        self._stop_streams(self._quiesce_s)
        super().on_revoke(tps)

    def on_assign(self, tps: set[TopicPartition]) -> None:
        self._restart_streams()

    # -- streams -----------------------------------------------------------------------------

    @property
    def _quiesce_s(self) -> float:
        return self.config.session_timeout_ms / 3000

    def _stop_streams(self, wait: float) -> None:
        """Cancel every stream, drop records not started, wait for running handlers."""
        with self._streams_lock:
            streams, self._streams = self._streams, []
            self._session += 1
        for s in streams:
            s.cancel()
        deadline = time.monotonic() + wait
        for lock in self._busy:
            if lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                lock.release()
            else:
                event(log, "push.handler_still_running", logging.WARNING, waited_s=wait)

    def _restart_streams(self) -> None:
        """Streams for the current assignment, from the processed positions.

        Called with the coordinator's lock held (from the rebalance, or by the supervisor), so
        it never interleaves with a rebalance.
        """
        with self._streams_lock:
            self._stop_streams(self._quiesce_s)
            if self._closed or self._stop.is_set():
                return
            parts = self._sub.fetchable()
            grouped, missing = self._offsets.routes.by_broker(tp for tp, _, _ in parts)
            info = {tp: (tp, pos, ep) for tp, pos, ep in parts}
            keys = [(a, t) for a, tps in grouped.items() for t in sorted({tp.topic for tp in tps})]
            for address, topic in keys:
                mine = [info[tp] for tp in grouped[address] if tp.topic == topic]
                s = PushStream(address, topic, mine, self._share(len(keys), topic), self._session,
                               self._hooks())
                self._streams.append(s)
                s.start(self._offsets.stub(address), self._sub.tags, self._group,
                        self.config.isolation_level == "read_committed"
                        or topic in self._committed_topics,
                        self._offsets.routes.topic_id(topic))
            if missing or self._sub.missing_positions():
                self._request_restart()

    def _hooks(self) -> StreamHooks:
        return StreamHooks(on_data=self._on_data, on_broken=self._request_restart,
                           paused=lambda: self._paused)

    def _share(self, streams: int, topic: str) -> tuple[int, int]:
        """Credit of one stream: its part of the limits (bytes: at least one big message)."""
        cfg = self.config
        biggest = self._offsets.routes.max_message_bytes(topic) or 1 << 20
        return (max(1, cfg.max_inflight_messages // streams),
                max(cfg.max_inflight_bytes // streams, biggest))

    def _request_restart(self) -> None:
        self._restart.set()

    def _supervise(self) -> None:
        """Restart broken streams (with fresh routes) and commit periodically."""
        period = self.config.auto_commit_interval_ms / 1000
        next_commit = time.monotonic() + period
        while not self._stop.wait(min(0.2, period)):
            if self._restart.is_set() and self._coordinator is not None:
                self._restart.clear()
                time.sleep(0.2)  # a broker that just went away: give its routes time to move
                self._recover(self._coordinator)
            if self._auto_commit and time.monotonic() >= next_commit:
                next_commit = time.monotonic() + period
                self._commit_quietly(self._sub.uncommitted(), "periodic")

    def _recover(self, coordinator: Coordinator) -> None:
        try:
            self._offsets.refresh_routes(self._sub.topics)
        except errors.TubeqError as exc:
            event(log, "push.routes_failed", logging.WARNING, error=str(exc))
        with coordinator.lock:
            try:
                coordinator.resolve_missing()
            except errors.TubeqError as exc:
                event(log, "push.resolve_failed", logging.WARNING, error=str(exc))
            self._restart_streams()

    # -- data path ---------------------------------------------------------------------------

    def _on_data(self, stream: PushStream, data: broker_pb2.PartitionData) -> None:
        """A chunk arrived (reader thread): hand its records to the partition's worker."""
        tp = TopicPartition(stream.topic, data.partition)
        if data.error_code:
            self._partition_failed(tp, data)
            return
        epoch, start = stream.epochs.get(data.partition), stream.next.get(data.partition)
        if epoch is None or start is None:
            return
        sizes: list[int] = []
        try:
            records = decode_records(data.frames, np.frombuffer(data.offsets, "<i8"),
                                     tp.partition, tp.topic, sizes)
        except errors.CorruptRecord as exc:
            self._sub.fail(tp, exc)
            self._request_restart()
            return
        stream.next[data.partition] = data.next_offset
        if self.config.commit == "before" and not self._commit_first(tp, epoch, start, data):
            return
        self._count(len(records), sum(sizes))
        stream.received(len(records))
        q = self._queues[(zlib.crc32(tp.topic.encode()) + tp.partition) % len(self._queues)]
        expected = start
        for i, rec in enumerate(records):
            after = rec.offset + 1 if i + 1 < len(records) else data.next_offset
            q.put(_Item(stream.session, stream, tp, epoch, expected, after, rec, sizes[i]))
            expected = after

    def _commit_first(self, tp: TopicPartition, epoch: int, start: int,
                      data: broker_pb2.PartitionData) -> bool:
        """At-most-once: the chunk is committed before any of it is handled."""
        if not self._sub.advance(tp, epoch, start, data.next_offset):
            return False
        try:
            self._commit({tp: data.next_offset})
            return True
        except errors.TubeqError as exc:
            event(log, "push.commit_before_failed", logging.WARNING, topic=tp.topic,
                  partition=tp.partition, error=str(exc))
            self._request_restart()
            return False

    def _count(self, messages: int, nbytes: int) -> None:
        with self._stats_lock:
            self.inflight_messages += messages
            self.inflight_bytes += nbytes
            seen = self.max_inflight_seen
            self.max_inflight_seen = (max(seen[0], self.inflight_messages),
                                      max(seen[1], self.inflight_bytes))

    def _partition_failed(self, tp: TopicPartition, data: broker_pb2.PartitionData) -> None:
        exc = error_class(data.error_code)(data.error_message or data.error_code,
                                           topic=tp.topic, partition=tp.partition,
                                           earliest=data.earliest, latest=data.latest)
        event(log, "push.partition_error", logging.WARNING, topic=tp.topic,
              partition=tp.partition, error=str(exc), code=data.error_code)
        if not self._sub.is_assigned(tp):
            return
        policy = self._sub.reset_policy
        if isinstance(exc, errors.OffsetOutOfRange) and policy != "error":
            self._sub.seek(tp, data.earliest if policy == "earliest" else data.latest)
        elif not (exc.retriable or exc.refresh_metadata):
            self._sub.fail(tp, exc)  # stays out of the streams until it is reassigned
        self._request_restart()

    def _work(self, i: int) -> None:
        q, busy = self._queues[i], self._busy[i]
        while True:
            item = q.get()
            if item is None:
                return
            with busy:
                if item.session == self._session:
                    self._handle(item)
            self._count(-1, -item.size)
            item.stream.handled(item.size)

    def _handle(self, item: _Item) -> None:
        if self._redelivery is not None and self._redelivery.policy.ordered:
            if self._handle_in_place(item):
                self._sub.advance(item.tp, item.epoch, item.expected, item.after)
            return
        failed = self._run_handler(item)
        if failed is not None:
            if self._redelivery is not None:
                self._nack_failed(item.record, failed)
            elif self.config.commit == "after":
                self._sub.hold(item.tp, item.record.offset)
        if self.config.commit == "after":
            self._sub.advance(item.tp, item.epoch, item.expected, item.after)

    def _run_handler(self, item: _Item) -> Later | BaseException | None:
        """None when the handler took the record; else why not (its exception, or the
        Later it returned)."""
        try:
            result = self._handler(item.record)
        except Exception as exc:  # noqa: BLE001 - the handler's failure is data here
            with self._stats_lock:
                self.handler_errors += 1
            held = self._failure_log.due()
            if held is not None:
                log.warning("push.handler_failed", exc_info=True, extra={"fields": {
                    "topic": item.tp.topic, "partition": item.tp.partition,
                    "offset": item.record.offset, "failures_not_logged_before": held}})
            return exc
        return result if isinstance(result, Later) else None

    def _handle_in_place(self, item: _Item) -> bool:
        """Ordered retries (RocketMQ's orderly consumption): run the handler again after
        each backoff, holding the partition, until it takes the record or has failed
        ``max_attempts`` times (then the record is dead-lettered and the partition moves
        on). False when the partition was revoked meanwhile (nothing to advance)."""
        outcome, failed, failures = retry_in_place(
            lambda: self._run_handler(item), self._redelivery.policy,
            attempts_of(item.record.headers), lambda s: self._hold(item, s))
        if outcome == "dead":
            self._nack_failed(item.record, failed, failures)
        return outcome != "revoked"

    def _hold(self, item: _Item, seconds: float) -> bool:
        """Wait ``seconds`` holding the partition; False once stopping or revoked."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self._stop.wait(min(0.1, max(0.0, deadline - time.monotonic()))) \
                    or item.session != self._session:
                return False
        return True

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self, timeout: float = 10.0) -> None:
        """Stop the streams, let handlers finish what they hold (up to ``timeout``), commit
        what was processed, leave the group."""
        if self._closed:
            return
        deadline = time.monotonic() + timeout
        if self._coordinator is not None:
            self._coordinator.stop()
        self._stop.set()
        with self._streams_lock:
            streams = list(self._streams)
        for s in streams:
            s.cancel()
        while self.inflight_messages > 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        self._stop_streams(max(0.0, deadline - time.monotonic()))
        self._closed = True
        for q in self._queues:
            q.put(None)
        if self._auto_commit:
            self._commit_quietly(self._sub.uncommitted(), "close")
        if self._redelivery is not None:
            self._redelivery.close()
        if self._coordinator is not None:
            self._coordinator.leave()
        self._pool.close()

