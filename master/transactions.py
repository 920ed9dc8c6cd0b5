"""The transaction coordinator on the active master (Kafka's KIP-98 coordinator, its state in
the masters' Raft state: docs/transactions.md).

Each call reads the transactional_id's record (master/state_txns.py), asks
master/txn_decisions.py what comes next and writes that record through Raft, so every master
holds it before the call is answered, and a failover loses nothing. Calls of one
transactional_id are serialised here by a lock (striped by the id's hash); the write also
carries the record's ``seq`` as read, so a change made meanwhile (a timeout's abort) refuses
it rather than being lost.

Once a transaction is PREPARE_* (EndTxn, an InitProducerId that found one ONGOING, its
timeout, an admin's abort) the decision is final: the coordinator's thread has the marker
writer (master/txn_markers.py) write every marker, then writes COMPLETE_*. The calls that
started it wait for that, up to ``transaction_end_wait_ms`` and their own deadline, and
answer ConcurrentTransactions (retriable) if it takes longer: retrying the same call then
finds the transaction COMPLETE.

The thread runs on every master but acts only while this one is active: it writes markers,
aborts transactions ONGOING past their timeout (epoch bumped: the markers fence the old
instance everywhere they land) about every ``transaction_check_interval_ms``, and forgets
transactional ids unused for ``transactional_id_expiration_ms``. A master that becomes
active resumes every PREPARE_* transaction from its record.
"""
from __future__ import annotations

import logging
import secrets
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lib.errors import ConcurrentTransactions, TubeqError, UnknownPartition, UnknownTopic
from lib.logs import event
from master.brokers import wall_ms
from master.half_decisions import (
    ROLLBACK,
    checks_due,
    next_check,
    on_check_result,
    on_half_begin,
)
from master.producer_ids import ProducerIdBlocks
from master.state import MetaState
from master.state_txns import PREPARING
from master.txn_decisions import (
    aborting,
    after_end,
    check_instance,
    completed,
    expired,
    on_add,
    on_add_offsets,
    on_admin_abort,
    on_end,
    on_init,
    still_open,
    timed_out,
    timeout_of,
)
from master.txn_markers import MarkerWriter

log = logging.getLogger(__name__)
LOCK_STRIPES = 64
EXPIRE_BATCH = 1000  # ids forgotten per command
# Half messages checked back per round (a round every transaction_check_interval_ms): the rest
# wait for the next round, so a backlog of unknown outcomes never floods the checkers.
CHECKS_PER_ROUND = 500


@dataclass(frozen=True)
class TxnSettings:
    """From MasterConfig (docs/operations.md)."""

    timeout_ms: int = 60_000  # an InitProducerId that asks for 0
    max_timeout_ms: int = 900_000
    id_expiration_ms: int = 7 * 24 * 3600 * 1000
    check_interval_ms: int = 1000
    end_wait_ms: int = 10_000
    check_back_after_ms: int = 6000  # RocketMQ's half messages (master/half_messages.py)
    check_back_interval_ms: int = 10_000
    check_back_max: int = 15


