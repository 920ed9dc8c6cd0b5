"""A consumer's retries: records it failed on, moved to the group's retry or dead-letter
topic in the same transaction that commits its offsets past them (lib/retry.py has the
names and policy, docs/retry.md the whole story).

Why one transaction: the move and the commit must both happen or neither. A consumer that
crashes before the commit leaves neither: the records are consumed again from the last
committed offset and their handler runs again; a consumer that committed its offsets
without the move would lose them, and one that moved without the commit would have them
twice. Pending moves wait for the consumer's next commit (auto or manual), so a record is
never moved before the offsets that follow it are committed.

The producer is transactional under an id of this consumer instance; its offsets commit is
fenced by the group generation (``send_offsets``), so a zombie member cannot move records of
a partition it lost. A crashed instance's open transaction is aborted by the masters after
``TXN_TIMEOUT_MS``.
"""
from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lib import errors
from lib.logs import event
from lib.producer.producer import Producer
from lib.proto import master_pb2, master_pb2_grpc
from lib.records import Record
from lib.retry import RetryPolicy, attempts_of, moved_headers
from lib.rpc import MasterClient
from lib.types import GroupMetadata, TopicPartition

log = logging.getLogger(__name__)

TXN_TIMEOUT_MS = 30_000
MAX_PENDING = 100_000  # moves held for the next commit; a nack past it is refused


@dataclass(frozen=True)
class Later:
    """What a push handler returns to have its record retried later, without raising:
    ``delay`` seconds (None: the policy's backoff)."""

    delay: float | None = None
    reason: str = "later"


RETRY_LATER = Later()


@dataclass(frozen=True)
class _Move:
    record: Record
    topic: str
    headers: dict[str, bytes]
    delay: float | None  # None: at once (the dead-letter topic)


