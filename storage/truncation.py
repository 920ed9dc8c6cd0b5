"""Cutting one partition's log back (truncate) or restarting it further on (reset).

Replication needs both: a follower whose records past some offset diverged from its new
leader's truncates them (KIP-101), and a follower that fell behind the leader's earliest
offset starts over there. The partitions of a store share one data log, so the old frames
cannot be removed; instead the partition's index and counters are cut and a zero-record
*marker* chunk (storage/datalog.py) is appended with the new end as its base offset.
Recovery replays it like any chunk (storage/recovery.py ``_place``), so the cut records never
come back, whether the next open starts at the checkpoint or scans the whole data log.

Sequence, chosen for being easy to reason about (cuts are rare): flush, so that every record
of the partition is in the files and none waits in a cache block; then, holding the flusher's
``io_lock`` (no block write, checkpoint or retention meanwhile) and the store's lock (no
append), cut the leader epochs, the index files (fsynced) and the counters and put the marker
in the active block, so that no append of the partition can land before it; then flush again.
A crash before the second flush ends may leave the partition uncut: the caller, which had
not been told the cut was done, repeats it after the restart.

This is the store's other half for cuts, as storage/flusher.py is for writes: it works on the
store's state under the store's lock.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from lib.errors import OffsetOutOfRange, StorageError
from storage.datalog import CHUNK, chunk_header
from storage.fsutil import fsync_dir
from storage.index import INDEX_DTYPE

if TYPE_CHECKING:
    from storage.store import Store, _Partition


def cut(store: Store, partition: int, offset: int, reset: bool) -> None:
    """Truncate ``partition`` at ``offset`` or (``reset``) restart it there; module docstring.

    Raises OffsetOutOfRange (carrying earliest and latest) unless earliest <= offset <=
    latest for a truncation, or offset >= latest for a reset.
    """
    while True:
        store.flush()
        with store._flusher.io_lock, store._cond:
            part = store._writable_partition(partition)
            _check(store, part, partition, offset, reset)
            if _room_for_marker(store, part, partition):
                _cut_now(store, part, partition, offset, reset)
                break
    store.flush()


def _check(store: Store, part: _Partition, partition: int, offset: int, reset: bool) -> None:
    low, high = (part.next, None) if reset else (part.earliest, part.next)
    if isinstance(offset, int) and low <= offset and (high is None or offset <= high):
        return
    want = f">= latest {low}" if reset else f"in [earliest {low}, latest {high}]"
    raise OffsetOutOfRange(
        f"cannot {'reset' if reset else 'truncate'} {store.topic}/{partition} at offset "
        f"{offset}: it must be {want}", topic=store.topic, partition=partition,
        offset=offset, earliest=part.earliest, latest=part.next)


def _room_for_marker(store: Store, part: _Partition, partition: int) -> bool:
    """True when nothing of the partition waits in the cache and the marker fits in the
    active block; False: flush again (an append came in since the last flush)."""
    cache = store._cache
    if part.flushed < part.next or partition in cache.active.parts:
        return False
    if not cache.active.fits(CHUNK.size):
        if cache.flushing is not None:
            return False
        cache.swap()  # the flusher writes it once io_lock is released
        store._cond.notify_all()
    return True


def _cut_now(store: Store, part: _Partition, partition: int, offset: int, reset: bool) -> None:
    """Epochs, index files, counters, then the marker into the active block. A failure
    before the index is cut leaves nothing a retry would not redo."""
    if reset:
        part.epochs.clear()  # the log keeps no record to carry an old epoch
    else:
        part.epochs.truncate_from_end(offset)
    part.refresh_epoch()
    store._space.admit(CHUNK.size)  # the marker's bytes, like an append's
    store._unwritten += CHUNK.size
    _cut_index(store, part, offset, reset)
    part.next = part.flushed = offset
    part.opened = min(part.opened, offset)
    if reset:
        part.earliest = offset
    store._cache.active.add(partition, offset, chunk_header(partition, 0, offset, 0),
                            memoryview(b""), np.empty(0, INDEX_DTYPE))
    store._cond.notify_all()


def _cut_index(store: Store, part: _Partition, offset: int, reset: bool) -> None:
    """Cut the index files durably. Readers may hold the segments being dropped, so their
    fds stay open (``keep_fds``). An I/O error stops the store: the index files and the
    counters no longer agree."""
    index = part.index
    try:
        if reset:
            index.reset(offset, keep_fds=True)
        else:
            index.truncate(offset, keep_fds=True)
        index.sync()
        fsync_dir(index.dir)
        index.keep_end()  # an emptied index still says where the partition continues
    except (OSError, StorageError) as exc:
        store._failed = StorageError(f"store {store._name}: cutting the index in {index.dir} "
                                     f"failed: {exc}", path=str(index.dir))
        store._cond.notify_all()
        raise store._failed from exc
