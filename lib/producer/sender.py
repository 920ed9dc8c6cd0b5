"""The producer's one background thread: sends ready batches, retries, resolves futures.

Ready batches become blocking calls on call threads (lib/producer/calls.py): one
``Broker.Produce`` per batch, or one ``ProduceMany`` per broker when several are ready for it;
many partitions are in flight at once while each partition has at most one batch (the
accumulator enforces that). A call thread only queues the outcome and wakes
this thread; resolving record futures, retry decisions and route refreshes all happen here, so
a user's done-callback runs on this thread (keep it short: a callback that blocks stalls every
partition).

``send_direct`` is the exception to "this thread sends": ``send_sync`` on an idle partition
sends its record from the caller's thread and settles it there; its failures come here.

Retries: an error with ``retriable`` puts the batch back at the head of its partition after an
exponential backoff (``retry_backoff_s`` doubling, at most 1 s), invalidating the topic's routes
when the error says ``refresh_metadata``; after ``retries`` retries, or on any other error, the
futures of the batch fail with the TubeqError. Nothing is dropped silently.

Quotas: a response's ``throttle_ms`` pauses every send to that broker for that long (the
broker's byte-rate quota of our principal is in debt, lib/auth/quotas.py); batches due meanwhile
wait at the head of their partitions, and a ``send_sync`` waits in its caller's thread. A
``QuotaExceeded`` refusal pauses the broker the same way and retries without using up a retry.

A hung leader: a Produce call in flight for over a second is watched (lib/stuck_calls.py): when
the master names another leader for its partition, the channel to the old one is closed, which
fails every call on it at once (CANCELLED, retriable), and they are resent where the routes now
say; the idempotent producer's sequence numbers let the new leader acknowledge instead of
appending twice a batch the old leader had replicated. Without idempotence such a resend may
store a batch twice (as Kafka's producer with retries and no idempotence). gRPC keepalive
(lib/rpc.py) ends calls to a peer that stopped answering within a few seconds in any case.

Too large: a batch its broker refuses as too large (``BatchTooLarge``, naming its limit) is
sent again in pieces within the limit, and later batches of that partition are cut the same
way before they go while it stays on that broker, for up to five minutes
(lib/producer/split.py).

Idempotence (on by default): the producer id comes from the active master (lib/producer/ids.py)
when the first batch is sealed. A batch gets its producer id and base sequence once, on its
first send, and keeps them for every retry, so the broker can acknowledge a retried batch
instead of appending it twice. When a sequenced batch fails for good, the partition moves to a
fresh producer id: the broker cannot tell whether the failed batch was appended, and a fresh id
starts a new sequence instead of leaving a gap that would fail every later batch. A batch
refused as a gap (``OutOfOrderSequence`` past the expected sequence: the broker lost
acknowledged batches of an ``async`` topic in a crash, docs/durability.md) was not stored: it is
stamped with a fresh producer id and sent again (Kafka's KIP-360 reset), without using a retry.

Transactions (lib/producer/transaction.py): before the batches drained in one turn are
sealed, the partitions among them new to the transaction are registered with the coordinator
in one call; a batch that fails for good makes the transaction abortable instead of moving its
partition to a fresh id (the transaction's end bumps the epoch and restarts every sequence).
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures._base import PENDING
from typing import Any

from lib.errors import (
    BatchTooLarge,
    OutOfOrderSequence,
    QuotaExceeded,
    TubeqError,
    Unavailable,
    UnknownTopic,
)
from lib.logs import event
from lib.produce_wire import joined, request_pieces, restamp_request
from lib.producer.accumulator import Accumulator
from lib.producer.batch import Batch
from lib.producer.calls import Metadata, ProduceCalls, runs_of
from lib.producer.direct import DirectSend
from lib.producer.sequences import Sequences
from lib.producer.split import RefusedLimits, pieces_within
from lib.producer.transaction import Transactions
from lib.proto import broker_pb2
from lib.records import HEADER_SIZE, batch_head
from lib.records.encode import joined_len
from lib.routes import RouteCache, TopicRoutes, confirm_unknown
from lib.rpc import ChannelPool
from lib.types import RecordMetadata, TopicPartition

log = logging.getLogger("tubeq.producer")
MAX_BACKOFF_S = 1.0


class Acknowledged:
    """Each record's RecordMetadata of an acknowledged batch, made when asked for. One object
    for the collector to track where a closure is a function and its cells; it holds the
    timestamps, never the batch (a future the caller keeps must not keep the request)."""

    __slots__ = ("topic", "partition", "base", "times")

    def __init__(self, topic: str, partition: int, base: int, times: Any) -> None:
        self.topic, self.partition, self.base, self.times = topic, partition, base, times

    def __call__(self, i: int) -> RecordMetadata:
        return RecordMetadata(self.topic, self.partition, self.base + i, int(self.times[i]))


class Sender(DirectSend, threading.Thread):
    """Drains the accumulator into Produce calls until stopped."""

    def __init__(self, acc: Accumulator, routes: RouteCache, pool: ChannelPool, *,
                 retries: int, retry_backoff_s: float, request_timeout_s: float,
                 new_producer_id: Callable[[], int] | None, client_id: str,
                 acks_all: bool = False, txn: Transactions | None = None) -> None:
        """``new_producer_id`` (None: not idempotent) asks the master for a producer id;
        ``txn``: a transactional producer's transaction state."""
        super().__init__(name=f"tubeq-producer-{client_id}", daemon=True)
        self.acc, self.routes, self.pool = acc, routes, pool
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self.request_timeout_s = request_timeout_s
        self._seq = None if new_producer_id is None else Sequences(new_producer_id)
        self.idempotent = self._seq is not None
        self.txn = txn
        self.acks_all = acks_all
        self.metadata = (("tubeq-client-id", client_id),)
        self._completions: queue.SimpleQueue[tuple[Batch, Any, TubeqError | None]] = \
            queue.SimpleQueue()
        self.calls = ProduceCalls(routes, pool, client_id)
        self._paused: dict[str, float] = {}  # broker address -> monotonic end of its throttle
        self._limits = RefusedLimits()  # batch bytes a partition's broker refused above
        self._stopping = False
        self._counting = threading.Lock()  # send_direct counts on callers' threads too
        self.records_acked = 0  # read racily by metrics()
        self.records_failed = 0
        self.records_sent_direct = 0  # acknowledged through send_direct

    # ------------------------------------------------------------------ thread

    def run(self) -> None:
        try:
            self._loop()
        except Exception as exc:  # a bug here must not leave futures pending forever
            log.exception("producer sender thread crashed")
            self.fail_all(Unavailable(f"producer sender thread crashed: {exc!r}"))
        finally:
            self.calls.close()

    def _loop(self) -> None:
        while True:
            self._process_completions()
            with self.acc.cond:
                if self._stopping and self.acc.forced:
                    break
                if self._stopping and not self.acc.incomplete_count():
                    return
                batches, next_at = self.acc.drain(time.monotonic(), self._cached_leader)
                if not batches and self._completions.empty():
                    wait = None if next_at is None else max(0.0, next_at - time.monotonic())
                    self.acc.cond.wait(wait if wait is None else min(wait, 1.0))
                    continue
            if self.txn is not None and batches:
                batches = self._register(batches)
            self._send_all(batches)
        self.fail_all(Unavailable("producer closed before these records were acknowledged "
                                  "(close timeout passed)"))

    def stop(self) -> None:
        """Exit once every batch is finished (call after the accumulator is closed)."""
        with self.acc.cond:
            self._stopping = True
            self.acc.cond.notify_all()

    # ------------------------------------------------------------------ sending

    @property
    def sequences(self) -> Sequences | None:
        return self._seq

    def _register(self, batches: list[Batch]) -> list[Batch]:
        """Register the partitions of unsealed batches new to the transaction, in one call;
        the batches left to send (those of a failed call go through the retry logic)."""
        new = [b for b in batches if not b.payload and b.tp not in self.txn.added]
        if not new:
            return batches
        try:
            self.txn.add(b.tp for b in new)
        except TubeqError as exc:
            for batch in new:
                batch.attempts += 1
                self._retry_or_fail(batch, exc)
            failed = set(map(id, new))
            return [b for b in batches if id(b) not in failed]
        return batches

    def _send_all(self, batches: list[Batch]) -> None:
        """Send ``batches``: those of one broker together (ProduceMany) when more than one
        is ready for it (lib/producer/calls.py)."""
        ready: dict[str, list[Batch]] = {}
        metadata: dict[str, Metadata] = {}
        for batch in batches:
            got = self._ready(batch)
            if got is not None:
                ready.setdefault(got[0], []).append(batch)
                metadata[got[0]] = got[1]
        for address, group in ready.items():
            if address in self.calls.unimplemented:  # an old broker: one call per batch
                for batch in group:
                    self._submit([batch], address, metadata[address])
                continue
            for run in runs_of(group, [joined_len(b.payload) for b in group]):
                self._submit(run, address, metadata[address])

    def _ready(self, batch: Batch) -> tuple[str, Metadata] | None:
        """(broker address, call metadata) of a batch ready to go, sealed; None when it is
        not to be sent now (failed, requeued for a throttle, split into pieces)."""
        if batch.abandoned is not None:  # a piece after one that failed: never sent
            self.fail(batch, batch.abandoned)
            return None
        batch.attempts += 1
        try:
            address = self._leader(batch.tp)[1]
            self.calls.stub(address)  # the broker can be reached
            metadata = self.metadata + self.pool.auth_metadata()  # may log in again
        except TubeqError as exc:
            self._retry_or_fail(batch, exc)
            return None
        resume = self._paused.get(address, 0.0)
        if resume > time.monotonic():  # throttled by a quota: wait at the partition's head
            batch.attempts -= 1
            self.acc.requeue(batch, resume)
            return None
        batch.address = address
        if not batch.payload:
            limit = self._limits.get(batch.tp, address)
            if limit is not None and self._split(batch, limit):
                return None
            try:
                self._seal(batch)
            except TubeqError as exc:  # no producer id: the master cannot be reached
                self._retry_or_fail(batch, exc)
                return None
        return address, metadata

    def _cached_leader(self, tp: TopicPartition) -> str | None:
        """The partition's leader as the cached routes say (never a call: under the
        accumulator's lock)."""
        route = self.routes.cached(tp.topic)
        return None if route is None else route.leader(tp.partition)

    def _leader(self, tp: TopicPartition) -> tuple[TopicRoutes, str]:
        """The topic's routes and the address of the partition's leader (Unavailable when
        none is known)."""
        route = self.routes.get(tp.topic)
        address = route.leader(tp.partition)
        if not address:
            raise Unavailable(f"no broker hosts {tp.topic}/{tp.partition} right now",
                              topic=tp.topic, partition=tp.partition)
        return route, address

    def _submit(self, batches: list[Batch], address: str, metadata: Metadata) -> None:
        """One Produce call for one batch, one ProduceMany call for more."""
        if len(batches) > 1:
            self.calls.submit_many(address, [b.payload for b in batches],
                                   tuple(b.tp for b in batches), self.request_timeout_s,
                                   metadata, lambda i, result, error: self._hand_over(
                                       batches[i], result, error))
            return
        batch = batches[0]
        try:
            stub = self.calls.stub(address)
        except TubeqError as exc:
            self._retry_or_fail(batch, exc)
            return
        batch.payload = joined(batch.payload)  # once: a retry sends the same bytes
        self.calls.submit(stub, batch.payload, self.request_timeout_s, address, (batch.tp,),
                          metadata, lambda result, error: self._hand_over(batch, result, error))

    def _acknowledged(self, tp: TopicPartition, response: broker_pb2.ProduceResponse,
                      address: str, count: int) -> None:
        """What every acknowledgement says besides the offsets: a quota's throttle, and a
        count that disagrees with what was sent."""
        if response.throttle_ms:
            self._pause(address, response.throttle_ms / 1e3)
        if response.last_offset - response.base_offset + 1 != count:
            event(log, "producer.offsets_mismatch", logging.WARNING, topic=tp.topic,
                  partition=tp.partition, base=response.base_offset,
                  last=response.last_offset, count=count)

    def _seal(self, batch: Batch) -> None:
        """Build the wire batch once; assign the idempotent sequence on the first send."""
        batch.first_sent = time.monotonic()
        pid, seq = self._seq.take(batch.tp, len(batch)) if self._seq else (-1, -1)
        batch.producer_id, batch.base_sequence = pid, seq
        batch.encode()
        head = batch_head(batch.buf, batch.sizes, batch.tag_hashes, batch.timestamps,
                          producer_id=pid, producer_epoch=self._seq.epoch if pid >= 0 else -1,
                          base_sequence=seq, transactional=self.txn is not None)
        batch.payload = request_pieces(batch.tp, head, batch.buf, self.acks_all,
                                       self.routes.topic_id(batch.tp.topic))
        batch.buf = bytearray()  # the request's pieces hold the frames now

    def _split(self, batch: Batch, limit: int) -> bool:
        """Put ``batch`` back as pieces of at most ``limit`` bytes; False when it fits
        whole, or when one of its records alone does not fit (it fails as it is)."""
        pieces = pieces_within(batch, limit)
        if pieces is None:
            return False
        self.acc.replace(batch, pieces)
        event(log, "producer.batch_split", logging.INFO, topic=batch.tp.topic,
              partition=batch.tp.partition, records=len(batch), bytes=batch.size,
              pieces=len(pieces), limit=limit)
        return True

    def _split_refused(self, batch: Batch, error: BatchTooLarge) -> bool:
        """A batch refused as too large: nothing of it was appended, so its pieces take
        its sequence numbers (nothing after it was sequenced: it was the partition's one
        batch in flight)."""
        limit = error.details.get("limit")
        if not isinstance(limit, int) or limit <= HEADER_SIZE or len(batch) < 2:
            return False
        self._limits.remember(batch.tp, batch.address, limit)
        if not self._split(batch, limit):
            return False
        if self._seq is not None and self._seq.current(batch.tp, batch.producer_id):
            self._seq.rewind(batch.tp, batch.base_sequence)
        return True

    def _settle_split(self, piece: Batch, error: TubeqError | None) -> None:
        """A piece finished: settle the batches it was cut from, as far up as that goes."""
        while piece.split is not None:
            parent = piece.split.settled(piece, error)
            if parent is None:
                return
            piece = parent

    def _hand_over(self, batch: Batch, result: Any, error: TubeqError | None) -> None:
        self._completions.put((batch, result, error))
        with self.acc.cond:
            self.acc.cond.notify_all()

    # ------------------------------------------------------------------ outcomes

    def _process_completions(self) -> None:
        while True:
            try:
                batch, result, error = self._completions.get_nowait()
            except queue.Empty:
                return
            if batch.finished:
                continue  # failed by a forced close while the call was in flight
            if error is None:
                self._succeed(batch, result)
            else:
                self._retry_or_fail(batch, error)

    def _pause(self, address: str, seconds: float) -> None:
        """Send nothing to ``address`` for ``seconds`` (a quota's throttle)."""
        until = time.monotonic() + seconds
        if until > self._paused.get(address, 0.0):
            self._paused[address] = until

    def _succeed(self, batch: Batch, response: broker_pb2.ProduceResponse) -> None:
        self._acknowledged(batch.tp, response, batch.address, len(batch))
        topic, partition = batch.tp
        base = response.base_offset
        times = batch.timestamps
        with self._counting:
            self.records_acked += len(batch)
        if self.txn is not None:
            self.txn.count(batch.tp, len(batch))
        batch.base_offset = base
        batch.outcome.succeed(Acknowledged(topic, partition, base, times))
        self.acc.release(batch)
        if batch.split is not None:
            self._settle_split(batch, None)

    def _retry_or_fail(self, batch: Batch, error: TubeqError) -> None:
        if isinstance(error, BatchTooLarge) and not self.acc.forced and \
                self._split_refused(batch, error):
            return
        if isinstance(error, OutOfOrderSequence) and not self.acc.forced and \
                self._reset_gap(batch, error):
            return
        if error.refresh_metadata:
            self.routes.invalidate(batch.tp.topic)
        if isinstance(error, UnknownTopic):
            topic = batch.tp.topic
            error = confirm_unknown(topic, error, lambda: self.routes.get(topic))
        if isinstance(error, QuotaExceeded) and not self.acc.forced:
            wait_s = max(0.001, float(error.details.get("retry_after_ms", 100)) / 1e3)
            self._pause(batch.address, wait_s)
            batch.attempts -= 1  # told when to come back: not a failure of the batch
            self.acc.requeue(batch, time.monotonic() + wait_s)
            return
        if error.retriable and batch.attempts <= self.retries and not self.acc.forced:
            backoff = min(MAX_BACKOFF_S, self.retry_backoff_s * (2 ** max(0, batch.attempts - 1)))
            event(log, "producer.retry", logging.INFO, topic=batch.tp.topic,
                  partition=batch.tp.partition, attempt=batch.attempts, error=error.code,
                  backoff_s=round(backoff, 3))
            self.acc.requeue(batch, time.monotonic() + backoff)
            return
        self.fail(batch, error)

    def fail(self, batch: Batch, error: TubeqError, in_flight: bool = True) -> None:
        """Fail every record future of ``batch`` with ``error`` and finish the batch."""
        if self.txn is not None:
            self.txn.failed(error)
        elif self._seq is not None and batch.producer_id >= 0:
            self._seq.fresh(batch.tp)
        event(log, "producer.batch_failed", logging.WARNING, topic=batch.tp.topic,
              partition=batch.tp.partition, records=len(batch), error=error.code,
              message=error.message)
        if batch.outcome.state == PENDING:
            with self._counting:
                self.records_failed += len(batch)
        batch.outcome.fail(error)
        self.acc.release(batch, in_flight)
        if batch.split is not None:
            self._settle_split(batch, error)

    def _reset_gap(self, batch: Batch, error: OutOfOrderSequence) -> bool:
        """A batch refused as a gap was not stored: stamp it with a fresh producer id and
        sequence 0 (module docstring). False when that cannot be done: it fails as it is."""
        expected = error.details.get("expected")
        if self._seq is None or self.txn is not None or not isinstance(expected, int) or \
                batch.base_sequence <= expected or not batch.payload or \
                not self._seq.current(batch.tp, batch.producer_id):
            return False
        try:
            pid = self._seq.restart(batch.tp, len(batch))
        except TubeqError:
            return False
        event(log, "producer.sequence_reset", logging.WARNING, topic=batch.tp.topic,
              partition=batch.tp.partition, expected=expected, sent=batch.base_sequence,
              producer_id=pid)
        batch.producer_id, batch.base_sequence = pid, 0
        batch.payload = restamp_request(joined(batch.payload), pid, 0, 0)
        batch.attempts -= 1
        self.acc.requeue(batch, time.monotonic())
        return True

    def fail_all(self, error: TubeqError) -> None:
        """Fail every unfinished batch, queued and in flight (forced close, crash)."""
        queued = set(self.acc.abort_queued())
        for batch in self.acc.incomplete():
            self.fail(batch, error, in_flight=batch not in queued)

