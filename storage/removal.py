"""Removing one partition's copy from a store, and the *origin* that keeps it removed.

Replication moves partitions between brokers (reassignment): a broker that no longer holds a
copy deletes it, and may later be given the same partition again, which must then start
empty and copy its leader's log afresh. The partitions of a store share one data log, so the
old copy's chunks stay there until retention ages them out; what goes is the partition's
index dir (``p<N>``, its leader-epoch file included).

The origin: an index dir created new records in ``origin`` the data-log position its copy
starts at (where the next chunk goes at that moment), and recovery ignores the partition's
chunks below it (storage/recovery.py): they belong to an earlier copy, whether the open
starts at the checkpoint or scans the whole log. A dir without the file was written by an
older version: origin 0. A dir is created whole (a temp dir holding the file, renamed into
place) and removed whole (renamed aside, then deleted), so a crash never leaves an index
without its origin; what it leaves aside is deleted when the store opens (:func:`sweep`).
A dir missing at open is created with the position where the partition's last removed copy
ended (``removed.json`` in the store dir), or 0 when it never had one: an index dir lost by
accident is rebuilt from the whole data log, as before origins existed.

Removal (:meth:`storage.store.Store.remove_partition`), holding the flusher's ``io_lock`` (no
block write, checkpoint or retention meanwhile) and the store's lock (no append or read picks
the partition up): the partition's log records where the copy ended and renames its dir aside
(:meth:`storage.partition_log.PartitionLog.remove`), then the store forgets the partition and
both cache blocks drop its index entries. The bytes of its chunks stay in the blocks and
reach the data log below the origin of any later copy, so unlike a truncation this needs no
flush (nothing of the copy is kept) and works on a full disk; the flusher, which finds indexes
only through the store's partitions and the blocks' entries, never touches the index again.
Then, outside the locks, the store dir is fsynced and the saved checkpoint forgets the
partition (:func:`settle`), and the dir is deleted. A reader that took the partition before
keeps reading the files it holds open: their fds are closed at the next removal or at close,
never while a recycled fd could point at another file.

These are the files' side only: functions of paths, used by the partition's log and the store.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path

from lib.errors import StorageError
from lib.logs import event
from storage.checkpoints import CheckpointSlot, OwnCheckpoint
from storage.fsutil import atomic_write, fsync_dir
from storage.recovery import Checkpoint

log = logging.getLogger(__name__)
ORIGIN = "origin"
REMOVED = "removed.json"  # in the store dir: where each removed copy ended
_NEW, _REMOVED = ".new", ".removed."  # suffixes of dirs being created or removed
_INDEX_DIR = re.compile(r"p(0|[1-9][0-9]*)")


def set_aside(directory: Path) -> Path:
    """Rename ``directory`` to a fresh name of its own: one atomic step takes the whole copy
    away, and the deletion can wait until the locks are released."""
    trash = Path(_io(tempfile.mkdtemp, prefix=directory.name + _REMOVED, dir=directory.parent))
    try:
        os.replace(directory, trash)  # onto an empty dir: allowed, and atomic
    except OSError as exc:
        trash.rmdir()
        raise StorageError(f"cannot remove the partition index dir {directory}: {exc}",
                           path=str(directory)) from exc
    return trash


def settle(store_dir: Path, checkpoint: OwnCheckpoint | CheckpointSlot, partition: int) -> None:
    """After the dir was set aside: make the removal durable (a reopen creates the dir anew)
    and save the checkpoint without the partition: still valid for the others, and a later
    copy is not checked against the removed one's offsets (which would cost a full scan)."""
    _io(fsync_dir, store_dir)
    cp = checkpoint.read()
    if cp is not None and partition in cp.next_offsets:
        rest = {p: n for p, n in cp.next_offsets.items() if p != partition}
        checkpoint.save(Checkpoint(cp.position, rest))


def record_removal(store_dir: Path, partition: int, position: int) -> None:
    """Remember where the removed copy ended: a copy placed here again while the store was
    closed is opened with no dir, and starts there (:func:`removed_at`)."""
    removed = removed_at(store_dir)
    removed[partition] = position
    _io(atomic_write, store_dir / REMOVED,
        json.dumps({str(p): n for p, n in sorted(removed.items())}).encode())


def removed_at(store_dir: Path) -> dict[int, int]:
    """Partition -> data position after its last removed copy (empty: none removed)."""
    try:
        return {int(p): int(n) for p, n in json.loads((store_dir / REMOVED).read_bytes()).items()}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, AttributeError) as exc:
        event(log, "store.removals_unreadable", logging.WARNING, path=str(store_dir / REMOVED),
              error=repr(exc))
        return {}


def create_dir(directory: Path, origin: int) -> None:
    """Create a partition's index dir whole, with its ``origin``; an existing one is kept."""
    if directory.exists():
        return
    tmp = directory.with_name(directory.name + _NEW)
    shutil.rmtree(tmp, ignore_errors=True)  # half made before a crash
    _io(tmp.mkdir, parents=True)
    write_origin(tmp, origin)
    _io(os.replace, tmp, directory)
    _io(fsync_dir, directory.parent)


def read_origin(directory: Path) -> int:
    """The data-log position the copy in ``directory`` starts at (0: an older version's dir).

    A damaged file (it is written atomically, so only a disk can damage it) is logged and
    read as 0 too: the copy then keeps what recovery finds of the partition, as it did before
    origins existed."""
    path = directory / ORIGIN
    try:
        return int(path.read_bytes())
    except FileNotFoundError:
        return 0
    except (OSError, ValueError) as exc:
        event(log, "store.origin_unreadable", logging.WARNING, path=str(path), error=repr(exc))
        return 0


def write_origin(directory: Path, origin: int) -> None:
    atomic_write(directory / ORIGIN, b"%d\n" % origin)


def partition_dirs(store_dir: Path) -> list[int]:
    """The partitions that have an index dir in ``store_dir`` (none when it does not exist)."""
    if not store_dir.is_dir():
        return []
    found = (_INDEX_DIR.fullmatch(d.name) for d in store_dir.iterdir() if d.is_dir())
    return sorted(int(m[1]) for m in found if m)


def sweep(store_dir: Path) -> None:
    """Delete the dirs a crash left half created or set aside (module docstring)."""
    for d in store_dir.glob("p*"):
        if d.name.endswith(_NEW) or _REMOVED in d.name:
            shutil.rmtree(d, ignore_errors=True)


def _io(op, *args, **kwargs):
    """``op(*args, **kwargs)``, an OSError turned into a StorageError naming the path."""
    try:
        return op(*args, **kwargs)
    except OSError as exc:
        raise StorageError(f"partition dir operation {op.__name__} failed: {exc}",
                           path=str(exc.filename or "")) from exc
