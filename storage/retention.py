"""Which data segments retention deletes: a pure decision over (base, size, mtime) rows.

Whole oldest segments go, never the active (last) one, because each partition's earliest
offset must only move up and readers must never find a hole in the middle of the log. A
segment goes when it is older than ``retention_ms`` (by modification time: its newest byte),
or while the store holds more than ``retention_bytes``; the first segment that is neither
stops the deletion. The flusher (storage/flusher.py) applies the answer.
"""
from __future__ import annotations

from collections.abc import Sequence


def segments_to_delete(segments: Sequence[tuple[int, int, float]], *, retention_ms: int,
                       retention_bytes: int, now: float) -> int:
    """How many of the oldest ``segments`` (oldest first, the active one last) to delete.

    ``now`` and the mtimes are wall-clock seconds; a limit of -1 (or 0) is no limit.
    """
    total = sum(size for _base, size, _mtime in segments)
    doomed = 0
    for _base, size, mtime in segments[:-1]:
        too_old = retention_ms > 0 and (now - mtime) * 1e3 > retention_ms
        too_big = retention_bytes > 0 and total > retention_bytes
        if not (too_old or too_big):
            break
        doomed += 1
        total -= size
    return doomed
