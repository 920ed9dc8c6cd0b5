"""Benchmarks and Locust load tests; each prints one JSON object."""
from __future__ import annotations

import signal


def stop_on_sigterm() -> None:
    """Make SIGTERM unwind like Ctrl-C: a benchmark's ``finally`` then stops, by PID, every
    process it started and removes its temp dir (a plain kill left them running)."""
    def _raise(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, _raise)
