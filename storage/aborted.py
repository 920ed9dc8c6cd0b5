"""A partition's aborted-transaction index (Kafka's ``.txnindex``): the offset ranges of the
batches that aborted transactions wrote, for ``read_committed`` readers to leave out.

``p<N>/aborted`` holds fixed rows (first offset, last offset, producer id, marker offset), in
the order their abort markers were written. A row is written and fsynced *before* its marker
is appended (storage/store.py), so a marker in the log always has its rows; a crash between
the two leaves rows whose marker never made it, and those all have a marker offset at or past
the recovered log end (nothing is stored after a lost chunk), which :meth:`truncate` drops on
open. A truncation of the partition drops the rows of the markers it cut.

Lookups (:meth:`overlapping`) start at the first marker at or after the read's offset: a row
whose marker is before the read cannot overlap it (an aborted batch precedes its marker).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from lib.errors import StorageError
from storage.fsutil import fsync_dir

FILE = "aborted"
ROW = np.dtype([("first", "<i8"), ("last", "<i8"), ("producer_id", "<i8"), ("marker", "<i8")])


class AbortedIndex:
    """The rows of one partition, in memory and in ``<dir>/aborted``."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / FILE
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            raw = b""
        except OSError as exc:
            raise StorageError(f"cannot read {self.path}: {exc}", path=str(self.path)) from exc
        whole = len(raw) - len(raw) % ROW.itemsize  # a torn last row was never acknowledged
        self.rows = np.frombuffer(raw[:whole], ROW).copy()

    def __len__(self) -> int:
        return len(self.rows)

    def append(self, ranges: list[tuple[int, int]], producer_id: int, marker: int) -> None:
        """Durably add the ranges one abort marker (at offset ``marker``) covers."""
        if not ranges:
            return
        new = np.array([(a, b, producer_id, marker) for a, b in ranges], ROW)
        self._write(new.tobytes(), append=True)
        self.rows = np.concatenate([self.rows, new])

    def truncate(self, end: int) -> None:
        """Drop the rows of markers at or after offset ``end`` (the log ends there now)."""
        keep = self.rows["marker"] < end
        if keep.all():
            return
        self.rows = self.rows[keep]
        self._write(self.rows.tobytes(), append=False)

    def clear(self) -> None:
        self.truncate(-1)

    def overlapping(self, start: int, end: int) -> np.ndarray:
        """Rows with an aborted offset in [start, end), as (first, last) pairs."""
        rows = self.rows
        if not len(rows):
            return rows[["first", "last"]]
        tail = rows[np.searchsorted(rows["marker"], start, side="left"):]
        return tail[(tail["first"] < end) & (tail["last"] >= start)][["first", "last"]]

    def _write(self, data: bytes, append: bool) -> None:
        """Append (or rewrite) and fsync; a new file's directory entry is fsynced too."""
        new = not self.path.exists()
        tmp = self.path if append else self.path.with_name(FILE + ".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC),
                         0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            if not append:
                os.replace(tmp, self.path)
            if new or not append:
                fsync_dir(self.path.parent)
        except OSError as exc:
            raise StorageError(f"cannot write {self.path}: {exc}", path=str(self.path)) from exc
