"""Calls stuck on a leader that moved away: how a client rides through a hung broker.

A broker that stops answering without closing its connections (SIGSTOP, a link cut with no
RST) leaves a call to it waiting for its deadline: 30 s for a producer, while the master
moves the partition's leadership in a few seconds. gRPC keepalive (lib/rpc.py) ends such
calls within a few seconds; this module ends them as soon as the master says where the
partition leads now, which is what a client needs to go on.

:class:`StuckCallWatch` is told of every call in flight (:meth:`~StuckCallWatch.started`:
the broker address and the partitions it is for, and how long it may take before it counts
as stuck; :meth:`~StuckCallWatch.finished` when it returns). While some call is stuck it asks
the master for the routes of their topics every ``check_every_s`` and calls ``on_moved`` for
each stuck call one of whose partitions now lives at another address; ``on_moved`` cancels
it, and the caller's usual retry (refreshed routes, the batch resent) takes it to the new
leader. A partition without a leader right now (an election under way) has nowhere else to
go: its call is left alone. Master errors are logged and the check comes again.

The decision (:func:`moved`) is pure; the thread only gathers entries and asks the master.
Threading: ``started``/``finished`` from any thread (a lock guards the table); ``on_moved``
runs on the watch's own thread, at most once per call, and must not block.
"""
from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from lib.errors import TubeqError
from lib.logs import event
from lib.routes import RouteCache
from lib.types import TopicPartition

log = logging.getLogger("tubeq.stuck_calls")
# A produce call answers in milliseconds, an acks=all one within the followers' fetch wait;
# one in flight for 1 s is worth a question to the master (one GetRoutes, cheap).
STUCK_AFTER_S = 1.0
# While calls are stuck, the master is asked this often: the client learns of the new leader
# at most this long after the master moved it.
CHECK_EVERY_S = 0.25


@dataclass(frozen=True, slots=True)
class InFlight:
    """One call: where it went, for which partitions, when it counts as stuck."""

    token: int
    address: str
    tps: tuple[TopicPartition, ...]
    stuck_at: float  # monotonic
    on_moved: Callable[[], None]


def moved(calls: Iterable[InFlight], address_of: Callable[[TopicPartition], str | None],
          now: float) -> list[InFlight]:
    """The stuck calls (``stuck_at`` passed) one of whose partitions has a leader at an
    address other than the call's: those to cancel and resend."""
    out = []
    for call in calls:
        if call.stuck_at > now:
            continue
        for tp in call.tps:
            leader = address_of(tp)
            if leader and leader != call.address:
                out.append(call)
                break
    return out


class StuckCallWatch:
    """See the module docstring. ``close`` ends the thread (it starts with the first call)."""

    def __init__(self, routes: RouteCache, name: str, check_every_s: float = CHECK_EVERY_S
                 ) -> None:
        self.routes = routes
        self.name = name
        self.check_every_s = check_every_s
        self._cond = threading.Condition()
        self._calls: dict[int, InFlight] = {}
        self._tokens = itertools.count(1)
        self._thread: threading.Thread | None = None
        self._closed = False
        self.cancelled = 0  # calls ended by on_moved (read racily by tests and metrics)

    def started(self, address: str, tps: Iterable[TopicPartition], on_moved: Callable[[], None],
                stuck_after_s: float = STUCK_AFTER_S) -> int:
        """Note a call to ``address`` for ``tps``; returns the token for :meth:`finished`."""
        token = next(self._tokens)
        call = InFlight(token, address, tuple(tps), time.monotonic() + stuck_after_s, on_moved)
        with self._cond:
            self._calls[token] = call
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name=f"tubeq-stuck-calls-{self.name}")
                self._thread.start()
        return token

    def finished(self, token: int) -> None:
        with self._cond:
            self._calls.pop(token, None)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                self._cond.wait(self.check_every_s)
                if self._closed:
                    return
                now = time.monotonic()
                stuck = [c for c in self._calls.values() if c.stuck_at <= now]
            if stuck:
                self._check(stuck)

    def _check(self, stuck: list[InFlight]) -> None:
        topics = {tp.topic for call in stuck for tp in call.tps}
        try:
            self.routes.refresh(topics)
        except TubeqError as exc:  # the master may be failing over too: ask again later
            event(log, "client.route_check_failed", logging.INFO, error=str(exc))
            return
        for call in moved(stuck, self.routes.address, time.monotonic()):
            with self._cond:
                if self._calls.pop(call.token, None) is None:
                    continue  # it returned meanwhile
            event(log, "client.call_moved", logging.WARNING, broker=call.address,
                  partitions=[f"{tp.topic}/{tp.partition}" for tp in call.tps],
                  stuck_for_s=round(time.monotonic() - call.stuck_at, 2))
            self.cancelled += 1
            try:
                call.on_moved()
            except Exception:  # a bug in a canceller must not end the watch
                log.exception("cancelling a call stuck on a moved leader failed")
