"""The broker's defence against hanging transactions (KIP-890's concern; docs/transactions.md).

A transaction stays open on a partition until a marker ends it, and read_committed readers
stop at its first record meanwhile. The coordinator writes the markers of every transaction it
knows of, but a partition can hold one it will never end: a zombie's batch that arrived after
the abort marker while the marker's fence was lost to a restart, or a batch flagged
transactional by a producer id no transactional_id holds. So every ``check_s`` the broker
lists the transactions open on the partitions it leads for longer than ``after_s`` and asks
the active master about them in one call (``Master.CheckOpenTxns``); the coordinator answers
whether it will still end each (txn_decisions.still_open), and the broker writes an abort
marker itself for each it will not. A transaction still open is asked about again
``after_s`` later; a failed call is tried again at the next check.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

from broker.topics import TopicManager
from lib.errors import TubeqError
from lib.logs import event

log = logging.getLogger(__name__)
Query = tuple[int, int, str, int]  # producer id, epoch, topic, partition
MAX_QUERIES = 1000  # per call: the rest wait for the next check


class HangingTxns:
    def __init__(self, topics: TopicManager, ask: Callable[[list[Query]], list[bool]],
                 after_s: float, check_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``ask``: the master's answer per query (raises a TubeqError when none came)."""
        self.topics, self.ask, self.after_s, self.check_s = topics, ask, after_s, check_s
        self._clock = clock
        self._next_check = 0.0
        self._asked: dict[Query, float] = {}  # when each was last found still open
        self.aborted = 0  # transactions this broker aborted itself

    def maybe_check(self) -> None:
        """Check now if ``check_s`` passed since the last check (the master link's thread
        calls this after each heartbeat)."""
        now = self._clock()
        if now >= self._next_check:
            self._next_check = now + self.check_s
            self.check(now)

    def check(self, now: float) -> int:
        """Ask about every transaction open too long; abort those the coordinator will not
        end. Returns how many were aborted."""
        due = self._due(now)
        if not due:
            return 0
        try:
            answers = self.ask(due)
        except TubeqError as err:
            event(log, "txn.hanging_check_failed", logging.WARNING, error=err.message)
            return 0
        aborted = 0
        for query, still_open in zip(due, answers, strict=True):
            if still_open:
                self._asked[query] = now
            elif self._abort(query):
                aborted += 1
        self.aborted += aborted
        return aborted

    def _due(self, now: float) -> list[Query]:
        due: list[Query] = []
        seen: set[Query] = set()
        for topic, partition, store in self.topics.snapshot():
            if partition not in self._led(topic):
                continue
            try:
                open_txns = store.producers.open_txns(partition)
            except TubeqError:
                continue  # the store is being reopened or closed: next time
            for pid, txn in open_txns:
                query = (pid, txn.epoch, topic, partition)
                seen.add(query)
                if now - txn.opened_at >= self.after_s and \
                        now - self._asked.get(query, -self.after_s) >= self.after_s:
                    due.append(query)
        self._asked = {q: t for q, t in self._asked.items() if q in seen}
        return due[:MAX_QUERIES]

    def _led(self, topic: str) -> list[int]:
        try:
            return self.topics.led(topic)
        except TubeqError:
            return []

    def _abort(self, query: Query) -> bool:
        pid, epoch, topic, partition = query
        try:
            store = self.topics.store_for(topic, partition)
            role = self.topics.role(topic, partition)
            leader_epoch = role.leader_epoch if role is not None and role.replicated else 0
            offset = store.producers.write_marker(partition, pid, epoch, False,
                                                  leader_epoch=leader_epoch)
        except TubeqError as err:
            event(log, "txn.hanging_abort_failed", logging.WARNING, topic=topic,
                  partition=partition, producer_id=pid, epoch=epoch, error=err.message)
            return False
        self.topics.notify(topic)  # read_committed waiters: the stable offset moved
        event(log, "txn.hanging_aborted", logging.WARNING, topic=topic, partition=partition,
              producer_id=pid, epoch=epoch, marker=offset)
        return offset is not None
