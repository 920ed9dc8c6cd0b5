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
partitions to a snapshot now and then (:func:`encode_snapshot`), as of a data position
``S`` whose bytes are all fsynced. On open, recovery scans the data log from ``S`` at the
latest (storage/recovery.py) and the store replays the scanned chunks over the snapshot, so a
retry that straddles a restart of the broker is answered with its original offsets. What is
lost is what the data log lost: a batch that never reached the disk is not in the windows
either, and its retry is appended (once).

**Bounded**: a partition remembers at most ``max_producers`` producers; the least recently
used goes first, and a producer unused for ``expiry_ms`` is dropped at the next snapshot
(Kafka's ``producer.id.expiration.ms``). A retry of a forgotten producer is appended as new.

**Transactions**: a batch flagged transactional (``ATTR_TXN``) opens its producer's
transaction on the partition, or extends it; a marker (``ATTR_CONTROL``) ends it. The open
transactions give the partition's *last stable offset* (the first offset of the oldest one:
``read_committed`` readers stop there) and, when one aborts, the ranges its batches took
(storage/aborted.py). A marker's epoch fences the producer's older epochs, so a zombie's late
batch cannot reopen a transaction the coordinator ended. They are in the snapshot too.

**Replication**: a follower keeps the same windows for the partitions it copies, from the
producer batches its leader lists in each ReplicaFetch answer (:meth:`between`,
:meth:`adopt`), and drops the batches of records it truncates away (:meth:`truncate`).

