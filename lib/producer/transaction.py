"""A transactional producer's side of Kafka's KIP-98 protocol: its instance, its transaction
and the calls to the coordinator on the active master (docs/transactions.md).

States: ``ready`` (no transaction open) → ``begin()`` → ``open`` → ``commit()``/``abort()``
(``ending``: its records flushed, then EndTxn) → ``ready``. A batch that fails for good
inside a transaction makes it ``abortable``: its records may or may not be stored, so only
``abort()`` may end it. ``fenced`` is final: a newer
instance of the transactional_id took over (or the coordinator aborted this one's transaction
on its timeout, bumping the epoch); every later call raises ProducerFenced and the producer
must be closed.

The sender thread registers partitions (``add``) before their first batch of a transaction is
sealed: the partitions ready in one sender turn go in one AddPartitionsToTxn call. Every end
of a transaction bumps the epoch (KIP-890 part 2): the coordinator answers the producer id and
epoch to go on with, and every partition's sequence starts again at 0.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from lib.errors import (
    ConcurrentTransactions,
    InvalidTxnState,
    ProducerFenced,
    TubeqError,
)
from lib.proto import broker_pb2, master_pb2, master_pb2_grpc
from lib.rpc import MasterClient, invoke
from lib.types import TopicPartition
from lib.wire_errors import error_class

READY, OPEN, ENDING = "ready", "open", "ending"
ABORTABLE, FENCED = "abortable", "fenced"
RETRY_FIRST_S, RETRY_MAX_S = 0.02, 0.5


class Transactions:
    """One transactional_id's instance (module docstring). Thread-safe."""

    def __init__(self, master: MasterClient, transactional_id: str, timeout_ms: int,
                 client_id: str, request_timeout_s: float) -> None:
        self.transactional_id = transactional_id
        self._master, self._timeout_ms = master, timeout_ms
        self._client_id, self._request_timeout_s = client_id, request_timeout_s
        self._lock = threading.Lock()
        self.state = READY
        self.error: TubeqError | None = None  # why the transaction is abortable or fenced
        self.producer_id, self.epoch = -1, -1
        self.added: set[TopicPartition] = set()
        self.offsets_added = False  # send_offsets joined the coordinator's record
        self.acked: dict[TopicPartition, int] = {}  # records acknowledged per partition
        self.synced = False  # sync() passed for every record acknowledged so far

    # -- the coordinator's calls ---------------------------------------------------------

    def init(self) -> tuple[int, int]:
        """InitProducerId: this instance's producer id and epoch; every older instance of the
        transactional_id is fenced and its open transaction aborted first."""
        response = self._call("InitProducerId", master_pb2.InitProducerIdRequest(
            client_id=self._client_id, transactional_id=self.transactional_id,
            transaction_timeout_ms=self._timeout_ms))
        self.producer_id, self.epoch = response.producer_id, response.producer_epoch
        return self.producer_id, self.epoch

    def add(self, tps: Iterable[TopicPartition]) -> None:
        """Register partitions with the open transaction before their first batch (the
        sender thread). ProducerFenced makes this instance fenced."""
        new = sorted(set(tps) - self.added)
        if not new:
            return
        with self._lock:
            if self.state == FENCED:
                raise self.error
            pid, epoch = self.producer_id, self.epoch
        try:
            self._call("AddPartitionsToTxn", master_pb2.AddPartitionsToTxnRequest(
                transactional_id=self.transactional_id, producer_id=pid, producer_epoch=epoch,
                partitions=[master_pb2.TxnTopicPartition(topic=t, partition=p)
                            for t, p in new]))
        except ProducerFenced as exc:
            self.fence(exc)
            raise
        self.added.update(new)

    def add_offsets(self, group: str, offsets: dict[TopicPartition, int]) -> None:
        """AddOffsetsToTxn: the group's offsets join the transaction at the coordinator,
        which commits them with its markers (before the brokers are told: the caller's
        next step)."""
        try:
            self._call("AddOffsetsToTxn", master_pb2.AddOffsetsToTxnRequest(
                transactional_id=self.transactional_id, producer_id=self.producer_id,
                producer_epoch=self.epoch, group=group,
                offsets=[master_pb2.TxnOffset(topic=t, partition=p, offset=o)
                         for (t, p), o in sorted(offsets.items())]))
        except ProducerFenced as exc:
            self.fence(exc)
            raise
        self.offsets_added = True

    def count(self, tp: TopicPartition, records: int) -> None:
        """Records of the transaction acknowledged on ``tp`` (the sender thread)."""
        self.acked[tp] = self.acked.get(tp, 0) + records
        self.synced = False

    def sync(self, per_broker: Callable[[Iterable[TopicPartition], Callable], None],
             timeout_s: float) -> None:
        """Before EndTxn(commit): every partition's leader holds all the records it
        acknowledged in the transaction, on disk (``Broker.SyncTxn``). A copy that crashed
        and lost some (an ``async`` topic's cache) answers TxnRecordsLost: the transaction
        becomes abortable rather than committing without them. ``per_broker`` groups the
        calls by leader and follows moved partitions (OffsetClient.per_broker).

        Done once: a commit() retried after its EndTxn's answer was lost skips it, since
        the brokers forget the transaction's records as soon as its markers are written."""
        if self.synced:
            return
        acked = dict(self.acked)

        def call(stub: Any, topic: str, parts: list[int]) -> None:
            req = broker_pb2.SyncTxnRequest(
                topic=topic, producer_id=self.producer_id, producer_epoch=self.epoch,
                partitions=[broker_pb2.SyncTxnPartition(
                    partition=p, records=acked[TopicPartition(topic, p)]) for p in parts])
            for r in invoke(stub.SyncTxn, req, timeout_s).results:
                if r.error_code:
                    raise error_class(r.error_code)(r.error_message, topic=topic,
                                                    partition=r.partition)
        if acked:
            per_broker(acked, call)
        self.synced = True

    def end(self, commit: bool) -> None:
        """EndTxn (skipped when nothing joined the transaction: nothing to mark), then
        ready again under the epoch the end bumped. A failure leaves the transaction as it
        was, so the same end can be tried again (the coordinator recognises the retry)."""
        if self.added or self.offsets_added:
            try:
                response = self._call("EndTxn", master_pb2.EndTxnRequest(
                    transactional_id=self.transactional_id, producer_id=self.producer_id,
                    producer_epoch=self.epoch, commit=commit))
            except ProducerFenced as exc:
                self.fence(exc)
                raise
            except BaseException:
                self.end_failed()
                raise
            self.producer_id, self.epoch = response.producer_id, response.producer_epoch
        with self._lock:
            self.state, self.error = READY, None
            self.added, self.offsets_added, self.acked = set(), False, {}
            self.synced = False

    def _call(self, method: str, request):
        """A coordinator call, retried through ConcurrentTransactions (the last transaction's
        markers are being written) within the request timeout; MasterClient.call follows
        the active master and retries a lost answer, which every one of these calls
        tolerates."""
        deadline = time.monotonic() + self._request_timeout_s
        delay = RETRY_FIRST_S
        while True:
            left = max(0.05, deadline - time.monotonic())
            try:
                return self._master.call(master_pb2_grpc.MasterStub, method, request,
                                         timeout=left)
            except ConcurrentTransactions:
                if time.monotonic() + delay >= deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_S)

    # -- the user's calls ----------------------------------------------------------------

    def begin(self) -> None:
        with self._lock:
            self._check_alive()
            if self.state != READY:
                raise InvalidTxnState(
                    f"begin(): transactional_id {self.transactional_id!r} already has a "
                    "transaction open: commit() or abort() it first", state=self.state)
            self.state = OPEN

    def check_send(self) -> None:
        """A send belongs in an open transaction."""
        state = self.state
        if state == OPEN:
            return
        with self._lock:
            self._check_alive()
            if self.state == READY:
                raise InvalidTxnState(
                    f"send() outside a transaction: call begin() first (the producer of "
                    f"transactional_id {self.transactional_id!r} only sends in one)",
                    state=self.state)
            if self.state == ABORTABLE:
                raise InvalidTxnState(
                    f"the transaction of {self.transactional_id!r} failed and can only be "
                    f"aborted: {self.error}", state=self.state)
            if self.state == ENDING:
                raise InvalidTxnState("send() while the transaction is being committed or "
                                      "aborted", state=self.state)

    def start_end(self, commit: bool) -> None:
        """commit()/abort() begins: sends are refused from here on."""
        word = "commit" if commit else "abort"
        with self._lock:
            self._check_alive()
            if self.state in (READY, ENDING):
                raise InvalidTxnState(
                    f"{word}() with no transaction open: call begin() first" if self.state
                    == READY else f"{word}(): the transaction is already being ended",
                    state=self.state)
            self.state = ENDING
        if commit:
            self.check_commit()

    def end_failed(self) -> None:
        """The records could not all be sent (a flush timed out): the end may be tried
        again."""
        with self._lock:
            if self.state == ENDING:
                self.state = ABORTABLE if self.error is not None else OPEN

    def check_commit(self) -> None:
        """InvalidTxnState when a send of the transaction failed: it can only be aborted."""
        with self._lock:
            if self.error is None or self.state == FENCED:
                self._check_alive()
                return
            self.state = ABORTABLE
            raise InvalidTxnState(
                f"cannot commit the transaction of {self.transactional_id!r}: a send failed "
                f"({self.error}); abort() it", state=ABORTABLE)

    def failed(self, error: TubeqError) -> None:
        """A batch of the transaction failed for good (the sender thread)."""
        if isinstance(error, ProducerFenced):
            self.fence(error)
            return
        with self._lock:
            if self.state == OPEN:
                self.state = ABORTABLE
            if self.state in (ABORTABLE, ENDING) and self.error is None:
                self.error = error

    def fence(self, error: ProducerFenced) -> None:
        with self._lock:
            self.state, self.error = FENCED, error

    def _check_alive(self) -> None:
        if self.state == FENCED:
            raise ProducerFenced(
                f"this producer of transactional_id {self.transactional_id!r} is fenced "
                f"({self.error}): close it", transactional_id=self.transactional_id)
