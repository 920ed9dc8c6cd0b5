"""The marker writer of the transaction coordinator: writes the commit or abort marker of every
transaction in PREPARE_COMMIT / PREPARE_ABORT into each partition it added, on that
partition's leader (``Broker.WriteTxnMarkers``, the cluster credential), until every one is
written; then the transaction is COMPLETE_* (master/transactions.py writes that).

A transaction's consumer offsets (AddOffsetsToTxn) go with the markers, to the leaders of
their partitions: a target is a partition ``(topic, partition)`` to mark, or a group's offset
``(topic, partition, group)`` to commit or drop there; both are written, retried and counted
alike.

Runs on the active master only, driven by the coordinator's thread: one :meth:`round` sends
every partition that is due, grouped into one request per (transaction, leader's address),
the requests side by side. A partition whose broker answered an error (NOT_LEADER,
PARTITION_NOT_HOSTED, UNAVAILABLE, a call that timed out...) is sent again after a backoff
(master/txn_decisions.py ``marker_retry_ms``), to the leader the routes name then.

What is written is kept in memory only: a newly active master (a failover, mid-way through
the markers) starts every PREPARE_* transaction over from its record. That is safe because a
marker is idempotent: a partition that already has it answers offset -1 (nothing of the
producer open there), and so does one the transaction added but never wrote to. A
partition's answer of PRODUCER_FENCED (a newer epoch of the producer wrote there, which
ended what this marker would end) counts as written; any other error is retried, so a
decided transaction is never half applied; one that cannot complete shows in
``tubeq transaction list`` (Admin.ListTransactions) as PREPARE_* growing old.

Topic gone: a partition of a deleted topic (or one beyond its count) has nothing to mark.

Threading: :meth:`round` and :meth:`forget` are called by one thread (the coordinator's);
the broker calls run on BrokerCalls' executor.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lib.logs import event
from lib.proto import broker_pb2 as bpb
from master.state import MetaState
from master.state_txns import PREPARE_COMMIT, PREPARING
from master.txn_decisions import marker_retry_ms

log = logging.getLogger(__name__)
FENCED = "PRODUCER_FENCED"
TopicPartition = tuple[str, int]
Target = tuple  # (topic, partition): a marker; (topic, partition, group): an offset
# (address, producer id, epoch, commit, partitions, offsets as (group, topic, partition,
# offset)) -> per-target results
Send = Callable[[str, int, int, bool, list[TopicPartition], list[tuple[str, str, int, int]]],
                list[bpb.TxnMarkerResult]]


@dataclass
class _Progress:
    """What one PREPARE_* record's markers have done on this master."""

    written: set[Target] = field(default_factory=set)
    failures: dict[Target, int] = field(default_factory=dict)
    due: dict[Target, float] = field(default_factory=dict)  # monotonic seconds


