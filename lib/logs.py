"""Structured logs: one JSON line per event on stderr, tagged with the process role and id.

Servers call :func:`setup` once in ``main``; modules use ``logging.getLogger(__name__)`` and pass
fields with ``extra={"fields": {...}}`` or through :func:`event`.
"""
from __future__ import annotations

import json
import logging
import sys
import threading
import time
from typing import Any


class JsonFormatter(logging.Formatter):
    def __init__(self, role: str, ident: str) -> None:
        super().__init__()
        self.role, self.ident = role, ident

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": round(time.time(), 3),
            "level": record.levelname.lower(),
            "role": self.role,
            "id": self.ident,
            "logger": record.name,
            "event": record.getMessage(),
        }
        line.update(getattr(record, "fields", {}))
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def setup(role: str, ident: str | int, level: str = "INFO") -> None:
    """Send every log record of this process to stderr as JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(role, str(ident)))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def event(logger: logging.Logger, name: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log one event with structured fields: ``event(log, "broker.registered", id=3)``."""
    logger.log(level, name, extra={"fields": fields})


class Sparse:
    """Lets one of a kind of costly log lines (a traceback: ~0.4 ms) through per ``every_s``
    and counts the ones it held back; thread-safe."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self._lock = threading.Lock()
        self._next = 0.0
        self._held = 0

    def due(self) -> int | None:
        """None: stay quiet; else log now, and how many were held back since the last."""
        now = time.monotonic()
        with self._lock:
            if now < self._next:
                self._held += 1
                return None
            self._next = now + self.every_s
            held, self._held = self._held, 0
            return held
