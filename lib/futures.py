"""Cheap per-record futures, settled a whole batch at a time.

``Producer.send`` returns one ``concurrent.futures.Future`` per record. A stock Future allocates a
Condition (with an RLock and a deque) and two lists: at 150k records/s that is about a million
garbage-collected objects a second, and the collector's passes over them cost more than the
encoding itself. :class:`RecordFuture` is a real ``Future`` subclass (``result``, ``exception``,
``add_done_callback``, ``concurrent.futures.wait`` all work) that

- shares one Condition with every record of its batch,
- creates its waiter list and callback list only when someone uses them, and
- is settled by :func:`settle` under one lock hold for the whole batch, so a waiter woken by the
  shared condition always finds its own future finished.

Records cannot be cancelled once queued (``cancel()`` returns False, as in Kafka's producer):
the batch is sent regardless, and a cancel would wake the siblings' waiters spuriously.

This relies on the attribute names of CPython's ``concurrent.futures._base.Future`` (stable
since Python 3.2); tests/unit/test_producer_futures.py checks the behaviour.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures._base import FINISHED, PENDING
from typing import Any

_NO_CALLBACKS: tuple = ()


class RecordFuture(Future):
    """A Future sharing its batch's condition; see the module docstring."""

    def __init__(self, condition: threading.Condition) -> None:  # no super(): no own lock
        self._condition = condition
        self._state = PENDING
        self._result = None
        self._exception = None
        self._done_callbacks = _NO_CALLBACKS

    @property
    def _waiters(self) -> list:
        # concurrent.futures.wait() appends to this list: create it on first use only.
        waiters = self.__dict__.get("_waiter_list")
        if waiters is None:
            waiters = self.__dict__["_waiter_list"] = []
        return waiters

    def add_done_callback(self, fn: Callable[[Future], object]) -> None:
        with self._condition:
            if self._state == PENDING:
                if self._done_callbacks is _NO_CALLBACKS:
                    self._done_callbacks = []
                self._done_callbacks.append(fn)
                return
        super().add_done_callback(fn)  # already finished: runs fn now

    def cancel(self) -> bool:
        return False


def settle(condition: threading.Condition, futures: Sequence[Future],
           values: Callable[[int], Any] | None = None,
           error: BaseException | None = None) -> None:
    """Finish every pending future of a batch: ``values(i)`` for the i-th, or ``error``.

    One lock hold and one notify for the whole batch; done-callbacks run afterwards, in this
    thread, in record order. Futures already finished are left alone.
    """
    finished: list[Future] = []
    with condition:
        for i, fut in enumerate(futures):
            if fut._state != PENDING:
                continue
            if error is None:
                fut._result = values(i) if values is not None else None
            else:
                fut._exception = error
            fut._state = FINISHED
            waiters = fut.__dict__.get("_waiter_list")
            for waiter in waiters or ():
                if error is None:
                    waiter.add_result(fut)
                else:
                    waiter.add_exception(fut)
            if fut._done_callbacks:
                finished.append(fut)
        condition.notify_all()
    for fut in finished:
        fut._invoke_callbacks()