class MarkerWriter:
    def __init__(self, state: MetaState, leader_address: Callable[[str, int], str],
                 send: Send, each: Callable[[dict[Any, Callable[[], Any]]], dict[Any, Any]]
                 ) -> None:
        """``leader_address(topic, partition)``: the address of the partition's leader now
        ("" when unknown); ``send``: one WriteTxnMarkers call (raises a TubeqError);
        ``each``: runs jobs side by side (BrokerCalls.each)."""
        self._state, self._leader_address = state, leader_address
        self._send, self._each = send, each
        self._progress: dict[tuple, _Progress] = {}

    def forget(self) -> None:
        """Drop what this master knew (it stopped being active)."""
        self._progress.clear()

    def round(self, now: float) -> tuple[list[tuple[str, dict[str, Any]]], float | None]:
        """Send every due marker of every PREPARE_* transaction. Returns the records now
        fully marked (to complete: (transactional_id, record as read)) and when the next
        retry is due (None: nothing waits)."""
        preparing = {tid: r for tid, r in self._state.txns().items() if r["state"] in PREPARING}
        keys = {tid: _key(tid, r) for tid, r in preparing.items()}
        for gone in set(self._progress) - set(keys.values()):
            del self._progress[gone]
        jobs: dict[tuple[str, str], Callable[[], Any]] = {}
        sent: dict[tuple[str, str], list[Target]] = {}
        for tid, record in preparing.items():
            progress = self._progress.setdefault(keys[tid], _Progress())
            for address, parts in self._due(record, progress, now).items():
                jobs[(tid, address)] = self._job(address, record, parts)
                sent[(tid, address)] = parts
        for (tid, address), outcome in self._each(jobs).items():
            self._note(tid, self._progress[keys[tid]], address, sent[(tid, address)],
                       outcome, now)
        done = [(tid, r) for tid, r in preparing.items()
                if self._progress[keys[tid]].written >= _targets(r)]
        waits = [t for p in self._progress.values() for tp, t in p.due.items()
                 if tp not in p.written]
        return done, min(waits) if waits else None

    def _due(self, record: dict[str, Any], progress: _Progress,
             now: float) -> dict[str, list[Target]]:
        """address -> the targets to send there now (those with nothing to mark are
        counted as written)."""
        out: dict[str, list[Target]] = {}
        for tp in sorted(_targets(record) - progress.written):
            if progress.due.get(tp, 0.0) > now:
                continue
            topic = self._state.topic(tp[0])
            if topic is None or tp[1] >= len(topic["placement"]):
                progress.written.add(tp)  # deleted since: nothing left to mark
                continue
            address = self._leader_address(tp[0], tp[1])
            if not address:
                self._failed(progress, tp, now)
                continue
            out.setdefault(address, []).append(tp)
        return out

    def _job(self, address: str, record: dict[str, Any],
             targets: list[Target]) -> Callable[[], list[bpb.TxnMarkerResult]]:
        commit = record["state"] == PREPARE_COMMIT
        parts = [t for t in targets if len(t) == 2]
        offset_of = {(t, p, g): o for g, t, p, o in record.get("offsets", [])}
        offsets = [(t[2], t[0], t[1], offset_of[t]) for t in targets if len(t) == 3]
        return lambda: self._send(address, record["producer_id"], record["epoch"], commit,
                                  parts, offsets)

    def _note(self, tid: str, progress: _Progress, address: str, sent: list[Target],
              outcome: Any, now: float) -> None:
        """Record a call's answer: written partitions, and backoff for the others."""
        if isinstance(outcome, Exception):  # the whole call failed: its partitions wait
            event(log, "txn.markers_failed", logging.INFO, transactional_id=tid,
                  broker=address, error=str(outcome)[:200])
            for tp in sent:
                self._failed(progress, tp, now)
            return
        answered = {_target_of(r) for r in outcome}
        for tp in sent:
            if tp not in answered:  # never expected: try again
                self._failed(progress, tp, now)
        for result in outcome:
            tp = _target_of(result)
            if not result.error_code or result.error_code == FENCED:
                if result.error_code:
                    event(log, "txn.marker_fenced", logging.WARNING, transactional_id=tid,
                          topic=tp[0], partition=tp[1], error=result.error_message[:200])
                progress.written.add(tp)
                progress.failures.pop(tp, None)
                progress.due.pop(tp, None)
            else:
                event(log, "txn.marker_retry", logging.INFO, transactional_id=tid,
                      topic=tp[0], partition=tp[1], error=result.error_code,
                      failures=progress.failures.get(tp, 0) + 1)
                self._failed(progress, tp, now)

    @staticmethod
    def _failed(progress: _Progress, tp: Target, now: float) -> None:
        failures = progress.failures[tp] = progress.failures.get(tp, 0) + 1
        progress.due[tp] = now + marker_retry_ms(failures) / 1000


def _key(tid: str, record: dict[str, Any]) -> tuple:
    """One ending of one transaction (a later one of the same id is another key)."""
    return tid, record["producer_id"], record["epoch"], record["state"], record["seq"]


def _targets(record: dict[str, Any]) -> set[Target]:
    return {(t, p) for t, p in record["partitions"]} | {
        (t, p, g) for g, t, p, _ in record.get("offsets", [])}


def _target_of(result: bpb.TxnMarkerResult) -> Target:
    if result.group:
        return result.topic, result.partition, result.group
    return result.topic, result.partition
