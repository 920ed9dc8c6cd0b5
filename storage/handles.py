"""The open segment files of every store in the process, within a cap.

Why: a store's data log and each of its partitions' index (and key) logs are directories of
segment files, and a file needs a descriptor to be read or written. Holding all of them open
costs a broker two descriptors per topic of one partition and one per further segment:
10,000 topics are 20,000 descriptors and more, past the hard limit of many hosts (20,000 on
the development VM, whose container may not raise it). So segments are opened when used and
idle ones closed past ``capacity`` (RocksDB's ``max_open_files``, Kafka's advice to raise the
ulimit instead).

Which idle one goes: the *most* recently used. Past the cap the files in use outnumber the
descriptors, and the flushers (and producers writing topic after topic) visit them in turn, a
cycle: least-recently-used eviction then closes each file just before its next use and never
hits (every round reopened every file: 3 opens per store round at 10,000 topics). Closing the
one just used keeps a fixed set of ``capacity`` files open across rounds, so those hit
(``capacity`` / files, 60 % at 10,000 one-partition topics on the 20,000-descriptor VM). A file
used often among rarely used ones loses its descriptor to each of their opens, at most one
reopen per such open; under the cap nothing is closed at all.

A use *pins* the segment (:meth:`Segment.use`, or ``pin``/``unpin`` on the hot paths): a
pinned descriptor is never closed under its reader. A dropped segment (retention, a cut
tail) is opened and *kept* before its file is unlinked, so a reader holding an older segment
list can still finish its ``pread`` (storage/segments.py's graveyard); it is closed when the
graveyard is emptied. fsync on any descriptor of a file flushes all of its dirty pages, so a
descriptor closed and opened again loses nothing of what was written through the first.
"""
from __future__ import annotations

import os
import resource
import threading
from collections import OrderedDict
from pathlib import Path

from lib.errors import StorageError

RESERVED = 2048  # descriptors left for sockets, pipes, LMDB and the rest of the process
LEAST = 256


class Segment:
    """One file of a log: its first unit is ``base``, it holds ``length`` units. Its
    descriptor ``fd`` is the :class:`Handles`' business (``-1`` while closed): use it through
    :meth:`use` or ``pin``/``unpin`` only."""

    __slots__ = ("base", "path", "length", "fd", "pins", "kept")

    def __init__(self, base: int, path: Path, length: int, fd: int = -1) -> None:
        self.base, self.path, self.length = base, path, length
        self.fd, self.pins, self.kept = fd, 0, False

    @property
    def end(self) -> int:
        return self.base + self.length

    def pin(self) -> int:
        return handles().pin(self)

    def unpin(self) -> None:
        handles().unpin(self)

    def use(self) -> _Use:
        """``with seg.use() as fd:`` the descriptor, open and pinned for the block."""
        return _Use(self)


class _Use:
    __slots__ = ("seg",)

    def __init__(self, seg: Segment) -> None:
        self.seg = seg

    def __enter__(self) -> int:
        return handles().pin(self.seg)

    def __exit__(self, *exc: object) -> None:
        handles().unpin(self.seg)


