"""RocketMQ's transactional messages on tubeq's transactions (docs/transactions.md):
``Producer(masters, producer_group="orders", check=fn).send_in_transaction(topic, value,
local=fn)``.

1. The active master opens a one-record transaction of the group (``BeginHalfMessage``:
   its own transactional_id, producer id and epoch).
2. The record goes to its partition as that transaction's one batch: a *half message*,
   invisible to read_committed consumers. Its headers carry ``tubeq-txn-id`` (so a checker
   can find it).
3. ``local(message, arg)`` runs the local transaction and returns ``"commit"``,
   ``"rollback"`` or ``"unknown"`` (an exception counts as unknown, as RocketMQ's).
4. Commit or rollback end the transaction (``EndHalfMessage``). Unknown leaves it open: the
   master checks back with a live producer of the group that has a ``check`` function,
   ``transaction_check_back_after_ms`` after it began and then every
   ``transaction_check_back_interval_ms``, at most ``transaction_check_back_max`` times, then
   rolls it back. A producer that died after step 2 is covered the same way.

The checker: a thread long-polls the master for the group's checks (``PollTxnChecks``),
finds each half message (at or after its partition's last stable offset: an open
transaction is never below it), calls ``check(message)`` and answers (``ResolveTxnCheck``).
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lib.errors import ProducerFenced, TubeqError, UnknownTransactionalId
from lib.logs import event
from lib.proto import broker_pb2, broker_pb2_grpc, master_pb2, master_pb2_grpc
from lib.records import Record, encode_batch
from lib.records.layout import crc32
from lib.routes import RouteCache
from lib.rpc import ChannelPool, MasterClient, invoke
from lib.types import TopicPartition

log = logging.getLogger("tubeq.producer")
TXN_HEADER = "tubeq-txn-id"
COMMIT, ROLLBACK, UNKNOWN = "commit", "rollback", "unknown"
OUTCOMES = (COMMIT, ROLLBACK, UNKNOWN)
POLL_WAIT_MS = 2000
FIND_BYTES = 64 << 20  # a checker reads at most this far past the stable offset


@dataclass(frozen=True)
class HalfMessage:
    """What ``local`` and ``check`` get: the half message and its transaction."""

    topic: str
    partition: int
    offset: int
    value: bytes
    key: bytes | None
    headers: Mapping[str, bytes]
    transactional_id: str


@dataclass(frozen=True)
class TxnSendResult:
    """What ``send_in_transaction`` returns: the local transaction's outcome (``state``:
    commit, rollback, or unknown: the master will check back) and where the half message
    is."""

    state: str
    topic: str
    partition: int
    offset: int
    transactional_id: str


def outcome_of(answer: Any) -> str:
    """A local or check function's answer as an outcome: anything else is unknown."""
    text = str(getattr(answer, "value", answer)).lower()
    return text if text in OUTCOMES else UNKNOWN


