"""Idempotent producers' de-duplication state of a partition, kept with its data.

A batch of an idempotent producer carries ``producer_id``, ``producer_epoch`` (from the active
master) and ``base_sequence`` (of its first record; each record takes one). Per producer the
partition keeps its last :data:`WINDOW` appended batches. For a new batch:

- epoch lower than the one seen: :class:`ProducerFenced` (a newer instance took over the id);
- epoch higher: a new producer session, appended and the window restarts;
- ``base_sequence`` of a batch in the window: a retry, answered with that batch's offsets;
- ``base_sequence`` right after the last batch (or no state yet): appended;
- anything else: :class:`OutOfOrderSequence` (a gap, or a retry older than the window).

**Kept with the data** (Kafka's producer-state snapshots): each such batch's chunk header
carries the producer's fields (storage/datalog.py), and the store writes the windows of its
partitions to ``producers.snap`` now and then (:func:`write_snapshot`), as of a data position
``S`` whose bytes are all fsynced. On open, recovery scans the data log from ``S`` at the
latest (storage/recovery.py) and the store replays the scanned chunks over the snapshot, so a
retry that straddles a restart of the broker is answered with its original offsets. What is
lost is what the data log lost: a batch that never reached the disk is not in the windows
either, and its retry is appended (once).

**Bounded**: a partition remembers at most ``max_producers`` producers; the least recently
used goes first, and a producer unused for ``expiry_ms`` is dropped at the next snapshot
(Kafka's ``producer.id.expiration.ms``). A retry of a forgotten producer is appended as new.

**Replication**: a follower keeps the same windows for the partitions it copies, from the
producer batches its leader lists in each ReplicaFetch answer (:meth:`between`,
:meth:`adopt`), and drops the batches of records it truncates away (:meth:`truncate`).

Not thread-safe: the store calls it under its lock.
"""
from __future__ import annotations

import logging
import struct
import zlib
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lib.errors import OutOfOrderSequence, ProducerFenced
from lib.logs import event
from storage.fsutil import atomic_write

log = logging.getLogger(__name__)

WINDOW = 5
SNAPSHOT = "producers.snap"
SNAP_HEAD = struct.Struct("<4sIqqI")  # magic, version, position, rows, crc of the rows
SNAP_MAGIC = b"TQPS"
SNAP_VERSION = 1
SNAP_DTYPE = np.dtype([("partition", "<u4"), ("producer_id", "<i8"), ("epoch", "<i4"),
                       ("base_sequence", "<i4"), ("count", "<u4"), ("base_offset", "<i8"),
                       ("end_pos", "<i8"), ("used_ms", "<i8")])


@dataclass(frozen=True)
class ProducerLimits:
    """How much a partition remembers (StoreConfig's ``producer_state_*``)."""

    max_producers: int = 1000
    expiry_ms: int = 86_400_000


@dataclass(frozen=True)
class ProducerBatch:
    """One appended batch of an idempotent producer."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    count: int
    base_offset: int
    end_pos: int = -1  # data position right after its chunk (-1: copied, not known here)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.count - 1


@dataclass
class _Producer:
    epoch: int
    used_ms: int
    batches: deque[ProducerBatch] = field(default_factory=lambda: deque(maxlen=WINDOW))


class ProducerWindows:
    """The windows of one partition (module docstring)."""

    def __init__(self, topic: str, partition: int,
                 limits: ProducerLimits = ProducerLimits()) -> None:
        self.topic, self.partition = topic, partition
        self.max_producers, self.expiry_ms = limits.max_producers, limits.expiry_ms
        self._producers: dict[int, _Producer] = {}
        self.version = 0  # moves on every change: the store snapshots a changed state

    def __len__(self) -> int:
        return len(self._producers)

    def check(self, producer_id: int, epoch: int, base_sequence: int, count: int
              ) -> ProducerBatch | None:
        """The stored copy of this batch, or None to append it (raises as the module
        docstring says)."""
        state = self._producers.get(producer_id)
        if state is None:
            return None
        if epoch < state.epoch:
            raise ProducerFenced(
                f"producer {producer_id} epoch {epoch} is fenced by epoch {state.epoch} on "
                f"{self.topic}/{self.partition}", producer_id=producer_id, epoch=epoch,
                current_epoch=state.epoch)
        if epoch > state.epoch or not state.batches:
            return None
        for b in state.batches:
            if b.base_sequence == base_sequence and b.count == count:
                return b
        expected = state.batches[-1].base_sequence + state.batches[-1].count
        if base_sequence == expected:
            return None
        raise OutOfOrderSequence(
            f"producer {producer_id} sent base sequence {base_sequence} to "
            f"{self.topic}/{self.partition}, expected {expected}"
            + (" (a gap: earlier batches were lost)" if base_sequence > expected else
               f" (older than the last {WINDOW} batches)"),
            producer_id=producer_id, base_sequence=base_sequence, expected=expected)

    def record(self, batch: ProducerBatch, now_ms: int) -> None:
        """Remember an appended batch (after the append); a copy of one already remembered
        (the same base offset) is not remembered twice."""
        state = self._producers.get(batch.producer_id)
        if state is None or batch.producer_epoch > state.epoch:
            state = self._producers[batch.producer_id] = _Producer(batch.producer_epoch, now_ms)
            if len(self._producers) > self.max_producers:
                self._evict()
        elif batch.producer_epoch < state.epoch:
            return  # a fenced producer's batch, as copied from a leader: nothing to remember
        elif state.batches and state.batches[-1].base_offset >= batch.base_offset:
            return
        state.batches.append(batch)
        state.used_ms = now_ms
        self.version += 1

    def _evict(self) -> None:
        """Drop the least recently used tenth beyond the cap (one sort per many records)."""
        by_use = sorted(self._producers, key=lambda pid: self._producers[pid].used_ms)
        for pid in by_use[:max(1, len(by_use) - self.max_producers + self.max_producers // 10)]:
            del self._producers[pid]
        event(log, "store.producers_evicted", topic=self.topic, partition=self.partition,
              kept=len(self._producers))

    def expire(self, now_ms: int) -> None:
        """Forget producers unused for ``expiry_ms``."""
        old = [pid for pid, s in self._producers.items() if now_ms - s.used_ms > self.expiry_ms]
        for pid in old:
            del self._producers[pid]
        if old:
            self.version += 1

    # ------------------------------------------------------------ replication

    def between(self, start: int, end: int) -> list[ProducerBatch]:
        """The batches whose last record is in [start, end) (start -1: every one below
        ``end``), oldest first."""
        out = [b for s in self._producers.values() for b in s.batches
               if start <= b.last_offset < end]
        out.sort(key=lambda b: b.base_offset)
        return out

    def adopt(self, batches: Iterable[ProducerBatch], now_ms: int,
              replace: bool = False) -> None:
        """Remember batches a leader listed (oldest first), after their records were copied
        here; ``replace``: they are the leader's whole windows, so forget ours first."""
        if replace:
            self.clear()
        for b in batches:
            self.record(b, now_ms)

    def truncate(self, end: int) -> None:
        """Forget batches with records at or after ``end``: the log no longer holds them."""
        for pid in list(self._producers):
            state = self._producers[pid]
            kept = [b for b in state.batches if b.last_offset < end]
            if len(kept) != len(state.batches):
                self.version += 1
                if not kept:
                    del self._producers[pid]
                    continue
                state.batches.clear()
                state.batches.extend(kept)

    def clear(self) -> None:
        if self._producers:
            self._producers.clear()
            self.version += 1

    # ------------------------------------------------------------ snapshots

    def rows(self, below: int) -> np.ndarray:
        """The windows as snapshot rows, only batches whose chunk ends at or below data
        position ``below`` (what the files hold); copied batches (position unknown) too."""
        rows = [(self.partition, b.producer_id, b.producer_epoch, b.base_sequence, b.count,
                 b.base_offset, b.end_pos, s.used_ms)
                for s in self._producers.values() for b in s.batches if b.end_pos <= below]
        return np.array(rows, SNAP_DTYPE)

    def load(self, rows: np.ndarray) -> None:
        """Remember the snapshot rows of this partition (oldest batch first)."""
        for r in rows[np.argsort(rows["base_offset"], kind="stable")]:
            self.record(ProducerBatch(int(r["producer_id"]), int(r["epoch"]),
                                      int(r["base_sequence"]), int(r["count"]),
                                      int(r["base_offset"]), int(r["end_pos"])),
                        int(r["used_ms"]))