Not thread-safe: the store calls it under its lock.
"""
from __future__ import annotations

import dataclasses
import logging
import struct
import time
import zlib
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lib.errors import OutOfOrderSequence, ProducerFenced
from lib.logs import event
from storage.datalog import ATTR_TXN

log = logging.getLogger(__name__)

WINDOW = 5
SNAPSHOT = "producers.snap"
SNAP_HEAD = struct.Struct("<4sIqqI")  # magic, version, position, rows, crc of the rows
SNAP_MAGIC = b"TQPS"
SNAP_VERSION = 2  # 2: open transactions after the windows (1: windows only, still read)
SNAP_DTYPE = np.dtype([("partition", "<u4"), ("producer_id", "<i8"), ("epoch", "<i4"),
                       ("base_sequence", "<i4"), ("count", "<u4"), ("base_offset", "<i8"),
                       ("end_pos", "<i8"), ("used_ms", "<i8")])
TXN_DTYPE = np.dtype([("partition", "<u4"), ("producer_id", "<i8"), ("epoch", "<i4"),
                      ("first", "<i8"), ("last", "<i8"), ("end_pos", "<i8")])  # per batch


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
    attrs: int = 0  # ATTR_TXN: part of its producer's transaction

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.count - 1


@dataclass
class OpenTxn:
    """A transaction open on this partition: its producer's epoch and its batches' (first
    offset, last offset, data position after the chunk). ``opened_at`` (monotonic seconds,
    not stored: a reopened store counts from its opening) lets the broker ask the
    coordinator about one open too long (broker/hanging_txns.py)."""

    epoch: int
    ranges: list[tuple[int, int, int]]
    opened_at: float = field(default_factory=time.monotonic, compare=False)

    @property
    def first_offset(self) -> int:
        return self.ranges[0][0]

    def offsets(self) -> list[tuple[int, int]]:
        return [(a, b) for a, b, _e in self.ranges]


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
        self._open: dict[int, OpenTxn] = {}  # producer id -> its open transaction here
        # Ended since the last snapshot: (producer id, the transaction, its marker's offset and
        # end position). A snapshot as of an earlier position still holds them open, and a
        # truncation that cuts the marker opens them again.
        self._ended: list[tuple[int, OpenTxn, int, int]] = []
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
        if batch.attrs & ATTR_TXN:
            txn = self._open.setdefault(batch.producer_id, OpenTxn(batch.producer_epoch, []))
            txn.ranges.append((batch.base_offset, batch.last_offset, batch.end_pos))

    # ------------------------------------------------------------ transactions

    def open_txn(self, producer_id: int) -> OpenTxn | None:
        return self._open.get(producer_id)

    def open_txns(self) -> list[tuple[int, OpenTxn]]:
        """(producer id, transaction) of every transaction open here."""
        return list(self._open.items())

    def check_marker(self, producer_id: int, epoch: int) -> None:
        """ProducerFenced when a newer epoch of the producer wrote here (the marker of a
        coordinator that fell behind)."""
        state = self._producers.get(producer_id)
        if state is not None and epoch < state.epoch:
            raise ProducerFenced(
                f"a marker of producer {producer_id} epoch {epoch} is fenced by epoch "
                f"{state.epoch} on {self.topic}/{self.partition}", producer_id=producer_id,
                epoch=epoch, current_epoch=state.epoch)

    def end_txn(self, producer_id: int, epoch: int, now_ms: int, marker: int = -1,
                marker_end: int = -1) -> OpenTxn | None:
        """A marker of ``epoch`` (at offset ``marker``, its chunk ending at data position
        ``marker_end``) ends the producer's open transaction (returned) and fences its older
        epochs from here on."""
        txn = self._open.pop(producer_id, None)
        if txn is not None and marker >= 0:
            self._ended.append((producer_id, txn, marker, marker_end))
        state = self._producers.get(producer_id)
        if state is None or epoch > state.epoch:
            self._producers[producer_id] = _Producer(epoch, now_ms)
        self.version += 1
        return txn

    def last_stable(self, log_end: int) -> int:
        """The last stable offset: the first offset of the oldest open transaction, or the
        log end when none is open."""
        if not self._open:
            return log_end
        return min(log_end, min(t.first_offset for t in self._open.values()))

    def open_transactions(self) -> dict[int, OpenTxn]:
        return dict(self._open)

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

    def adopt(self, batches: Iterable[ProducerBatch], now_ms: int, replace: bool = False,
              copied_from: int = -1) -> None:
        """Remember batches a leader listed (oldest first), after their records were copied
        here; ``replace``: they are the leader's whole windows, so forget ours first. A
        copy's transactions are what its own log says (its chunks carry whole listed
        batches' attrs, its markers are frames of their own), except for a transactional
        batch that began before ``copied_from`` (the first offset of this copy's answer): it
        was copied in pieces without its fields, and joins its transaction from here."""
        if replace and self._producers:
            self._producers.clear()
            self.version += 1
        for b in batches:
            pieces = b.base_offset < copied_from <= b.last_offset
            self.record(b if pieces else dataclasses.replace(b, attrs=b.attrs & ~ATTR_TXN),
                        now_ms)

    def truncate(self, end: int) -> None:
        """Forget batches with records at or after ``end``: the log no longer holds them."""
        for pid in list(self._open):
            txn = self._open[pid]
            txn.ranges = [r for r in txn.ranges if r[1] < end]
            if not txn.ranges:
                del self._open[pid]
        for pid, txn, marker, _end in self._ended:
            if marker >= end and txn.first_offset < end and pid not in self._open:
                txn.ranges = [r for r in txn.ranges if r[1] < end]
                self._open[pid] = txn  # its marker was cut away: open again
        self._ended = [e for e in self._ended if e[2] < end]
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
        if self._producers or self._open:
            self._producers.clear()
            self._open.clear()
            self._ended.clear()
            self.version += 1

    # ------------------------------------------------------------ snapshots

    def txn_rows(self, below: int) -> np.ndarray:
        """The transactions open as of data position ``below`` as snapshot rows: their
        batches in the files, including those whose marker came after ``below``; the ones
        ended before it are forgotten (no later snapshot needs them)."""
        self._ended = [e for e in self._ended if e[3] > below]
        txns = [*self._open.items(), *((pid, t) for pid, t, _m, _end in self._ended)]
        return np.array([(self.partition, pid, t.epoch, a, b, e) for pid, t in txns
                         for a, b, e in t.ranges if e <= below], TXN_DTYPE)

    def load_txns(self, rows: np.ndarray) -> None:
        for r in rows[np.argsort(rows["first"], kind="stable")]:
            txn = self._open.setdefault(int(r["producer_id"]), OpenTxn(int(r["epoch"]), []))
            txn.ranges.append((int(r["first"]), int(r["last"]), int(r["end_pos"])))

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
    the store's lock. ``exists``: the store has a snapshot already (its checkpoint's
    ``has_snapshot``)."""

    def __init__(self, exists: bool, interval_s: float, clock) -> None:
        self.exists, self.interval_s, self.clock = exists, interval_s, clock
        self.last = clock()
        self.state: tuple | None = None  # the windows' versions when last written

    def due(self, parts: dict, position: int, now_ms: int, force: bool
            ) -> tuple[tuple[np.ndarray, np.ndarray], tuple] | None:
        """((window rows, open transaction rows) as of data ``position``, state) to write
        now, or None."""
        if not force and self.exists and self.clock() - self.last < self.interval_s:
            return None
        for part in parts.values():
            part.producers.expire(now_ms)
        state = tuple((p, part.producers.version) for p, part in parts.items())
        if state == self.state:
            return None
        if not self.exists and not any(len(part.producers) or part.producers.open_transactions()
                                       for part in parts.values()):
            return None
        rows = [part.producers.rows(position) for part in parts.values()]
        txns = [part.producers.txn_rows(position) for part in parts.values()]
        return ((np.concatenate(rows) if rows else np.empty(0, SNAP_DTYPE)),
                (np.concatenate(txns) if txns else np.empty(0, TXN_DTYPE))), state

    def written(self, state: tuple) -> None:
        self.exists, self.last, self.state = True, self.clock(), state


Snapshot = tuple[int, np.ndarray, np.ndarray]  # position, window rows, open transaction rows


def encode_snapshot(position: int, rows: np.ndarray, txns: np.ndarray | None = None) -> bytes:
    """A snapshot as stored: the windows and open transactions as of data ``position`` (all
    of it fsynced), behind a head with their CRC. A store's own ``producers.snap`` holds one;
    a broker's stores share one file of them (storage/checkpoints.py)."""
    txns = np.empty(0, TXN_DTYPE) if txns is None else txns
    body = (np.ascontiguousarray(rows, SNAP_DTYPE).tobytes()
            + np.ascontiguousarray(txns, TXN_DTYPE).tobytes())
    return SNAP_HEAD.pack(SNAP_MAGIC, SNAP_VERSION, position, len(rows),
                          zlib.crc32(body)) + body


def decode_snapshot(raw: bytes, where: str) -> Snapshot:
    """What :func:`encode_snapshot` wrote; position 0 and no rows when it is damaged (logged
    with ``where``: recovery then rebuilds the windows from the whole data log)."""
    if len(raw) >= SNAP_HEAD.size:
        magic, version, position, count, crc = SNAP_HEAD.unpack_from(raw)
        body = raw[SNAP_HEAD.size:]
        windows = count * SNAP_DTYPE.itemsize
        rest = len(body) - windows
        if magic == SNAP_MAGIC and version in (1, SNAP_VERSION) and rest >= 0 and \
                rest % TXN_DTYPE.itemsize == 0 and (version == 2 or rest == 0) and \
                zlib.crc32(body) == crc:
            return (position, np.frombuffer(body, SNAP_DTYPE, count),
                    np.frombuffer(body, TXN_DTYPE, offset=windows))
    event(log, "store.producer_snapshot_damaged", logging.WARNING, path=where)
    return 0, np.empty(0, SNAP_DTYPE), np.empty(0, TXN_DTYPE)


def read_snapshot(store_dir: Path) -> Snapshot | None:
    """The store's own snapshot file: None when there is none (the store never held an
    idempotent batch: SnapshotSchedule, or its snapshots are in a shared file); position 0
    and no rows when it is damaged or unreadable (logged)."""
    path = store_dir / SNAPSHOT
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        event(log, "store.producer_snapshot_unreadable", logging.WARNING, path=str(path),
              error=str(exc))
        return 0, np.empty(0, SNAP_DTYPE), np.empty(0, TXN_DTYPE)
    return decode_snapshot(raw, str(path))