class HalfMessages:
    """A producer group's half messages and, with ``check``, its checker thread."""

    def __init__(self, group: str, master: MasterClient, pool: ChannelPool,
                 routes: RouteCache, timeout_s: float,
                 check: Callable[[HalfMessage], Any] | None,
                 reader: Callable[[], Any] | None) -> None:
        """``reader()`` makes the MessageReader a checker finds half messages with."""
        self.group, self._master, self._pool, self._routes = group, master, pool, routes
        self._timeout_s, self._check, self._make_reader = timeout_s, check, reader
        self._stop = threading.Event()
        self._next = 0  # round robin over partitions for records without key or partition
        self._thread: threading.Thread | None = None
        if check is not None:
            self._thread = threading.Thread(target=self._check_loop, daemon=True,
                                            name=f"tubeq-txn-check-{group}")
            self._thread.start()

    # -- sending -------------------------------------------------------------------------

    def send(self, topic: str, value: bytes, local: Callable[[HalfMessage, Any], Any],
             key: bytes | None, headers: Mapping[str, bytes] | None, partition: int | None,
             arg: Any) -> TxnSendResult:
        p = self._partition(topic, key, partition)
        begun = self._call("BeginHalfMessage", master_pb2.BeginHalfMessageRequest(
            producer_group=self.group, topic=topic, partition=p))
        tid, pid, epoch = begun.transactional_id, begun.producer_id, begun.producer_epoch
        marked = {**(headers or {}), TXN_HEADER: tid.encode()}
        offset = self._produce(topic, p, Record(value, key, headers=marked,
                                                 timestamp=int(time.time() * 1000)),
                               pid, epoch)
        message = HalfMessage(topic, p, offset, value, key, marked, tid)
        try:
            state = outcome_of(local(message, arg))
        except Exception:  # noqa: BLE001 - RocketMQ's rule: the outcome is unknown
            log.exception("txn.local_transaction_failed")
            state = UNKNOWN
        if state != UNKNOWN:
            try:
                self._call("EndHalfMessage", master_pb2.EndHalfMessageRequest(
                    producer_group=self.group, transactional_id=tid, producer_id=pid,
                    producer_epoch=epoch, commit=state == COMMIT))
            except (ProducerFenced, UnknownTransactionalId):
                state = UNKNOWN  # a check ended it first: its answer decided
        return TxnSendResult(state, topic, p, offset, tid)

    def _partition(self, topic: str, key: bytes | None, partition: int | None) -> int:
        route = self._routes.get(topic)
        if partition is not None:
            return partition
        if key is not None:
            return crc32(key) % route.count
        live = [p for p in range(route.count) if route.address(p)] or list(range(route.count))
        self._next += 1
        return live[self._next % len(live)]

    def _produce(self, topic: str, partition: int, record: Record, pid: int, epoch: int) -> int:
        """The half message, acknowledged by every in-sync replica; a retry re-sends the
        same batch (sequence 0), which the broker stores once."""
        batch = encode_batch([record], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                             transactional=True)
        request = broker_pb2.ProduceRequest(topic=topic, partition=partition, batch=batch,
                                            acks_all=True)
        deadline, delay = time.monotonic() + self._timeout_s, 0.05
        while True:
            try:
                address = self._routes.get(topic).address(partition)
                if not address:
                    raise TubeqError(f"no broker hosts {topic}/{partition} right now")
                stub = broker_pb2_grpc.BrokerStub(self._pool.get(address))
                return invoke(stub.Produce, request, self._timeout_s).base_offset
            except TubeqError as exc:
                if not (exc.retriable or exc.refresh_metadata) \
                        or time.monotonic() + delay > deadline:
                    raise
                self._routes.invalidate(topic)
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _call(self, method: str, request: Any) -> Any:
        return self._master.call(master_pb2_grpc.MasterStub, method, request,
                                 timeout=self._timeout_s)

    # -- checking back -------------------------------------------------------------------

    def _check_loop(self) -> None:
        reader = None
        while not self._stop.is_set():
            try:
                checks = self._call("PollTxnChecks", master_pb2.PollTxnChecksRequest(
                    producer_group=self.group, wait_ms=POLL_WAIT_MS)).checks
                if checks and reader is None:
                    reader = self._make_reader()
                for c in checks:
                    self._answer(reader, c)
            except TubeqError as exc:
                event(log, "txn.check_poll_failed", logging.WARNING, group=self.group,
                      error=exc.message)
                self._stop.wait(1.0)
            except Exception:  # the thread must go on
                log.exception("txn.check_loop_crashed")
                self._stop.wait(1.0)
        if reader is not None:
            reader.close()

    def _answer(self, reader: Any, c: master_pb2.TxnCheck) -> None:
        message = self.find(reader, c.topic, c.partition, c.transactional_id)
        if message is None:
            outcome = UNKNOWN  # not found (yet): asked again at the next check
        else:
            try:
                outcome = outcome_of(self._check(message))
            except Exception:  # noqa: BLE001 - the user's check failed: unknown
                log.exception("txn.check_failed")
                outcome = UNKNOWN
        step = self._call("ResolveTxnCheck", master_pb2.ResolveTxnCheckRequest(
            producer_group=self.group, transactional_id=c.transactional_id,
            producer_id=c.producer_id, producer_epoch=c.producer_epoch, outcome=outcome)).step
        event(log, "txn.checked", transactional_id=c.transactional_id, attempt=c.attempt,
              outcome=outcome, step=step)

    @staticmethod
    def find(reader: Any, topic: str, partition: int, tid: str) -> HalfMessage | None:
        """The half message of ``tid``: at or after the partition's last stable offset."""
        tp = TopicPartition(topic, partition)
        bounds = reader.offsets(topic, [partition])[partition]
        pos, read = max(bounds.earliest, bounds.last_stable), 0
        wanted = tid.encode()
        while read < FIND_BYTES and pos < bounds.latest:
            got = reader.read(topic, partition, pos)
            read += max(got.nbytes, 1)
            for r in got.records:
                if r.headers.get(TXN_HEADER) == wanted:
                    return HalfMessage(tp.topic, tp.partition, r.offset, r.value, r.key,
                                       dict(r.headers), tid)
            if got.next_offset <= pos:
                return None
            pos = got.next_offset
        return None

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=POLL_WAIT_MS / 1000 + self._timeout_s)
