"""Cheap per-record futures, settled a whole batch at a time.

``Producer.send`` returns one ``concurrent.futures.Future`` per record. A stock Future allocates a
Condition (with an RLock and a deque) and two lists, and must be resolved one by one: at 150k
records/s that is about a million garbage-collected objects a second plus a lock round trip per
record. :class:`RecordFuture` is a real ``Future`` subclass (``result``, ``exception``,
``done``, ``add_done_callback``, ``concurrent.futures.wait``/``as_completed`` all work) whose
state lives in one :class:`BatchOutcome` shared by every record of its batch:

- settling a batch is O(1): set the outcome, notify the shared condition once; each record's
  RecordMetadata is built only when someone asks for its result;
- waiter and callback lists are created only for futures that use them, and only those are
  visited when the batch settles (callbacks run in record order);
- the outcome never references the futures (no reference cycles for the collector to find),
  except the few registered for callbacks, and it drops those once it has settled;
- the outcome's condition is made by the first future that waits or registers: most batches
  are settled with nobody waiting, and a Condition is an RLock, a deque and five bound methods
  for the collector to track (at 10,000 topics the producer's collections took 8 % of its CPU).

Records cannot be cancelled once queued (``cancel()`` returns False, as in Kafka's producer):
the batch is sent regardless. ``set_result``/``set_exception`` are not supported: only
:meth:`BatchOutcome.succeed` / :meth:`BatchOutcome.fail` finish a record.

This relies on the private attribute names of CPython's ``concurrent.futures._base.Future``
(stable since Python 3.2); tests/unit/test_producer_futures.py checks the behaviour.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures._base import FINISHED, PENDING
from typing import Any

_NO_CALLBACKS: tuple = ()


_MAKING = threading.Lock()  # makes an outcome's condition, or settles one that has none


class BatchOutcome:
    """The shared state of every record future of one batch."""

    __slots__ = ("_condition", "state", "error", "make_result", "watched")

    def __init__(self, make_result: Callable[[int], Any] | None = None) -> None:
        self._condition: threading.Condition | None = None  # made on first use (above)
        self.state = PENDING
        self.error: BaseException | None = None
        self.make_result = make_result  # index -> result value, set on success
        self.watched: list[RecordFuture] | None = None  # futures with callbacks or waiters

    @property
    def condition(self) -> threading.Condition:
        """The condition waiters and registrations hold, made by the first of them."""
        condition = self._condition
        if condition is None:
            with _MAKING:
                condition = self._condition
                if condition is None:
                    condition = self._condition = threading.Condition()
        return condition

    def succeed(self, make_result: Callable[[int], Any]) -> None:
        """Every pending record gets ``make_result(index)`` (built lazily, on access)."""
        self._finish(make_result, None)

    def fail(self, error: BaseException) -> None:
        self._finish(None, error)

    def _settle(self, make_result: Callable[[int], Any] | None,
                error: BaseException | None) -> bool:
        """Record the outcome, once (False: it was settled already)."""
        if self.state != PENDING:
            return False
        self.make_result, self.error, self.state = make_result, error, FINISHED
        return True

    def _finish(self, make_result: Callable[[int], Any] | None,
                error: BaseException | None) -> None:
        if self._condition is None:
            with _MAKING:  # a waiter making the condition now finds the outcome settled
                if self._condition is None:  # nobody waits or watches: no registration
                    self._settle(make_result, error)
                    return
        with self._condition:
            if not self._settle(make_result, error):
                return
            watched, self.watched = self.watched or (), None
            for fut in watched:
                for waiter in fut._waiter_list or ():
                    if error is None:
                        waiter.add_result(fut)
                    else:
                        waiter.add_exception(fut)
            self._condition.notify_all()
        for fut in watched:
            fut._invoke_callbacks()


class RecordFuture(Future):
    """The future of record ``index`` of a batch; see the module docstring."""

    # Class-level defaults: plain attribute reads, so CPython never materialises an instance
    # dict for the common future that nobody waits on.
    _waiter_list: list | None = None
    _watched = False
    _done_callbacks: list | tuple = _NO_CALLBACKS
    __slots__ = ("_outcome", "_index")  # set on every future: cheaper as slots

    def __init__(self, outcome: BatchOutcome, index: int) -> None:  # no super(): no own lock
        self._outcome = outcome
        self._index = index

    @property
    def _condition(self) -> threading.Condition:
        return self._outcome.condition

    @property
    def _state(self) -> str:
        return self._outcome.state

    @property
    def _result(self) -> Any:
        outcome = self._outcome
        if outcome.state != FINISHED or outcome.error is not None or outcome.make_result is None:
            return None
        return outcome.make_result(self._index)

    @property
    def _exception(self) -> BaseException | None:
        return self._outcome.error

    @property
    def _waiters(self) -> list:
        # concurrent.futures.wait()/as_completed() append here while holding our condition.
        waiters = self._waiter_list
        if waiters is None:
            waiters = self._waiter_list = []
            self._watch()
        return waiters

    def _watch(self) -> None:
        """Register for a visit when the batch settles (once; call with the condition held)."""
        if not self._watched:
            self._watched = True
            outcome = self._outcome
            if outcome.watched is None:
                outcome.watched = []
            outcome.watched.append(self)

    def done(self) -> bool:
        return self._outcome.state == FINISHED

    def result(self, timeout: float | None = None) -> Any:
        outcome = self._outcome
        if outcome.state == FINISHED:  # fast path: a settled outcome never changes again
            if outcome.error is not None:
                raise outcome.error
            return outcome.make_result(self._index) if outcome.make_result else None
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        outcome = self._outcome
        if outcome.state == FINISHED:
            return outcome.error
        return super().exception(timeout)

    def add_done_callback(self, fn: Callable[[Future], object]) -> None:
        with self._condition:
            if self._outcome.state == PENDING:
                if self._done_callbacks is _NO_CALLBACKS:
                    self._done_callbacks = []
                    self._watch()
                self._done_callbacks.append(fn)
                return
        super().add_done_callback(fn)  # already finished: runs fn now

    def cancel(self) -> bool:
        return False

    def set_running_or_notify_cancel(self) -> bool:
        return True

    def set_result(self, result: Any) -> None:
        raise RuntimeError("a record future is settled by its batch, not by set_result")

    def set_exception(self, exception: BaseException | None) -> None:
        raise RuntimeError("a record future is settled by its batch, not by set_exception")
