"""The background writer of one store: the only code that writes, fsyncs or deletes its files.

It runs as a task of a :class:`~storage.flusher_pool.FlusherPool` (a few threads for every
store of the process, not a thread per store: a broker holds thousands). Each round
(:meth:`Flusher.step`) runs when something is due (:class:`~storage.sync_policy.SyncPolicy`
says when): it swaps the active cache block out, writes it (data log first, then each
partition's index), fsyncs the data log when the policy says so (in a broker an async store's
time-based fsync rides the data dir's syncfs: storage/checkpoints.py), saves a checkpoint every
``checkpoint_interval_ms`` and applies retention every ``retention_check_interval_ms``. The
checkpoint goes where the store keeps it: its own file, or a broker's shared one
(storage/checkpoints.py). The flusher is the store's other half: it works on the state the
two share (a :class:`~storage.core.StoreCore`: cache pair, partition counters, disk-full and
failure flags) under the store's lock (``core.cond``), and does its I/O outside it, holding
``io_lock`` so that retention called from outside never runs beside a write. Appends of
``sync`` topics and flushes wait for its fsync (:meth:`Flusher.wait_synced`: one fsync serves
every waiter).

A full disk is a condition, not a failure. If a write or fsync fails with ENOSPC/EDQUOT (space
was admitted by the :class:`~storage.space.SpaceGuard`, but another process took it), the
flusher keeps the block, the store refuses appends with DiskFull, and the flusher retries every
``DISK_FULL_RETRY_S``; the retry resumes at the data log's and each index's end, so it is exact.
A closing store retries for ``DISK_FULL_CLOSE_S``, then logs every offset range it could not
write. Any other I/O error stops the store for good.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from lib.errors import DiskFull, StorageError, StoreClosed
from lib.logs import event
from storage.cache import CacheBlock
from storage.core import StoreCore
from storage.datalog import DROP_ALIGN
from storage.flusher_pool import FlusherPool, default_pool
from storage.index import ENTRY
from storage.producers import SnapshotSchedule, encode_snapshot
from storage.recovery import Checkpoint
from storage.retention import segments_to_delete
from storage.space import is_disk_full
from storage.sync_policy import SyncPolicy

log = logging.getLogger(__name__)
DISK_FULL_RETRY_S = 0.5  # a flusher on a full disk tries again this often
DISK_FULL_CLOSE_S = 3.0  # close() on a full disk retries this long, then logs what is lost
MAX_IDLE_S = 3600.0  # an idle flusher runs at least this often


class Flusher:
    """Writes the cache blocks of a store (its ``core``, storage/core.py) to its files, as a
    task of a flusher pool (module docstring)."""

    def __init__(self, core: StoreCore, policy: SyncPolicy,
                 wall_clock: Callable[[], float], pool: FlusherPool | None = None) -> None:
        self.core, self.policy = core, policy
        self.pool = pool or default_pool()
        self._slot = None  # the pool's handle, once started
        self._done = threading.Event()  # the last round ran: closed, or failed for good
        self.steps = 0  # times a pool thread ran it (an idle store adds none)
        self.clock, self.wall_clock = policy.clock, wall_clock
        self.io_lock = threading.Lock()  # file structure changes: writes and retention
        # Under the store's lock: the data position sync waiters need fsynced, and the one
        # the last fsync covered (wait_synced).
        self.sync_target, self.synced_pos = 0, core.data.end
        self._unsynced = policy.synced_now()
        # Riding the broker's syncfs (storage/checkpoints.py): the generation that covers the
        # unsynced bytes, and the data log's end they reach.
        self._riding = core.checkpoint.rides(policy.fsync_interval_ms / 1e3)
        self._ride_generation, self._ride_end = 0, 0
        # A syncfs's page-cache drop (generation, bytes to keep) waiting for ``io_lock``.
        self._drop_wanted: tuple[int, int] | None = None
        self._last_checkpoint = self.clock()
        self._checkpointed = -1  # data log end at the last checkpoint: unchanged, none is due
        self._last_retention = self.clock()  # first check one interval after open
        self._disk_full_since = 0.0
        self._written: CacheBlock | None = None  # the block being flushed, once in the files
        self._snapshots = SnapshotSchedule(core.checkpoint.has_snapshot(),
                                           core.config.producer_snapshot_interval_ms / 1e3,
                                           self.clock)
        core.wake_flusher = self.wake

    def start(self) -> None:
        self._slot = self.pool.add(self)

    def wake(self) -> None:
        """Something may be due sooner (an append, a sync waiter, close): run a round soon."""
        if self._slot is not None:
            self.pool.wake(self._slot)

    def join(self) -> None:
        """Until the last round ran (the store closes, or it failed for good)."""
        self._done.wait()

    def wait_synced(self, end_pos: int) -> None:
        """Wait, holding the store's condition, until the data log is fsynced up to ``end_pos``
        (group commit: one fsync serves every waiter); raises the store's failure, DiskFull
        or StoreClosed if that cannot happen. On a full disk a waiter gets DiskFull at once:
        its batch stays cached and is written when space returns, but it was not
        acknowledged, so a retry may store it twice."""
        c = self.core
        self.sync_target = max(self.sync_target, end_pos)
        self.wake()
        c.cond.wait_for(lambda: self.synced_pos >= end_pos or c.closed
                        or c.failed is not None or c.disk_full is not None)
        if self.synced_pos < end_pos:
            raise c.failed or c.disk_full or StoreClosed(f"store {c.name} closed")

    def enforce_retention(self, now: float) -> int:
        """Apply retention now (wall-clock ``now``); returns how many data segments went."""
        with self.io_lock:
            return self._apply_retention(now)

    # ------------------------------------------------------------------ the loop

    def step(self) -> float | None:
        """One round, if one is due (a pool thread calls it); seconds until the next one
        may be (0: at once), None once the last round ran. A round that raises past its own
        handling still ends the flusher (the pool logs it): ``join`` must never hang."""
        try:
            return self._step()
        except BaseException:
            self._done.set()
            raise

    def _step(self) -> float | None:
        c = self.core
        self.steps += 1
        with c.cond:
            wait = self._wait_s()
            if wait > 0:
                return wait
            block, closing, sync_wanted = self._next_block()
        try:
            with self.io_lock:
                self._write_block(block, sync_wanted or closing)
                self._maybe_checkpoint(closing)
                self._maybe_retention()
                self._drop_synced()
        except Exception as exc:  # noqa: BLE001 - a dead flusher must never be silent
            if is_disk_full(exc) and self._wait_for_space(exc, closing):
                return DISK_FULL_RETRY_S
            self._fail(exc if isinstance(exc, StorageError) else
                       StorageError(f"store {c.name} flusher: {exc!r}"))
            self._done.set()
            return None
        if c.disk_full is not None:
            self._space_back()
        if closing and block is None:
            c.checkpoint.leave(self)
            self._done.set()
            return None
        with c.cond:
            return self._wait_s()

    def _next_block(self) -> tuple[CacheBlock | None, bool, bool]:
        """Swap the active block out if it is due (holding the store's condition). Returns the
        block to write (None: nothing), whether the store closes and whether a waiter wants a
        sync."""
        c, cache = self.core, self.core.cache
        closing = c.closing
        waited_for = closing or self.sync_target > cache.active.base_pos
        if cache.flushing is None and self.policy.write_due(cache.active, waited_for):
            cache.swap()
            c.cond.notify_all()
        return cache.flushing, closing, self.sync_target > self.synced_pos

    def _wait_s(self) -> float:
        """0 when a round is due (holding the store's condition), else how long until a
        time-based deadline (block age, fsync, housekeeping) comes. A wake recomputes it:
        the first append into an empty block shortens it from the next housekeeping to the
        block's flush interval."""
        if self._due():
            return 0.0
        c = self.core
        return max(0.0, self.policy.wait_s(c.cache.active, self._unsynced,
                                           self._housekeeping_s(), self._timed()))

    def _timed(self) -> bool:
        """Whether the time-based fsync is this store's own (not riding, or the writer's
        syncfs failing)."""
        return not self._riding or self.core.checkpoint.sync_failing

    def _checkpointable(self) -> int:
        """The data position a checkpoint may name now: what is fsynced, or for a rider
        what is written (the writer's syncfs comes before the file that names it)."""
        return self.core.data.end if self._riding else self.synced_pos

    def _housekeeping_s(self) -> float:
        """Seconds to the next retention check or, when a new synced position awaits one, the
        next checkpoint: an idle store sleeps this long (a broker holds thousands of them).
        Unsynced bytes wait for their fsync, whose own timer wakes the flusher."""
        c, cfg, now = self.core, self.core.config, self.clock()
        wait = min(self._last_retention + cfg.retention_check_interval_ms / 1e3 - now,
                   MAX_IDLE_S)
        if (self._checkpointable() != self._checkpointed
                and (self._riding or not self._unsynced.bytes) and c.cache.flushing is None):
            wait = min(wait, self._last_checkpoint + cfg.checkpoint_interval_ms / 1e3 - now)
        return max(wait, 0.0)

    def _due(self) -> bool:
        c = self.core
        return (c.closing or c.cache.flushing is not None or self._drop_wanted is not None
                or self.sync_target > self.synced_pos or self.policy.block_due(c.cache.active))

    def _write_block(self, block: CacheBlock | None, sync_wanted: bool) -> None:
        """Write one block (data first, then index entries), then fsync if due.

        Resumes where a failed attempt stopped: the data log's and each index's end say what
        of this block is already in the files (they only count bytes fully written).
        """
        c = self.core
        nbytes = 0 if block is None else block.fill + block.messages * ENTRY
        if block is not None and block is not self._written:
            self._write_files(block)
            self._written = block  # an fsync failing now must not count the block twice
            self._unsynced = self._unsynced.add(block.messages, block.fill)
            c.space.written(nbytes)
            if self._riding:
                self._ride_generation, self._ride_end = c.checkpoint.ride(self), c.data.end
        synced = None
        if (self._riding and self._unsynced.bytes
                and c.checkpoint.synced(self._ride_generation)):
            self._unsynced = self.policy.synced_now()  # a syncfs since the last write
            synced = self._ride_end
        if self.policy.fsync_due(self._unsynced, sync_wanted, self._timed()):
            c.data.sync()
            self._unsynced = self.policy.synced_now()
            synced = c.data.end
        if synced is not None and c.config.page_cache_window_bytes:
            c.data.drop_cached(synced - c.config.page_cache_window_bytes)
        with c.cond:
            if block is not None:
                for p, entries in block.parts.items():
                    c.parts[p].flushed = entries.first_offset + entries.n
                c.cache.flushed()
                self._written = None
                c.unwritten -= nbytes
            if synced is not None:
                self.synced_pos = synced
            elif not self._unsynced.bytes:
                self.synced_pos = c.data.end
            c.cond.notify_all()

    def _write_files(self, block: CacheBlock) -> None:
        c = self.core
        done = c.data.end - block.base_pos
        if done < block.fill:
            c.data.write(block.data()[done:])
        for p, entries in block.parts.items():
            part = c.parts[p]
            index = part.index
            done = index.end - entries.first_offset
            if done < entries.n:
                index.append(entries.view()[done:])
            unkeyed = (0, 0) if entries.keyed else (entries.first_offset, entries.end_offset)
            part.keys.catch_up(index, lambda pos, n: _frames_of(block, c, pos, n),
                               c.data.start, unkeyed)

    def synced(self, generation: int, keep_bytes: int) -> int:
        """The data dir's syncfs of ``generation`` ended (the checkpoint writer's thread):
        drop this store's pages it covered beyond ``keep_bytes`` (or the store's own window,
        if smaller). Never waits: while the flusher holds the files, its next round drops
        them. Returns about how many bytes of its data log the page cache keeps then."""
        c = self.core
        window = c.config.page_cache_window_bytes
        if not window or c.closing or c.closed:
            return 0
        self._drop_wanted = (generation, keep_bytes)
        if self.io_lock.acquire(blocking=False):
            try:
                self._drop_synced()
            finally:
                self.io_lock.release()
        else:
            self.wake()
        return max(0, min(window, keep_bytes, self._ride_end - c.data.uncached))

    def _drop_synced(self) -> None:
        """:meth:`synced`'s drop, holding ``io_lock``."""
        wanted, self._drop_wanted = self._drop_wanted, None
        c = self.core
        if wanted is None or c.closing or c.closed:
            return
        generation, keep_bytes = wanted
        if not 0 < self._ride_generation <= generation:
            return  # written since that syncfs began: a later one covers it, and drops it
        keep = min(c.config.page_cache_window_bytes, keep_bytes)
        try:
            c.data.drop_cached(self._ride_end - keep, whole=keep >= DROP_ALIGN)
        except (OSError, StorageError) as exc:  # a hint to the kernel: never worth failing
            event(log, "store.page_cache_drop_failed", logging.WARNING, store=c.name,
                  error=str(exc))

    def _maybe_checkpoint(self, force: bool) -> None:
        c = self.core
        elapsed_ms = (self.clock() - self._last_checkpoint) * 1e3
        if not force and elapsed_ms < c.config.checkpoint_interval_ms:
            return
        with c.cond:
            if (self._unsynced.bytes and not self._riding) or c.cache.flushing is not None:
                return  # only a fully synced, fully indexed position may be checkpointed
            position = self._checkpointable()
            if position == self._checkpointed and not force:
                self._last_checkpoint = self.clock()
                return  # nothing was written since: the file on disk says it all
            next_offsets = {p: part.flushed for p, part in c.parts.items()}
            parts = list(c.parts.values())  # add_partition may insert while we sync
            snapshot = self._snapshots.due(c.parts, position, int(self.wall_clock() * 1e3),
                                           force)
        if not c.checkpoint.defers_sync:  # else one syncfs of the data dir covers them
            for part in parts:
                part.index.sync()
                part.keys.sync()
        if snapshot is not None:  # before the checkpoint: one that covers producer batches
            self._write_snapshot(position, *snapshot)  # never comes without a snapshot
        c.checkpoint.save(Checkpoint(position, next_offsets))
        self._last_checkpoint, self._checkpointed = self.clock(), position

    def _write_snapshot(self, position: int, rows: tuple, state: tuple) -> None:
        """A failed snapshot costs recovery a longer scan (from the previous one), never
        data: logged, and tried again at the next checkpoint."""
        try:
            self.core.checkpoint.save_snapshot(encode_snapshot(position, *rows))
        except StorageError as exc:
            event(log, "store.producer_snapshot_failed", logging.ERROR, store=self.core.name,
                  error=exc.message)
            return
        self._snapshots.written(state)

    def _maybe_retention(self) -> None:
        interval = self.core.config.retention_check_interval_ms / 1e3
        if self.clock() - self._last_retention >= interval:
            self._apply_retention(self.wall_clock())

    def _apply_retention(self, now: float) -> int:
        c, cfg = self.core, self.core.config
        self._last_retention = self.clock()
        doomed = segments_to_delete(c.data.segment_info(), retention_ms=cfg.retention_ms,
                                    retention_bytes=cfg.retention_bytes, now=now)
        if doomed:
            with c.cond:
                c.data.delete_oldest(doomed)
                c.refresh_earliest()
                parts = list(c.parts.values())  # add_partition may insert meanwhile
            for part in parts:
                part.index.delete_before(part.earliest)
                part.keys.delete_before(part.index.start)
        return doomed

    # ---------------------------------------------------------------- full disk

    def _wait_for_space(self, exc: BaseException, closing: bool) -> bool:
        """Enter (or stay in) the disk-full condition; True: try again in
        ``DISK_FULL_RETRY_S`` (a close wakes it sooner), False: give up (closing)."""
        c = self.core
        with c.cond:
            first = c.disk_full is None
            if first:
                self._disk_full_since = self.clock()
                c.disk_full = self._space_error(exc)
                c.space.blocked(c.name, str(exc))
                c.cond.notify_all()  # appenders waiting for room get DiskFull now
            if closing and self.clock() - c.close_started >= DISK_FULL_CLOSE_S:
                return False
            if first:
                event(log, "store.disk_full", logging.ERROR, store=c.name, error=str(exc),
                      unwritten_bytes=c.unwritten)
        try:
            with self.io_lock:
                self._maybe_retention()  # deleting old segments may be what frees the space
        except Exception:  # noqa: BLE001 - the write retry reports what matters
            pass
        return True

    def _space_error(self, exc: BaseException) -> DiskFull:
        c = self.core
        status = c.space.status()
        return DiskFull(
            f"disk full: store {c.name} cannot write to {c.dir} ({exc}); "
            f"{status.free_bytes} bytes free, reserve {status.reserve_bytes} bytes; "
            f"{c.unwritten} bytes wait in memory; appends resume when space is freed",
            path=str(c.dir), free_bytes=status.free_bytes,
            reserve_bytes=status.reserve_bytes, unwritten_bytes=c.unwritten)

    def _space_back(self) -> None:
        c = self.core
        with c.cond:
            c.disk_full = None
            c.cond.notify_all()
        c.space.unblocked(c.name)
        event(log, "store.disk_space_back", store=c.name,
              seconds=round(self.clock() - self._disk_full_since, 3))

    def _fail(self, error: StorageError) -> None:
        c = self.core
        with c.cond:
            c.failed = error
            lost = {p: [part.flushed, part.next - 1]  # in memory, not in the files
                    for p, part in c.parts.items() if part.next > part.flushed}
            nbytes, c.unwritten = c.unwritten, 0
            c.cond.notify_all()
        c.space.forget(nbytes)
        c.space.unblocked(c.name)
        if lost:  # acknowledged async appends that will never reach the files: say which
            event(log, "store.unwritten_lost", logging.ERROR, store=c.name,
                  error=error.message, bytes=nbytes, offsets=lost)


def _frames_of(block: CacheBlock, core: StoreCore, pos: int, n: int) -> memoryview | bytes:
    """Data-log bytes [pos, pos + n) for the key hashes: from the block being written when
    it holds them (the usual case), else from the data log (just written there)."""
    if block.base_pos <= pos and pos + n <= block.end_pos:
        return block.slice(pos, n)
    return core.data.read(pos, n)
