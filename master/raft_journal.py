"""pysyncobj's journal made durable (master/raft.py's module docstring says why): importing
this module makes every SyncObj built afterwards keep its Raft log in a
:class:`SyncedJournal`."""
from __future__ import annotations

import logging
import os
from typing import Any

import pysyncobj.syncobj as _syncobj
from pysyncobj.journal import FileJournal

from lib.logs import event

log = logging.getLogger("master.raft")


class SyncedJournal(FileJournal):
    """pysyncobj's file journal, made durable: msync after each change, fsync of the votes."""

    def __init__(self, path: str) -> None:
        self._bulk = False
        self._meta_path = path + ".meta"
        super().__init__(path)

    def add(self, command: bytes, idx: int, term: int) -> None:
        super().add(command, idx, term)
        if not self._bulk:
            self.flush()

    def deleteEntriesFrom(self, entryFrom: int) -> None:  # noqa: N802 - pysyncobj's name
        super().deleteEntriesFrom(entryFrom)
        self.flush()

    def deleteEntriesTo(self, entryTo: int) -> None:  # noqa: N802
        self._bulk = True  # rewrites the journal entry by entry: one msync at the end
        try:
            super().deleteEntriesTo(entryTo)
        finally:
            self._bulk = False
        self.flush()

    def setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:  # noqa: N802, N803
        super().setCurrentTerm(term, votedForNodeId)
        _fsync_file(self._meta_path)


def _fsync_file(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as exc:
        event(log, "raft.fsync_failed", logging.ERROR, path=path, error=str(exc))


def _create_journal(path: str | None = None) -> Any:
    return _syncobj.MemoryJournal() if path is None else SyncedJournal(path)


_syncobj.createJournal = _create_journal  # SyncObj looks it up here at construction
