"""Free-space guard: refuse an append before the disk is too full to take what was acknowledged.

An ``async`` append is acknowledged once it is in a memory cache block, so the broker must only
take it if the files can still hold it. :class:`SpaceGuard` is shared by every store of one data
directory (one filesystem): it counts the bytes appended but not yet written to the files
(*unwritten*) and admits an append only while::

    free - written_since_reading - unwritten - need >= reserve

``free`` is an ``os.statvfs`` reading at most ``refresh_s`` old (a syscall per append would be
measurable); ``written_since_reading`` are bytes the flushers wrote after it, which the reading
cannot show yet. The reserve absorbs what is not counted (checkpoints, segment rolls, other
processes on the same disk).

The guard also carries the stores' *disk-full condition*: a flusher whose write failed with
ENOSPC/EDQUOT reports it (:meth:`blocked`) and keeps retrying; appends are refused until every
blocked store has written again (:meth:`unblocked`). :func:`headroom` is the pure decision.

It also bounds memory: with ``max_unwritten`` set, :meth:`room` makes an append wait while
more than that many admitted bytes are still unwritten (in cache blocks), until the flushers
catch up or ``unwritten_wait_s`` passes (then it goes on: a bound on memory, never a refusal).
Stores call it before taking their own lock, since their flusher needs that lock to write.

Threading: every method is thread-safe (one short lock, no I/O under it except the cached
statvfs call). Stores call :meth:`admit` with their own lock held; the guard never calls back.
"""
from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lib.errors import DiskFull

DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
REFRESH_S = 0.05  # how old a statvfs reading may be
FULL_HOLD_S = 2.0  # status() says full this long after a refusal (a batch may not fit, 1 B may)


def headroom(free: int, unwritten: int, need: int, reserve: int) -> int:
    """Bytes left above the reserve once everything admitted, and ``need``, is written.

    An append of ``need`` bytes is admitted when this is >= 0.
    """
    return free - unwritten - need - reserve


def is_disk_full(exc: BaseException | None) -> bool:
    """True when ``exc`` (or what caused it) is an OSError for a full disk or quota."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def free_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes an unprivileged writer may still use on the filesystem of ``path``."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


@dataclass(frozen=True)
class SpaceStatus:
    """What the broker reports: free bytes, the reserve, and whether appends are refused."""

    free_bytes: int
    reserve_bytes: int
    unwritten_bytes: int
    full: bool  # appends are being refused (below the reserve, a refusal lately, or blocked)
    blocked_stores: tuple[str, ...] = ()


class SpaceGuard:
    """Admission of appends against the free space of ``path``'s filesystem (see module doc)."""

    def __init__(self, path: str | Path, reserve_bytes: int, *,
                 clock: Callable[[], float] = time.monotonic,
                 statvfs: Callable[[str | Path], int] = free_bytes,
                 refresh_s: float = REFRESH_S, max_unwritten: int = 0,
                 unwritten_wait_s: float = 30.0) -> None:
        self.path = Path(path)
        self.reserve = reserve_bytes
        self.max_unwritten, self.unwritten_wait_s = max_unwritten, unwritten_wait_s
        self._clock, self._statvfs, self._refresh_s = clock, statvfs, refresh_s
        self._lock = threading.Lock()
        self._drained = threading.Condition(self._lock)  # unwritten fell below max_unwritten
        self.unwritten_waits = 0  # appends that waited for room (the broker's metrics)
        self._free = 0
        self._read_at: float | None = None
        self._written_since = 0
        self._unwritten = 0
        self._blocked: dict[str, str] = {}  # store name -> the error its flusher got
        self._refused_at: float | None = None

    def admit(self, nbytes: int) -> None:
        """Count ``nbytes`` as unwritten, or raise DiskFull (nothing counted) if no room."""
        with self._lock:
            if self._blocked:
                self._refused_at = self._clock()
                raise self._error(nbytes, "a write failed for lack of space: "
                                  + "; ".join(f"{k}: {v}" for k, v in self._blocked.items()))
            free = self._current_free()
            if headroom(free, self._unwritten, nbytes, self.reserve) < 0:
                self._refused_at = self._clock()
                raise self._error(nbytes, "")
            self._unwritten += nbytes
            self._refused_at = None

    def room(self, wait: bool) -> bool:
        """Whether an append may go into memory now: True while fewer than ``max_unwritten``
        bytes wait for the flushers; else False without ``wait``, or waits until they do (at
        most ``unwritten_wait_s``, then True anyway). Call without a store's lock."""
        if not self.max_unwritten or self._unwritten < self.max_unwritten:
            return True  # the common case, without the lock (a stale read only delays a wait)
        if not wait:
            return False
        with self._lock:
            self.unwritten_waits += 1
            self._drained.wait_for(lambda: self._unwritten < self.max_unwritten,
                                   self.unwritten_wait_s)
        return True

    def written(self, nbytes: int) -> None:
        """A flusher wrote ``nbytes`` that were admitted earlier."""
        with self._lock:
            self._unwritten = max(0, self._unwritten - nbytes)
            self._written_since += nbytes
            self._wake_waiters()

    def forget(self, nbytes: int) -> None:
        """Admitted bytes that will never be written (their store gave up on them)."""
        with self._lock:
            self._unwritten = max(0, self._unwritten - nbytes)
            self._wake_waiters()

    def _wake_waiters(self) -> None:
        if self.max_unwritten and self._unwritten < self.max_unwritten:
            self._drained.notify_all()

    def blocked(self, store: str, error: str) -> None:
        """``store``'s flusher cannot write (ENOSPC/EDQUOT): refuse appends until it can."""
        with self._lock:
            self._blocked[store] = error

    def unblocked(self, store: str) -> None:
        with self._lock:
            self._blocked.pop(store, None)
            # Space came back: measure again before the next admission.
            self._read_at = self._refused_at = None

    def status(self) -> SpaceStatus:
        """The current picture (refreshes the statvfs reading if it is old)."""
        with self._lock:
            free = self._current_free()
            lately = (self._refused_at is not None
                      and self._clock() - self._refused_at < FULL_HOLD_S)
            full = (bool(self._blocked) or lately
                    or headroom(free, self._unwritten, 0, self.reserve) < 0)
            return SpaceStatus(free, self.reserve, self._unwritten, full,
                               tuple(sorted(self._blocked)))

    def _current_free(self) -> int:
        """Free bytes as of now: a recent statvfs reading minus what was written since."""
        now = self._clock()
        if self._read_at is None or now - self._read_at >= self._refresh_s:
            try:
                self._free = self._statvfs(self.path)
            except OSError:
                self._free = 0  # the data dir is gone or unreadable: refuse rather than guess
            self._read_at, self._written_since = now, 0
        return self._free - self._written_since

    def _error(self, nbytes: int, why: str) -> DiskFull:
        free = max(0, self._free - self._written_since)
        return DiskFull(
            f"disk full under {self.path}: {free} bytes free, {self._unwritten} bytes waiting "
            f"to be written, reserve {self.reserve} bytes (disk_reserve_bytes); append of "
            f"{nbytes} bytes refused" + (f" ({why})" if why else "")
            + "; appends resume by themselves once space is freed",
            path=str(self.path), free_bytes=free, reserve_bytes=self.reserve,
            unwritten_bytes=self._unwritten)
