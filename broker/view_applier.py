"""Applies the master's views (topics, placements, deletions) on a thread of its own.

Converging on a view may open hundreds of stores (topics being created by the thousand), and
while the heartbeat thread did it, the broker sent no heartbeat: past ``broker_timeout_ms``
(6 s) the master took it for dead in the middle of creating 10,000 topics. The heartbeat
thread now hands each view over and goes on beating. Only the newest view waiting matters (a
view is the whole desired state), so one still waiting when a newer comes is replaced; views
are applied in the order they came, and ``digest`` names the view last applied whole (empty:
none, or one that failed in part), which the next heartbeat names to the master. What came
with a view (the ACLs, quotas and IP lists) is applied after it, never before: a client let in
by an ACL finds the topic it names open.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class ViewApplier:
    def __init__(self, apply: Callable[[Any], bool]) -> None:
        """``apply(view)``: converge on a response's view; False when part of it failed."""
        self._apply = apply
        self._cond = threading.Condition()
        self._waiting: tuple[Any, bytes, Callable[[], None]] | None = None
        self._busy = False
        self._stopped = False
        self.digest = b""
        self.applied = 0  # views applied (whole or not): what converging costs
        self._thread = threading.Thread(target=self._run, daemon=True, name="view-applier")
        self._thread.start()

    def offer(self, view: Any, digest: bytes = b"",
              after: Callable[[], None] = lambda: None) -> None:
        """Apply ``view`` (replacing one still waiting), then run ``after``. ``view`` None:
        nothing new to converge on, only ``after`` (in turn: after a view still waiting)."""
        with self._cond:
            if view is None and self._waiting is not None:
                view, digest = self._waiting[0], self._waiting[1]
            if view is not None:
                self.digest = digest
            self._waiting = (view, digest, after)
            self._cond.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no view is waiting or being applied."""
        with self._cond:
            return self._cond.wait_for(lambda: (self._waiting is None and not self._busy)
                                       or self._stopped, timeout)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._waiting is not None or self._stopped)
                if self._stopped:
                    return
                (view, _digest, after), self._waiting = self._waiting, None
                self._busy = True
            whole = view is None
            try:
                if view is not None:
                    whole = self._apply(view)
                    self.applied += 1
                after()
            except Exception:  # the thread must go on: the next heartbeat sends it again
                log.exception("master.view_apply_failed")
            with self._cond:
                if not whole and (self._waiting is None or self._waiting[0] is None):
                    self.digest = b""  # ask for it whole again, unless a newer one waits
                self._busy = False
                self._cond.notify_all()
