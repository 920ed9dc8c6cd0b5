"""Where a store keeps its checkpoint: a file of its own, or one file for a whole data dir.

A checkpoint is written only after the data and index bytes it describes were fsynced
(storage/flusher.py), and recovery trusts it to skip scanning them (storage/recovery.py).

A store on its own (tools, tests) keeps ``checkpoint.json`` in its directory
(:class:`OwnCheckpoint`). A broker hosts thousands of stores, and one file per store cost
each store that took records a file rewrite (temp file, fsync, rename, directory fsync) every
``checkpoint_interval_ms``: at 1,000 busy topics, hundreds of file rewrites a second. So the
stores of a broker share one :class:`CheckpointFile`, as Kafka's brokers share
``recovery-point-offset-checkpoint``: a store hands its checkpoint over in memory, and one
thread writes the whole file at most once per interval. A crash loses at most the last
interval's hand-overs, which costs recovery a longer scan, never data: an older checkpoint is
always a valid one.

The stores' producer snapshots go the same way (storage/shared_snapshots.py): handed over in
memory, written into one file just before the checkpoint file, so a checkpoint on disk never
covers producer batches its snapshot on disk does not.

**One syncfs instead of the stores' index fsyncs** (Linux): a checkpoint says which index
entries recovery may trust, so they had to be on disk before the store handed it over: two
fsyncs (index and key hashes) per store per interval, most of the kernel time of a burst into
10,000 topics. Where ``syncfs`` exists, a store under the data dir's filesystem hands its
checkpoint over right after *writing* its index entries (``defers_sync``), and the writer
calls ``syncfs`` once, after taking the entries and before writing the files: every entry was
handed over after its index bytes were written, so that one call puts them all on disk.

**The same syncfs for async stores' data.** An ``async`` store fsynced its data log at least
once a second (``fsync_interval_ms``): at 10,000 topics written once each, 10,000 fdatasyncs,
each a pool thread's system call and GIL round trip. A store this file's syncfs covers instead
*rides* it (:meth:`CheckpointFile.ride` right after writing its block): the writer then runs a
syncfs within ``interval_s`` even when no checkpoint changed, and the store counts its bytes
synced once a syncfs that started after its write has ended (:meth:`CheckpointFile.synced`),
noticed at its next round. Its checkpoint may name what it has written, not only what it
fsynced: the writer's syncfs comes before the file that names it. Only the time-based fsync
rides (and only where ``fsync_interval_ms`` is at least ``interval_s``): the message and byte
counts, ``sync`` appends, ``flush()`` and ``close()`` still fsync the store's own data log.
When a syncfs fails, every store that rode it is woken to fsync its own, and stores fsync on
their own timers until a syncfs succeeds again. After a syncfs, every store that rode it drops
its synced pages beyond its share of ``page_cache_shared_bytes`` (:meth:`Rider.synced`; the
window and why: storage/datalog.py ``drop_cached``), and while what the stores keep is above
that budget, the one that kept its pages longest ago drops them all.

Entries are keyed by topic, topic id and store id, so a topic deleted and created again under
the same name never meets its predecessor's checkpoint.

The file is a line with the CRC-32 of the rest (hex), then the JSON ``{"version": 2,
"stores": {key: entry}}``. Each entry is encoded when it is put, and a write joins the
encoded entries: at 10,000 stores, encoding them all again (and escaping the whole body into a
sealed string, as version 1 did) every interval took a quarter of a busy broker's CPU. A
version 1 file is still read.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

from lib.errors import StorageError
from lib.logs import event
from storage import shared_snapshots
from storage.fsutil import atomic_write, syncfs, syncfs_available
from storage.producers import SNAPSHOT, Snapshot, decode_snapshot, read_snapshot
from storage.recovery import Checkpoint, read_checkpoint, unseal, write_checkpoint

log = logging.getLogger(__name__)
CHECKPOINTS = "store-checkpoints.json"
FORMAT_VERSION = 2


class Rider(Protocol):
    """A store's flusher riding the writer's syncfs (module docstring)."""

    def wake(self) -> None: ...

    def synced(self, generation: int, keep_bytes: int) -> int:
        """The syncfs of ``generation`` ended: keep at most ``keep_bytes`` of what it
        covered in the page cache (the writer's thread calls; it must not block). Returns
        about how many bytes it keeps."""


class OwnCheckpoint:
    """``checkpoint.json`` and ``producers.snap`` in the store's own directory, written at
    once on save; the store fsyncs its indexes before it saves a checkpoint."""

    defers_sync = False

    def __init__(self, store_dir: Path) -> None:
        self.store_dir = store_dir

    def rides(self, fsync_interval_s: float) -> bool:
        return False

    def leave(self, rider: Rider) -> None:
        pass

    def read(self) -> Checkpoint | None:
        return read_checkpoint(self.store_dir)

    def save(self, cp: Checkpoint) -> None:
        write_checkpoint(self.store_dir, cp)

    def read_snapshot(self) -> Snapshot | None:
        return read_snapshot(self.store_dir)

    def has_snapshot(self) -> bool:
        return (self.store_dir / SNAPSHOT).exists()

    def save_snapshot(self, snapshot: bytes) -> None:
        atomic_write(self.store_dir / SNAPSHOT, snapshot)


class CheckpointSlot:
    """One store's entries in a shared :class:`CheckpointFile`: its checkpoint and its
    producers' snapshot."""

    def __init__(self, owner: CheckpointFile, key: str, legacy_dir: Path) -> None:
        self.owner, self.key, self.legacy_dir = owner, key, legacy_dir
        self._defers: bool | None = None

    @property
    def defers_sync(self) -> bool:
        """Whether the file's writer syncs this store's index entries (module docstring):
        syncfs is there and the store is on the data dir's filesystem."""
        if self._defers is None:
            self._defers = self.owner.covers(self.legacy_dir)
        return self._defers

    def rides(self, fsync_interval_s: float) -> bool:
        """Whether the store's time-based fsync may ride the writer's syncfs: the syncfs
        covers it, and comes at least as often as the store's own would."""
        return self.defers_sync and fsync_interval_s >= self.owner.interval_s

    def ride(self, rider: Rider) -> int:
        return self.owner.ride(rider)

    def leave(self, rider: Rider) -> None:
        self.owner.leave(rider)

    def synced(self, generation: int) -> bool:
        return self.owner.synced(generation)

    @property
    def sync_failing(self) -> bool:
        return self.owner.sync_failing

    def read(self) -> Checkpoint | None:
        """The shared entry, else the store's own file of an older broker version."""
        return self.owner.get(self.key) or read_checkpoint(self.legacy_dir)

    def save(self, cp: Checkpoint) -> None:
        self.owner.put(self.key, cp)

    def read_snapshot(self) -> Snapshot | None:
        """The shared snapshot, else the store's own file of an older broker version."""
        raw = self.owner.snapshot(self.key)
        if raw is None:
            return read_snapshot(self.legacy_dir)
        return decode_snapshot(raw, f"{self.owner.snapshots_path}: {self.key}")

    def has_snapshot(self) -> bool:
        return (self.owner.snapshot(self.key) is not None
                or (self.legacy_dir / SNAPSHOT).exists())

    def save_snapshot(self, snapshot: bytes) -> None:
        self.owner.put_snapshot(self.key, snapshot)


class CheckpointFile:
    """The checkpoints and producer snapshots of every store of a data dir, one file each
    (module docstring).

    ``put`` and ``put_snapshot`` only record; a writer thread writes the files when something
    changed, at most once per ``interval_s``, and sleeps without a timeout when nothing did
    (an idle broker costs no wake-ups). ``close`` writes what is left. ``sync_fs``: call
    syncfs before each write (when the system has it), so stores may skip their index
    fsyncs.
    """

    def __init__(self, path: Path, interval_s: float,
                 clock: Callable[[], float] = time.monotonic, sync_fs: bool = True,
                 page_cache_shared_bytes: int = 0) -> None:
        self.path, self.interval_s, self.clock = path, interval_s, clock
        self.page_cache_shared_bytes = page_cache_shared_bytes  # 0: the riders keep theirs
        self.snapshots_path = path.with_name(shared_snapshots.SNAPSHOTS)
        self._entries: dict[str, Checkpoint] = load(path)
        snapshots = shared_snapshots.load(self.snapshots_path)
        if snapshots is None:  # damaged: the checkpoints may cover what only it remembered
            self._entries, snapshots = {}, {}
        self._encoded = {key: encode_entry(key, cp) for key, cp in self._entries.items()}
        self._snapshots = snapshots
        self._dir_fd = -1
        if sync_fs and syncfs_available():
            self._dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
            self._device = os.fstat(self._dir_fd).st_dev
        self._cond = threading.Condition()
        self._dirty = self._snapshots_dirty = self._closing = False
        self.syncs = 0  # syncfs calls: tests see the stores' index fsyncs gathered
        # Riders (module docstring): syncfs calls started and ended (generations), whether
        # one is wanted, who rode the next one, whether the last one failed.
        self._sync_started = self._sync_done = 0
        self._sync_wanted = False
        self._riders: set[Rider] = set()
        # Stores keeping synced pages, least recently synced first, with about how many
        # bytes each keeps, and their sum (the writer's thread; the lock is for leave).
        self._holders: dict[Rider, int] = {}
        self._held = 0
        self._holders_lock = threading.Lock()
        self.sync_failing = False
        self._last_write = -interval_s
        self.writes = 0  # files written: tests and metrics see the coalescing
        self._thread = threading.Thread(target=self._run, daemon=True, name="checkpoints")
        self._thread.start()

    def slot(self, topic: str, topic_id: int, store_id: int, store_dir: Path) -> CheckpointSlot:
        return CheckpointSlot(self, entry_key(topic, topic_id, store_id), store_dir)

    def covers(self, store_dir: Path) -> bool:
        """Whether this file's syncfs reaches ``store_dir`` (syncfs is on, same filesystem)."""
        try:
            return self._dir_fd >= 0 and os.stat(store_dir).st_dev == self._device
        except OSError:
            return False

    def get(self, key: str) -> Checkpoint | None:
        with self._cond:
            return self._entries.get(key)

    def snapshot(self, key: str) -> bytes | None:
        with self._cond:
            return self._snapshots.get(key)

    def put_snapshot(self, key: str, snapshot: bytes) -> None:
        """Record a store's snapshot; it reaches the disk before any checkpoint put after it."""
        with self._cond:
            self._snapshots[key] = snapshot
            self._snapshots_dirty = self._dirty = True
            self._cond.notify()

    def put(self, key: str, cp: Checkpoint) -> None:
        encoded = encode_entry(key, cp)  # outside the lock: every store's flusher puts
        with self._cond:
            self._entries[key] = cp
            self._encoded[key] = encoded
            self._dirty = True
            self._cond.notify()

    def ride(self, rider: Rider) -> int:
        """A store just wrote data for this file's syncfs to cover: one runs within
        ``interval_s``. Returns the generation whose end covers it (:meth:`synced`)."""
        with self._cond:
            self._riders.add(rider)
            if not self._sync_wanted:
                self._sync_wanted = True
                self._cond.notify()
            return self._sync_started + 1

    def synced(self, generation: int) -> bool:
        """Whether the syncfs of ``generation`` (or a later one) has ended."""
        return self._sync_done >= generation

    def leave(self, rider: Rider) -> None:
        """A closed store's flusher: forget what it kept (its pages went with its files or
        stay the kernel's to drop)."""
        with self._holders_lock:
            self._held -= self._holders.pop(rider, 0)

    def drop_topic(self, topic: str, topic_id: int) -> None:
        """Forget every store of one incarnation of a topic (its files are being deleted)."""
        prefix = entry_key(topic, topic_id, 0).rsplit("/", 1)[0] + "/"
        self._drop(lambda key: key.startswith(prefix))

    def drop_store(self, topic: str, topic_id: int, store_id: int) -> None:
        """Forget one store (its files are being deleted: it holds no partition any more)."""
        key = entry_key(topic, topic_id, store_id)
        self._drop(lambda k: k == key)

    def _drop(self, doomed_key: Callable[[str], bool]) -> None:
        with self._cond:
            doomed = [k for k in self._entries if doomed_key(k)]
            for k in doomed:
                del self._entries[k], self._encoded[k]
            snapshots = [k for k in self._snapshots if doomed_key(k)]
            for k in snapshots:
                del self._snapshots[k]
            if snapshots:
                self._snapshots_dirty = True
            if doomed or snapshots:
                self._dirty = True
                self._cond.notify()

    def close(self) -> None:
        """Write what changed since the last write, then stop the writer."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join()
        if self._dir_fd >= 0:
            os.close(self._dir_fd)
            self._dir_fd = -1

    def _run(self) -> None:
        while True:
            with self._cond:
                while not (self._dirty or self._sync_wanted or self._closing):
                    self._cond.wait()
                wait = self._last_write + self.interval_s - self.clock()
                if wait > 0 and not self._closing:
                    self._cond.wait(wait)  # gather the puts of one interval into one write
                    continue
                if not (self._dirty or self._sync_wanted):
                    return  # closing, and the file already says everything
                body = None
                if self._dirty:
                    body, self._dirty = dump(self._encoded.values()), False
                snapshots = None
                if self._snapshots_dirty:
                    snapshots = shared_snapshots.dump(self._snapshots.items())
                    self._snapshots_dirty = False
                riders, self._riders, self._sync_wanted = self._riders, set(), False
                self._sync_started += 1
                generation = self._sync_started
            self._write(body, snapshots, generation, riders)
            with self._cond:
                if self._closing and not self._dirty:
                    return

    def _write(self, body: bytes | None, snapshots: bytes | None, generation: int,
               riders: set[Rider]) -> None:
        """syncfs (the data and index entries the checkpoints name), the snapshots, the
        checkpoints: in that order, so neither file on disk claims what is not."""
        try:
            if self._dir_fd >= 0:
                self._sync(generation, riders)
            if snapshots is not None:
                atomic_write(self.snapshots_path, snapshots)
            if body is not None:
                atomic_write(self.path, body)
                self.writes += 1
        except StorageError as exc:  # an old checkpoint is still a valid one: retry later
            event(log, "store.checkpoint_write_failed", logging.ERROR, path=str(self.path),
                  error=exc.message)
            with self._cond:
                self._dirty = self._dirty or body is not None
                self._snapshots_dirty = self._snapshots_dirty or snapshots is not None
                if self._closing:  # nothing more to try: the next open scans further
                    self._dirty = self._snapshots_dirty = False
        self._last_write = self.clock()

    def _sync(self, generation: int, riders: set[Rider]) -> None:
        try:
            syncfs(self._dir_fd)
        except OSError as exc:
            self.sync_failing = True
            for rider in riders:  # their bytes are not on disk: each fsyncs its own now
                rider.wake()
            raise StorageError(f"cannot sync the filesystem of {self.path}: {exc}",
                               path=str(self.path)) from exc
        self.syncs += 1
        self._sync_done, self.sync_failing = generation, False
        if self.page_cache_shared_bytes:
            self._share_page_cache(generation, riders)

    def _share_page_cache(self, generation: int, riders: set[Rider]) -> None:
        """Each rider keeps at most its share of the budget; then the stores that kept pages
        longest ago drop all of theirs until the kept bytes fit the budget (a store written
        once is never a rider again: without this, 10,000 of them held GiBs of fresh pages)."""
        budget = self.page_cache_shared_bytes
        share = budget // len(riders) if riders else budget
        kept = {rider: rider.synced(generation, share) for rider in riders}
        with self._holders_lock:
            holders = self._holders
            for rider, n in kept.items():
                self._held += n - holders.pop(rider, 0)  # popped: back in as the newest
                if n > 0:
                    holders[rider] = n
            evicted = []
            while self._held > budget and holders:
                oldest = next(iter(holders))
                self._held -= holders.pop(oldest)
                evicted.append(oldest)
        for rider in evicted:
            rider.synced(generation, 0)


def entry_key(topic: str, topic_id: int, store_id: int) -> str:
    return f"{topic}#{int(topic_id)}/{int(store_id)}"


def encode_entry(key: str, cp: Checkpoint) -> str:
    """One entry as it goes into the file's ``stores`` object."""
    return f"{json.dumps(key)}:{json.dumps(cp.as_json(), separators=(',', ':'))}"


def dump(encoded: Iterable[str]) -> bytes:
    """The file: the CRC line, then the version and the encoded entries."""
    body = f'{{"version":{FORMAT_VERSION},"stores":{{{",".join(encoded)}}}}}'.encode()
    return b"%08x\n" % zlib.crc32(body) + body


def parse(raw: bytes) -> dict:
    """The JSON of a file :func:`dump` wrote (or a version 1 file, sealed); ValueError (or
    KeyError/TypeError) when it is damaged."""
    if raw[:1] == b"{":
        return unseal(raw)  # type: ignore[return-value]
    crc, sep, body = raw.partition(b"\n")
    if not sep or len(crc) != 8 or int(crc, 16) != zlib.crc32(body):
        raise ValueError("checksum mismatch")
    return json.loads(body)


def load(path: Path) -> dict[str, Checkpoint]:
    """The entries of ``path``; none when it is missing, damaged or of another version (every
    store then scans its whole data log, which is slow but exact)."""
    try:
        data = parse(path.read_bytes())
        if data["version"] not in (1, FORMAT_VERSION):
            raise ValueError(f"version {data['version']!r}")
        return {str(k): Checkpoint.from_json(v) for k, v in data["stores"].items()}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        event(log, "store.checkpoints_unreadable", logging.WARNING, path=str(path),
              error=repr(exc))
        return {}
