"""The time-ordered index of pending delayed records, on disk (LMDB).

A B-tree keyed by (partition, due, offset) whose values are the records' frames: the next
due records are a cursor walk from the front, never a scan of what is pending, and memory is
the OS page cache over the file, not the process's heap (a million pending records of 1 KiB
are a ~1.1 GiB file, of which only the pages being walked need be resident).

The index is a cache of the ``tubeq.delayed`` partitions, never the record of truth: each
partition's meta says up to which offset it was built and under which leader epoch. It is
written without fsync (a mover rebuilds what a crash of the machine lost from the partition,
which is replicated and fsynced as its topic says), and a file that cannot be opened is
set aside and built again.
"""
from __future__ import annotations

import json
import logging
import shutil
import struct
from collections.abc import Iterable
from pathlib import Path

import lmdb
import numpy as np

from lib.errors import InvalidArgument

log = logging.getLogger(__name__)

_KEY = struct.Struct(">IQQ")  # partition, due ms, offset: big-endian sorts by due time
_PREFIX = struct.Struct(">I")
MAP_SIZE = 1 << 40  # address space only: the file grows as entries land
DONE_DTYPE = np.dtype([("due", "<i8"), ("offset", "<i8")])  # a done record's entries


def pack_done(entries: np.ndarray) -> bytes:
    """A done record's value: the (due, offset) entries it delivered or dropped."""
    return np.ascontiguousarray(entries, DONE_DTYPE).tobytes()


def unpack_done(value: bytes) -> np.ndarray:
    if len(value) % DONE_DTYPE.itemsize:
        raise InvalidArgument(f"a done record's value must be a multiple of "
                              f"{DONE_DTYPE.itemsize} bytes, got {len(value)}")
    return np.frombuffer(value, DONE_DTYPE)


class DelayIndex:
    """Pending delayed records per partition of ``tubeq.delayed`` hosted here."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.env = self._open()
        except lmdb.Error as err:  # torn by a machine crash (no fsync): rebuilt from the log
            log.warning("delay_index.rebuild", extra={"path": str(path), "error": str(err)})
            shutil.rmtree(path, ignore_errors=True)
            self.env = self._open()
        self.entries = self.env.open_db(b"entries")
        self.meta = self.env.open_db(b"meta")

    def _open(self) -> lmdb.Environment:
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        return lmdb.open(str(self.path), map_size=MAP_SIZE, max_dbs=2, sync=False,
                         metasync=False, readahead=False)

    def state(self, partition: int) -> dict:
        """{"indexed_to", "epoch", "topic_id", "pending"}: empty for a partition never built."""
        with self.env.begin(db=self.meta) as txn:
            raw = txn.get(_PREFIX.pack(partition))
        return json.loads(raw) if raw else {}

    def update(self, partition: int, state: dict,
               added: Iterable[tuple[int, int, bytes]] = (), done: np.ndarray | None = None
               ) -> dict:
        """Add entries (due, offset, frame), remove ``done`` ones (DONE_DTYPE) and store the
        partition's new ``state``, in one transaction; returns the state with its count."""
        pending = int(state.get("pending", 0))
        with self.env.begin(write=True) as txn:
            for due, offset, frame in added:
                if txn.put(_KEY.pack(partition, due, offset), frame, db=self.entries,
                           overwrite=False):
                    pending += 1
            if done is not None:
                pending -= self._remove(txn, partition, done)
            state = {**state, "pending": max(0, pending)}
            txn.put(_PREFIX.pack(partition), json.dumps(state).encode(), db=self.meta)
        return state

    def remove(self, partition: int, done: np.ndarray) -> None:
        with self.env.begin(write=True) as txn:
            raw = txn.get(_PREFIX.pack(partition), db=self.meta)
            state = json.loads(raw) if raw else {}
            state["pending"] = max(0, int(state.get("pending", 0))
                                   - self._remove(txn, partition, done))
            txn.put(_PREFIX.pack(partition), json.dumps(state).encode(), db=self.meta)

    def _remove(self, txn: lmdb.Transaction, partition: int, done: np.ndarray) -> int:
        done = np.asarray(done, DONE_DTYPE)
        return sum(txn.delete(_KEY.pack(partition, int(d), int(o)), db=self.entries)
                   for d, o in zip(done["due"].tolist(), done["offset"].tolist(), strict=True)
                   if d >= 0)

    def due(self, partition: int, now_ms: int, limit: int,
            max_bytes: int) -> list[tuple[int, int, bytes]]:
        """The earliest entries due by ``now_ms``, in due order: at most ``limit`` of them and
        about ``max_bytes`` of frames (at least one)."""
        out: list[tuple[int, int, bytes]] = []
        size = 0
        with self.env.begin(db=self.entries) as txn:
            cursor = txn.cursor()
            if not cursor.set_range(_PREFIX.pack(partition)):
                return out
            for key, value in cursor:
                p, due, offset = _KEY.unpack(key)
                if p != partition or due > now_ms or len(out) >= limit \
                        or (out and size + len(value) > max_bytes):
                    break
                out.append((due, offset, bytes(value)))
                size += len(value)
        return out

    def next_due(self, partition: int) -> int | None:
        """When this partition's earliest pending record falls due (None: nothing pending)."""
        with self.env.begin(db=self.entries) as txn:
            cursor = txn.cursor()
            if not cursor.set_range(_PREFIX.pack(partition)):
                return None
            p, due, _ = _KEY.unpack(cursor.key())
            return due if p == partition else None

    def forget(self, partition: int, from_offset: int = 0) -> None:
        """Drop the entries at or after ``from_offset`` (all by default) and, with all, the
        partition's state: its log was cut back or its topic made anew. A walk of the
        partition's entries: rare (a leader change after a truncation)."""
        with self.env.begin(write=True) as txn:
            cursor = txn.cursor(db=self.entries)
            dropped = 0
            if cursor.set_range(_PREFIX.pack(partition)):
                while True:
                    key = cursor.key()
                    if not key or _KEY.unpack(key)[0] != partition:
                        break
                    if _KEY.unpack(key)[2] >= from_offset:
                        if not cursor.delete():
                            break
                        dropped += 1
                    elif not cursor.next():
                        break
            if from_offset <= 0:
                txn.delete(_PREFIX.pack(partition), db=self.meta)
            else:
                raw = txn.get(_PREFIX.pack(partition), db=self.meta)
                state = json.loads(raw) if raw else {}
                state["pending"] = max(0, int(state.get("pending", 0)) - dropped)
                state["indexed_to"] = min(int(state.get("indexed_to", 0)), from_offset)
                txn.put(_PREFIX.pack(partition), json.dumps(state).encode(), db=self.meta)

    def sync(self) -> None:
        self.env.sync(True)

    def close(self) -> None:
        self.env.close()