class Redelivery:
    """The moves one consumer owes, and the transactional producer that makes them."""

    def __init__(self, policy: RetryPolicy, group: str, masters: Any, master: MasterClient,
                 producer_settings: dict[str, Any]) -> None:
        policy.validate()
        self.policy, self.group = policy, group
        self._masters, self._master = masters, master
        self._settings = producer_settings  # credentials, tls
        self._producer: Producer | None = None
        self._pending: list[_Move] = []
        self._in_doubt: list[_Move] | None = None  # of a commit whose answer was lost
        self._lock = threading.Lock()
        self.retry_topic = self.dead_letter_topic = ""
        self.retried = 0  # records moved to the retry topic
        self.dead = 0  # records moved to the dead-letter topic

    def ensure_topics(self) -> str:
        """The group's retry and dead-letter topics, made by the masters when missing;
        returns the retry topic (the consumer reads it too)."""
        response = self._master.call(
            master_pb2_grpc.MasterStub, "EnsureGroupTopics",
            master_pb2.EnsureGroupTopicsRequest(group=self.group,
                                                dead_letter_topic=self.policy.dead_letter_topic))
        self.retry_topic, self.dead_letter_topic = \
            response.retry_topic, response.dead_letter_topic
        return self.retry_topic

    def nack(self, record: Record, delay: float | None = None,
             error: BaseException | str | None = None, failures: int | None = None) -> str:
        """Owe a move of ``record``: to the retry topic after ``delay`` seconds (None: the
        policy's backoff for its failures so far), or to the dead-letter topic once it has
        failed ``max_attempts`` times (``failures``: counted by the caller, as an ordered
        consumer's retries in place; else one more than its headers say). Returns the topic
        it will go to."""
        if delay is not None and (isinstance(delay, bool) or not isinstance(delay, int | float)
                                  or not delay >= 0):
            raise errors.InvalidArgument(f"delay must be seconds >= 0, got {delay!r}")
        if failures is None:
            failures = attempts_of(record.headers) + 1
        headers = moved_headers(record, self.group, failures, error)
        if failures >= self.policy.max_attempts:
            move = _Move(record, self.dead_letter_topic, headers, None)
        else:
            move = _Move(record, self.retry_topic, headers,
                         self.policy.delay_for(failures) if delay is None else float(delay))
        with self._lock:
            if len(self._pending) >= MAX_PENDING:
                raise errors.InvalidArgument(
                    f"{MAX_PENDING} nacked records wait for a commit: commit() first")
            self._pending.append(move)
        return move.topic

    def pending(self) -> int:
        """Moves owed, counting those of a commit whose answer was lost (settled by the
        next commit)."""
        with self._lock:
            return len(self._pending) + len(self._in_doubt or ())

    def forget(self, owned: Callable[[TopicPartition], bool]) -> None:
        """Drop moves of records from partitions this consumer no longer owns: their new
        owner reads them again from the committed offset."""
        def keep(moves: list[_Move]) -> list[_Move]:
            return [m for m in moves if owned(TopicPartition(m.record.topic, m.record.partition))]

        with self._lock:
            self._pending = keep(self._pending)
            if self._in_doubt is not None:  # re-sent only if that commit turns out aborted
                self._in_doubt = keep(self._in_doubt)

    def commit(self, offsets: dict[TopicPartition, int], group: GroupMetadata) -> None:
        """Every pending move and ``offsets``, in one transaction. On failure nothing is
        moved or committed and the moves stay pending (the error is raised), except when
        the commit's answer is lost (a retriable error once the coordinator may have
        decided): the moves are then *in doubt* and the next call settles them first by
        ending the same transaction again (the coordinator recognises the retry), so a
        commit that did land is never sent twice."""
        self._settle()
        with self._lock:
            moves, self._pending = self._pending, []
        if not moves and not offsets:
            return
        producer = self._transactional()
        try:
            producer.begin()
            for m in moves:
                r = m.record
                if m.delay is None:
                    producer.send(m.topic, r.value, key=r.key, tag=r.tag, headers=m.headers)
                else:
                    producer.send(m.topic, r.value, key=r.key, tag=r.tag, headers=m.headers,
                                  delay=m.delay)
            if offsets:
                producer.send_offsets(offsets, group)
        except BaseException:
            self._requeue(moves, producer)
            raise
        self._end(producer, moves)

    def _end(self, producer: Producer, moves: list[_Move]) -> None:
        """Commit the open transaction of ``moves``: counted when it lands, pending again
        when it cannot (aborted), in doubt when the answer is lost."""
        try:
            producer.commit()
        except errors.TubeqError as exc:
            if exc.retriable:
                with self._lock:
                    self._in_doubt = moves
            else:  # a send failed, fenced, aborted by the coordinator: nothing landed
                self._requeue(moves, producer)
            raise
        except BaseException:
            with self._lock:
                self._in_doubt = moves
            raise
        self.dead += sum(m.delay is None for m in moves)
        self.retried += sum(m.delay is not None for m in moves)

    def _settle(self) -> None:
        """End the transaction whose commit answer was lost, before anything else."""
        with self._lock:
            moves, self._in_doubt = self._in_doubt, None
        if moves is None:
            return
        if self._producer is None:  # closed meanwhile: its transaction times out (aborted)
            self._requeue(moves, None)
            return
        event(log, "consumer.commit_in_doubt", logging.WARNING, group=self.group,
              moves=len(moves))
        self._end(self._producer, moves)

    def _requeue(self, moves: list[_Move], producer: Producer | None) -> None:
        with self._lock:
            self._pending = moves + self._pending
        if producer is not None:
            self._abort_quietly(producer)

    def _transactional(self) -> Producer:
        if self._producer is None:
            self._producer = Producer(
                self._masters, transactional_id=f"tubeq.retry.{self.group[:200]}."
                f"{uuid.uuid4().hex[:12]}", transaction_timeout_ms=TXN_TIMEOUT_MS,
                linger_ms=1, **self._settings)
        return self._producer

    def _abort_quietly(self, producer: Producer) -> None:
        try:
            producer.abort()
        except errors.TubeqError:  # fenced or never begun: a fresh producer next time
            self.close()

    def close(self) -> None:
        """Settles a commit in doubt first, when the coordinator answers (else its
        transaction stays open until the coordinator's timeout aborts it)."""
        if self._in_doubt is not None and self._producer is not None:
            try:
                self._settle()
            except errors.TubeqError as exc:
                event(log, "consumer.commit_in_doubt_at_close", logging.WARNING,
                      group=self.group, error=str(exc))
        producer, self._producer = self._producer, None
        if producer is not None:
            producer.close()


def retry_in_place(run: Callable[[], Later | BaseException | None], policy: RetryPolicy,
                   failures: int, hold: Callable[[float], bool]
                   ) -> tuple[str, Later | BaseException | None, int]:
    """Ordered retries (RocketMQ's orderly consumption): ``run`` the handler again after
    each backoff (``hold(seconds)``, False when the partition went away) until it takes
    the record or has failed ``max_attempts`` times. Returns ("taken" | "dead" |
    "revoked", the last failure, failures counted)."""
    while True:
        failed = run()
        if failed is None:
            return "taken", None, failures
        failures += 1
        if failures >= policy.max_attempts:
            return "dead", failed, failures
        wait = failed.delay if isinstance(failed, Later) and failed.delay is not None \
            else policy.delay_for(failures)
        if not hold(wait):
            return "revoked", failed, failures