class TransactionCoordinator:
    def __init__(self, settings: TxnSettings, state: MetaState,
                 write: Callable[[dict[str, Any]], Any], producer_ids: ProducerIdBlocks,
                 markers: MarkerWriter, is_active: Callable[[], bool]) -> None:
        """``write``: replicate a state command (NotLeader unless active)."""
        self.settings, self._state, self._write = settings, state, write
        self._producer_ids, self._markers, self._is_active = producer_ids, markers, is_active
        self._locks = [threading.Lock() for _ in range(LOCK_STRIPES)]
        self._ended = threading.Condition()  # notified when a transaction completes
        self._wake = threading.Event()
        self._stopped = threading.Event()
        # Half messages' checks handed to the group's producers (PollTxnChecks): group ->
        # transactional_id -> the check; in memory, on the active master only (a check lost
        # with it is asked again at the next interval).
        self._checks: dict[str, dict[str, dict[str, Any]]] = {}
        self._checks_ready = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True, name="txn-coordinator")

    def _lock(self, tid: str) -> threading.Lock:
        return self._locks[zlib.crc32(tid.encode()) % LOCK_STRIPES]

    # -- calls ---------------------------------------------------------------------------

    def init(self, tid: str, asked_timeout_ms: int, wait_s: float) -> tuple[int, int]:
        """InitProducerId with a transactional_id: (producer id, epoch) of its new instance,
        after aborting a transaction the last one left open."""
        timeout = timeout_of(asked_timeout_ms, self.settings.timeout_ms,
                             self.settings.max_timeout_ms)
        deadline = time.monotonic() + wait_s
        while True:
            with self._lock(tid):
                record = self._state.txn(tid)
                step, new = on_init(record, timeout, self._producer_ids.take)
                if step == "write":
                    done = self._put(tid, record, new)
                    event(log, "txn.init", transactional_id=tid,
                          producer_id=done["producer_id"], epoch=done["epoch"])
                    return done["producer_id"], done["epoch"]
                if step == "abort":
                    self._put(tid, record, new)
                    event(log, "txn.abort_on_init", transactional_id=tid,
                          epoch=new["epoch"], partitions=len(new["partitions"]))
            self._await_end(tid, deadline)

    def add_partitions(self, tid: str, producer_id: int, epoch: int,
                       partitions: list[tuple[str, int]]) -> None:
        """AddPartitionsToTxn: the partitions join the transaction (it begins: ONGOING)."""
        self._check_partitions(partitions)
        with self._lock(tid):
            record = check_instance(tid, self._state.txn(tid), producer_id, epoch)
            new = on_add(record, partitions, wall_ms())
            if new is not None:
                self._put(tid, record, new)

    def add_offsets(self, tid: str, producer_id: int, epoch: int, group: str,
                    offsets: list[tuple[str, int, int]]) -> None:
        """AddOffsetsToTxn: a group's offsets join the transaction (it begins: ONGOING)."""
        self._check_partitions([(t, p) for t, p, _ in offsets])
        with self._lock(tid):
            record = check_instance(tid, self._state.txn(tid), producer_id, epoch)
            new = on_add_offsets(record, group, offsets, wall_ms())
            if new is not None:
                self._put(tid, record, new)

    def open_on(self, queries: list[tuple[int, int, str, int]]) -> list[bool]:
        """CheckOpenTxns: for each (producer id, epoch, topic, partition) a broker holds a
        transaction open on, whether the coordinator will still end it there
        (txn_decisions.still_open)."""
        by_producer = {r["producer_id"]: r for r in self._state.txns().values()}
        return [still_open(by_producer.get(pid), pid, epoch, topic, partition)
                for pid, epoch, topic, partition in queries]

    # -- RocketMQ's half messages (master/half_decisions.py) ---------------------------------

    def begin_half(self, group: str, topic: str, partition: int) -> tuple[str, int, int]:
        """BeginHalfMessage: a one-record transaction of the group, ONGOING at once on its
        partition: (its transactional_id, producer id, epoch)."""
        self._check_partitions([(topic, partition)])
        tid = f"{group}.{secrets.token_hex(8)}"
        s = self.settings
        record = on_half_begin(group, topic, partition, self._producer_ids.take(), wall_ms(),
                               s.max_timeout_ms, s.check_back_after_ms)
        with self._lock(tid):
            done = self._put(tid, None, record)
        return tid, done["producer_id"], done["epoch"]

    def half_group(self, tid: str) -> str:
        """The producer group a half message belongs to ("" when it is not one)."""
        record = self._state.txn(tid)
        return "" if record is None or "check" not in record else record["check"]["group"]

    def poll_checks(self, group: str, wait_s: float, limit: int = 100) -> list[dict[str, Any]]:
        """PollTxnChecks: the group's half messages to ask about, each handed out once
        (waiting up to ``wait_s`` for one)."""
        deadline = time.monotonic() + wait_s
        with self._checks_ready:
            while not self._checks.get(group):
                left = deadline - time.monotonic()
                if left <= 0 or self._stopped.is_set():
                    return []
                self._checks_ready.wait(left)
            pending = self._checks[group]
            taken = [pending.pop(tid) for tid in sorted(pending)[:limit]]
            if not pending:
                del self._checks[group]
            return taken

    def resolve_check(self, tid: str, producer_id: int, epoch: int, outcome: str) -> str:
        """ResolveTxnCheck: a producer's answer; the step taken (commit, rollback, unknown:
        asked again later, stale: it ended meanwhile)."""
        with self._lock(tid):
            record = self._state.txn(tid)
            step, new = on_check_result(record, producer_id, epoch, outcome)
            if new is not None:
                self._put(tid, record, new)
        event(log, "txn.check_resolved", transactional_id=tid, outcome=outcome, step=step)
        return step

    def _issue_checks(self) -> None:
        """Hand out the checks that are due; roll back half messages asked too often."""
        s = self.settings
        for tid in checks_due(self._state.txns(), wall_ms())[:CHECKS_PER_ROUND]:
            with self._lock(tid):
                record = self._state.txn(tid)
                if record is None or tid not in checks_due({tid: record}, wall_ms()):
                    continue
                step, new = next_check(record, wall_ms(), s.check_back_interval_ms,
                                       s.check_back_max)
                self._put(tid, record, new)
            if step == ROLLBACK:
                event(log, "txn.check_back_exhausted", logging.WARNING, transactional_id=tid,
                      checks=record["check"]["checks"])
                continue
            topic, partition = record["partitions"][0]
            with self._checks_ready:
                self._checks.setdefault(new["check"]["group"], {})[tid] = {
                    "transactional_id": tid, "producer_id": new["producer_id"],
                    "producer_epoch": new["epoch"], "topic": topic, "partition": partition,
                    "attempt": new["check"]["checks"]}
                self._checks_ready.notify_all()

    def end(self, tid: str, producer_id: int, epoch: int, commit: bool, wait_s: float,
            keep_epoch: bool = False) -> tuple[int, int]:
        """EndTxn: the decision, replicated, then every marker written (waited for); the
        producer id and epoch the caller goes on with (bumped: txn_decisions.on_end)."""
        deadline = time.monotonic() + wait_s
        with self._lock(tid):
            record = self._state.txn(tid)
            step, new = on_end(tid, record, producer_id, epoch, commit,
                               self._producer_ids.take, keep_epoch)
            if step == "write":
                record = self._put(tid, record, new)
                event(log, "txn.decided", transactional_id=tid, commit=commit,
                      partitions=len(new["partitions"]), epoch=new["epoch"])
        if step != "done":
            self._await_end(tid, deadline)
        return after_end(self._state.txn(tid), producer_id, epoch)

    def abort(self, tid: str, wait_s: float, audit: dict[str, Any]) -> dict[str, Any]:
        """An admin's AbortTransaction: the record once the abort's markers are written."""
        deadline = time.monotonic() + wait_s
        with self._lock(tid):
            record = self._state.txn(tid)
            step, new = on_admin_abort(tid, record)
            if step == "write":
                self._put(tid, record, new, audit={
                    **audit, "action": "abort_transaction", "target": tid,
                    "details": f"producer {new['producer_id']} epoch {new['epoch']}, "
                               f"{len(new['partitions'])} partition(s)"})
        self._await_end(tid, deadline)
        return self._state.txn(tid) or {}

    def _put(self, tid: str, old: dict[str, Any] | None, new: dict[str, Any],
             audit: dict[str, Any] | None = None) -> dict[str, Any]:
        cmd = {"op": "txn_write", "time_ms": wall_ms(), "transactional_id": tid,
               "seq": 0 if old is None else old["seq"], "record": new}
        if audit:
            cmd["audit"] = audit
        record = self._write(cmd)
        if record["state"] in PREPARING:
            self._wake.set()
        return record

    def _await_end(self, tid: str, deadline: float) -> None:
        """Until the transaction is no longer PREPARE_*, or ConcurrentTransactions at the
        deadline."""
        while True:
            record = self._state.txn(tid)
            if record is None or record["state"] not in PREPARING:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise ConcurrentTransactions(
                    f"the {record['state']} of transactional_id {tid!r} is decided and its "
                    f"markers are still being written to {len(record['partitions'])} "
                    "partition(s): retry the same call", transactional_id=tid,
                    state=record["state"])
            with self._ended:
                self._ended.wait(min(left, 0.1))

    def _check_partitions(self, partitions: list[tuple[str, int]]) -> None:
        for topic, partition in partitions:
            record = self._state.topic(topic)
            if record is None:
                raise UnknownTopic(f"unknown topic {topic!r}", topic=topic)
            if partition >= len(record["placement"]):
                raise UnknownPartition(
                    f"topic {topic!r} has no partition {partition} (it has "
                    f"{len(record['placement'])})", topic=topic, partition=partition)

    # -- the coordinator's thread (acts on the active master only) -------------------------

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        """Look at once (this master just became active: resume what is PREPARE_*)."""
        self._wake.set()

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()
        with self._checks_ready:
            self._checks_ready.notify_all()  # pollers return
        self._thread.join(timeout=10)

    def _run(self) -> None:
        interval = self.settings.check_interval_ms / 1000
        next_check, retry_at = 0.0, None
        while not self._stopped.is_set():
            now = time.monotonic()
            waits = [next_check - now] + ([retry_at - now] if retry_at is not None else [])
            self._wake.wait(max(0.0, min(waits)))
            self._wake.clear()
            if self._stopped.is_set():
                break
            if not self._is_active():  # a standby: look again in a while
                self._markers.forget()
                with self._checks_ready:
                    self._checks.clear()
                next_check, retry_at = time.monotonic() + interval, None
                continue
            try:
                if time.monotonic() >= next_check:
                    next_check = time.monotonic() + interval
                    self._abort_timed_out()
                    self._issue_checks()
                    self._expire()
                retry_at = self._write_markers()
            except TubeqError as err:  # lost the leadership, no quorum: the next turn
                event(log, "txn.coordinator_round_failed", logging.WARNING, error=err.message)
                retry_at = time.monotonic() + interval
            except Exception:  # the thread must survive anything
                log.exception("txn.coordinator_round_crashed")
                retry_at = time.monotonic() + interval

    def _write_markers(self) -> float | None:
        done, retry_at = self._markers.round(time.monotonic())
        for tid, record in done:
            with self._lock(tid):
                current = self._state.txn(tid)
                if current is None or current["seq"] != record["seq"]:
                    continue  # changed meanwhile: never expected while PREPARE_*
                final = self._put(tid, current, completed(current))
            event(log, "txn.completed", transactional_id=tid, state=final["state"],
                  partitions=len(final["partitions"]), epoch=final["epoch"])
            if final.get("oneshot"):  # a half message: nothing to keep once it ended
                self._write({"op": "txn_expire", "time_ms": wall_ms(),
                             "transactional_ids": [tid], "before_ms": wall_ms() + 1})
        if done:
            with self._ended:
                self._ended.notify_all()
        return retry_at

    def _abort_timed_out(self) -> None:
        for tid in timed_out(self._state.txns(), wall_ms()):
            with self._lock(tid):
                record = self._state.txn(tid)
                if record is None or tid not in timed_out({tid: record}, wall_ms()):
                    continue
                self._put(tid, record, aborting(record))
            event(log, "txn.timed_out", logging.WARNING, transactional_id=tid,
                  producer_id=record["producer_id"], timeout_ms=record["timeout_ms"],
                  partitions=len(record["partitions"]))

    def _expire(self) -> None:
        now = wall_ms()
        gone = expired(self._state.txns(), now, self.settings.id_expiration_ms)
        for i in range(0, len(gone), EXPIRE_BATCH):
            removed = self._write({"op": "txn_expire", "time_ms": now,
                                   "transactional_ids": gone[i:i + EXPIRE_BATCH],
                                   "before_ms": now - self.settings.id_expiration_ms})
            event(log, "txn.ids_expired", count=len(removed))