class SnapshotSchedule:
    """When a store's flusher writes its producers' snapshot: every ``interval_s`` at most
    when the windows changed, at once for the first windows of a store without a snapshot
    (recovery of a store without one starts at its checkpoint), and on close. Called under
    the store's lock."""

    def __init__(self, store_dir: Path, interval_s: float, clock) -> None:
        self.store_dir, self.interval_s, self.clock = store_dir, interval_s, clock
        self.exists = (store_dir / SNAPSHOT).exists()
        self.last = clock()
        self.state: tuple | None = None  # the windows' versions when last written

    def due(self, parts: dict, position: int, now_ms: int, force: bool
            ) -> tuple[np.ndarray, tuple] | None:
        """(rows as of data ``position``, state) to write now, or None."""
        if not force and self.exists and self.clock() - self.last < self.interval_s:
            return None
        for part in parts.values():
            part.producers.expire(now_ms)
        state = tuple((p, part.producers.version) for p, part in parts.items())
        if state == self.state:
            return None
        if not self.exists and not any(len(part.producers) for part in parts.values()):
            return None
        rows = [part.producers.rows(position) for part in parts.values()]
        return (np.concatenate(rows) if rows else np.empty(0, SNAP_DTYPE)), state

    def written(self, state: tuple) -> None:
        self.exists, self.last, self.state = True, self.clock(), state


def write_snapshot(store_dir: Path, position: int, rows: np.ndarray) -> None:
    """Replace the store's snapshot: the windows as of data ``position`` (all of it fsynced)."""
    body = np.ascontiguousarray(rows, SNAP_DTYPE).tobytes()
    head = SNAP_HEAD.pack(SNAP_MAGIC, SNAP_VERSION, position, len(rows), zlib.crc32(body))
    atomic_write(store_dir / SNAPSHOT, head + body)


def read_snapshot(store_dir: Path) -> tuple[int, np.ndarray] | None:
    """(position, rows) of the store's snapshot; None when there is none (the store never
    held an idempotent batch: SnapshotSchedule); position 0 and no rows when it is damaged
    (logged: recovery then rebuilds the windows from the whole data log)."""
    path = store_dir / SNAPSHOT
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        event(log, "store.producer_snapshot_unreadable", logging.WARNING, path=str(path),
              error=str(exc))
        return 0, np.empty(0, SNAP_DTYPE)
    if len(raw) >= SNAP_HEAD.size:
        magic, version, position, count, crc = SNAP_HEAD.unpack_from(raw)
        body = raw[SNAP_HEAD.size:]
        if (magic, version) == (SNAP_MAGIC, SNAP_VERSION) and \
                len(body) == count * SNAP_DTYPE.itemsize and zlib.crc32(body) == crc:
            return position, np.frombuffer(body, SNAP_DTYPE)
    event(log, "store.producer_snapshot_damaged", logging.WARNING, path=str(path))
    return 0, np.empty(0, SNAP_DTYPE)
