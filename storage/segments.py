"""The segment list both logs share: files named by a 20-digit base, oldest first.

A log (the data log, each partition's index log) is a directory of segment files
``<20-digit base><suffix>``. What a segment's *length* counts is the log's business (bytes for
the data log, entries for an index); this module only knows that segment ``i + 1`` starts where
segment ``i`` ends, and keeps the life cycle in one place: open (setting aside whatever follows
a gap), roll, drop the oldest (never the active one), drop the newest (recovery), close.

Concurrency: one writer (the store's flusher, or recovery before anything else runs). Readers
take ``segs`` without a lock: the list is *replaced, never mutated*, so a snapshot stays
consistent while the writer rolls or drops segments, and the fds of dropped segments wait in a
graveyard until the next drop (or close) so that a reader still holding the old list can finish
its ``pread``. A segment's ``length`` only grows while it is the active one. Descriptors are
opened when used and closed when idle past a cap (storage/handles.py).

Failure: ``roll`` either adds the new segment or changes nothing (an fd it opened is closed), so
a writer that failed (ENOSPC) simply retries; ``pwrite_all`` raises before the caller counts
anything, so a log's end only covers bytes fully written.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from lib.errors import StorageError
from storage.fsutil import fsync_dir, list_segments, quarantine, segment_name
from storage.handles import Segment, handles
from storage.held_write import pwrite

__all__ = ["Segment", "SegmentList", "SegmentedLog", "pwrite_all"]


class SegmentList:
    """The segments of ``directory`` (files ending in ``suffix``), opened read-write.

    ``measure(path)`` gives the length of an existing file in the log's units (and may repair
    a torn tail first). A segment that does not start where the previous one ends (a damaged
    or lost middle file) is quarantined with everything after it: recovery rebuilds what is
    missing from the data log.
    """

    def __init__(self, directory: Path, suffix: str, measure: Callable[[Path], int]) -> None:
        self.dir, self.suffix = directory, suffix
        directory.mkdir(parents=True, exist_ok=True)
        self.segs: list[Segment] = []  # replaced, never mutated: readers keep a snapshot
        self._graveyard: list[Segment] = []
        self.empty_end = 0  # the log's end while it has no segment (an index after a reset)
        for base, path in list_segments(directory, suffix):
            if self.segs and base != self.segs[-1].end:
                quarantine(path)
                continue
            self.segs = [*self.segs, Segment(base, path, measure(path))]

    @property
    def start(self) -> int:
        return self.segs[0].base if self.segs else self.empty_end

    @property
    def end(self) -> int:
        return self.segs[-1].end if self.segs else self.empty_end

    @property
    def active(self) -> Segment | None:
        return self.segs[-1] if self.segs else None

    def roll(self) -> Segment:
        """Start a new segment at ``end``; on failure nothing changed and it can be retried.

        The full segment is fsynced first: it never changes again, so it is made durable once.
        An empty file left by a failed attempt is reused; a non-empty one is never overwritten.
        """
        base = self.end
        if self.segs:
            with self.segs[-1].use() as full:
                os.fsync(full)
        path = self.dir / segment_name(base, self.suffix)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size:
                raise StorageError(f"cannot start segment {path}: a non-empty file is there",
                                   path=str(path))
            fsync_dir(self.dir)
        except BaseException:
            os.close(fd)
            raise
        seg = Segment(base, path, 0)
        handles().adopt(seg, fd)
        self.segs = [*self.segs, seg]
        return seg

    def drop_oldest(self, count: int) -> int:
        """Delete the ``count`` oldest segments, never the active one; returns how many went."""
        count = min(count, len(self.segs) - 1)
        if count <= 0:
            return 0
        for seg in self._graveyard:
            handles().close(seg)
        self._graveyard = self.segs[:count]
        for seg in self._graveyard:
            handles().keep(seg)
        self.segs = self.segs[count:]
        for seg in self._graveyard:
            seg.path.unlink(missing_ok=True)
        fsync_dir(self.dir)
        return count

    def drop_newest(self, keep_fd: bool = False) -> None:
        """Delete the newest segment (cutting a log back); its base becomes the end.

        Recovery runs alone and closes the fd at once; with ``keep_fd`` (a live store
        truncating a partition while readers may hold a snapshot) it waits in the graveyard
        like the ones :meth:`drop_oldest` drops, so a reader never preads a recycled fd.
        """
        seg = self.segs[-1]
        self.segs = self.segs[:-1]
        if keep_fd:
            handles().keep(seg)
            self._graveyard = [*self._graveyard, seg]
        else:
            handles().close(seg)
        seg.path.unlink(missing_ok=True)
        self.empty_end = seg.base

    def close(self) -> None:
        for seg in self.segs + self._graveyard:
            handles().close(seg)
        self.segs, self._graveyard = [], []


class SegmentedLog:
    """What the data log and an index log share: their extent is their segment list's."""

    _list: SegmentList

    @property
    def start(self) -> int:
        return self._list.start

    @property
    def end(self) -> int:
        return self._list.end

    def close(self) -> None:
        self._list.close()


def pwrite_all(seg: Segment, data: memoryview, at: int, what: str) -> None:
    """Write all of ``data`` at byte ``at`` of ``seg`` (``pwrite`` may write less than asked).

    Raises StorageError (caused by the OSError, so ENOSPC stays visible) before the caller
    counts anything: bytes that did land lie past the log's end and the retry overwrites them.
    """
    fd = seg.pin()
    try:
        written = 0
        while written < len(data):
            written += pwrite(fd, data[written:], at + written)
    except OSError as exc:
        raise StorageError(f"{what} write failed in {seg.path}: {exc}") from exc
    finally:
        seg.unpin()
