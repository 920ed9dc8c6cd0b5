"""The highest master term this broker has seen: commands from a deposed master are ignored.

The master sends its term (its epoch, later its Raft term) with every register/heartbeat
response and with ResetOffsets. Terms only grow, so anything carrying a lower one comes from a
master that has since been replaced. Thread-safe.
"""
from __future__ import annotations

import threading


class TermWatermark:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.highest = 0

    def observe(self, term: int) -> bool:
        """True (and remember it) when ``term`` is not older than the highest seen."""
        with self._lock:
            if term < self.highest:
                return False
            self.highest = term
            return True
