"""Benchmarks and Locust load tests; each prints one JSON object."""
from __future__ import annotations

import signal


def stop_on_sigterm() -> None:
    """Make SIGTERM unwind like Ctrl-C: a benchmark's ``finally`` then stops, by PID, every
    process it started and removes its temp dir (a plain kill left them running)."""
    def _raise(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, _raise)


def wait_served(producer, topics: list[str], timeout: float = 120.0) -> None:
    """Until the broker acknowledges a record for every topic in ``topics`` (a new topic is
    served after the broker's next heartbeat); these warm-up records are not timed."""
    import time

    from lib.errors import TubeqError

    deadline = time.monotonic() + timeout
    for topic in topics:
        while True:
            try:
                producer.send_sync(topic, b"warm-up", timeout=10)
                break
            except TubeqError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
