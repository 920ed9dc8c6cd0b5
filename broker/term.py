"""The highest master term this broker has seen: commands from a deposed master are ignored.

The master sends its term (its epoch, later its Raft term) with every register/heartbeat
response and with ResetOffsets. Terms only grow, so anything carrying a lower one comes from a
master that has since been replaced. Only answers to calls the broker itself made to a master
(register, heartbeat) may raise the watermark: a request *to* the broker can carry any number,
so it is only checked (a ResetOffsets with term 2**62 once cut a broker off its real masters).
Thread-safe.
"""
from __future__ import annotations

import threading


class TermWatermark:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.highest = 0

    def observe(self, term: int) -> bool:
        """True (and remember it) when ``term`` is not older than the highest seen.

        For a master's answer to this broker's own call only; see :meth:`admits`."""
        with self._lock:
            if term < self.highest:
                return False
            self.highest = term
            return True

    def admits(self, term: int) -> bool:
        """True when ``term`` is not older than the highest seen; never raises the watermark."""
        with self._lock:
            return term >= self.highest