class Handles:
    """The process's open segment descriptors: at most ``capacity`` beyond the pinned and
    kept ones (module docstring).

    The lock guards the bookkeeping only, never an ``open`` or ``close``: a thread in a system
    call gives the GIL away and must wait for it back, and every flusher of a broker with
    thousands of stores pins a segment per write; with the calls inside the lock they queued
    behind each other's GIL waits (81 % of their time at 10,000 topics)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(LEAST, capacity)
        self._lock = threading.Lock()
        self._idle: OrderedDict[Segment, None] = OrderedDict()  # open, unpinned, MRU last
        self.open = 0  # descriptors open now
        self.opened = 0  # opens so far (reopens included): what the cap costs
        self._opening = 0  # opens under way: their descriptors count against the cap

    def pin(self, seg: Segment) -> int:
        with self._lock:
            seg.pins += 1  # from here on nothing closes it
            if seg.fd >= 0:
                self._idle.pop(seg, None)
                return seg.fd
            evicted = self._evict()
            self._opening += 1
        try:
            _close_all(evicted)
            fd = os.open(seg.path, os.O_RDWR)
        except OSError as exc:
            self._opened(seg, -1)
            raise StorageError(f"cannot open segment {seg.path}: {exc}",
                               path=str(seg.path)) from exc
        except BaseException:
            self._opened(seg, -1)
            raise
        return self._opened(seg, fd)

    def _opened(self, seg: Segment, fd: int) -> int:
        """Install ``fd`` (``-1``: the open failed, the pin is undone). Two threads may open
        the same closed segment at once; the second one's descriptor is closed again."""
        spare = -1
        with self._lock:
            self._opening -= 1
            if fd < 0:
                self._unpinned(seg)
                return -1
            if seg.fd >= 0:
                spare = fd
            else:
                seg.fd = fd
                self.open += 1
                self.opened += 1
            fd = seg.fd
        if spare >= 0:
            os.close(spare)
        return fd

    def unpin(self, seg: Segment) -> None:
        with self._lock:
            self._unpinned(seg)

    def _unpinned(self, seg: Segment) -> None:
        seg.pins -= 1
        if seg.pins == 0 and seg.fd >= 0 and not seg.kept:
            self._idle[seg] = None

    def adopt(self, seg: Segment, fd: int) -> None:
        """A segment just created with ``fd`` (a roll): counted, and idle until used."""
        with self._lock:
            evicted = self._evict()
            seg.fd = fd
            self.open += 1
            self.opened += 1
            self._idle[seg] = None
        _close_all(evicted)

    def keep(self, seg: Segment) -> None:
        """Open ``seg`` and hold it open until :meth:`close` (its file is about to go)."""
        self.pin(seg)
        with self._lock:
            seg.kept = True
            seg.pins -= 1

    def close(self, seg: Segment) -> None:
        """Close ``seg``'s descriptor (its log closes, or its file was deleted and no reader
        holds an older list any more)."""
        with self._lock:
            fd = self._detach(seg)
            seg.kept = False
        if fd >= 0:
            os.close(fd)

    def release(self, seg: Segment) -> None:
        """Close ``seg``'s descriptor if nobody uses it (a file that will rarely be used
        again: left idle, it would keep a capped descriptor for good, idle ones closing
        most-recently-used first)."""
        with self._lock:
            fd = -1 if seg.pins or seg.kept else self._detach(seg)
        if fd >= 0:
            os.close(fd)

    def _detach(self, seg: Segment) -> int:
        """Take ``seg``'s descriptor off it (holding the lock): the caller closes it once it
        lets the lock go. -1 when it had none."""
        self._idle.pop(seg, None)
        fd, seg.fd = seg.fd, -1
        if fd >= 0:
            self.open -= 1
        return fd

    def _evict(self) -> list[int]:
        """Take idle descriptors off their segments (holding the lock), most recently used
        first (module docstring), until one more fits under the cap; the caller closes them
        once it lets the lock go."""
        evicted = []
        while self.open + self._opening >= self.capacity and self._idle:
            seg, _ = self._idle.popitem(last=True)
            evicted.append(seg.fd)
            seg.fd = -1
            self.open -= 1
        return evicted

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"capacity": self.capacity, "open": self.open, "idle": len(self._idle),
                    "opened": self.opened}


_handles: Handles | None = None
_handles_lock = threading.Lock()


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def handles() -> Handles:
    """The process's handles, sized at first use from the open-file limit then in force (a
    broker raises it first: lib/open_files.py)."""
    global _handles
    if _handles is None:
        with _handles_lock:
            if _handles is None:
                _handles = Handles(default_capacity())
    return _handles


def default_capacity() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 20
    return max(LEAST, soft - RESERVED) if soft > 2 * RESERVED else max(LEAST, soft // 2)
