"""Delayed delivery: the leader of each ``tubeq.delayed`` partition moves due records to
their targets (lib/delay.py says what a delayed record is).

Per partition led here, a :class:`Mover`:

1. indexes what producers stored, as a read_committed consumer reads it (below the high
   watermark and the last stable offset, aborted transactions left out), into the
   time-ordered index on disk (broker/delay_index.py), from where it stopped;
2. when records fall due, sends them to their targets and a *done* record (their due times
   and offsets) into its own partition, in **one transaction** under the transactional id
   ``tubeq.delayed-<partition>``, then drops them from the index. Records whose target is
   gone (deleted topic, missing partition, too large now) are put in the done record
   without being sent, and logged.

Exactly once: the done record commits with the copies, so a mover that crashes between the
two leaves a transaction its successor's InitProducerId aborts (both the copies and the done
record): the successor delivers them again, and read_committed consumers see them once. A
new mover first indexes up to the partition's end as it found it after that fencing, so it
knows every done record before it delivers anything. A read_uncommitted consumer may see an
aborted copy as well (docs/delayed.md).

One thread serves every partition led here, a round every ``interval`` (sooner when a record
falls due): a round indexes at most ``index_bytes`` and delivers at most ``batch`` records
per partition, so memory is bounded whatever is pending.
"""
from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from broker.data import visible_read
from broker.delay_index import DONE_DTYPE, DelayIndex, pack_done, unpack_done
from broker.replication import ReplicaLeader
from broker.topics import TopicManager
from lib.delay import DELAY_TOPIC, H_DONE, target_of
from lib.errors import (
    CorruptRecord,
    InvalidArgument,
    NotLeader,
    OffsetOutOfRange,
    PartitionNotHosted,
    ProducerFenced,
    TubeqError,
    UnknownPartition,
    UnknownTopic,
)
from lib.logs import event
from lib.records import Record, decode_frame, iter_frames, tag_hash

_ENTRY = struct.Struct("<IIH")  # target partition, tag hash, target topic length

log = logging.getLogger(__name__)

# A target that cannot take the record now or later: it is dropped (logged), not retried.
_GONE = (UnknownTopic, UnknownPartition, InvalidArgument, CorruptRecord)


@dataclass(frozen=True)
class MoverSettings:
    interval_s: float = 0.1  # a round at least this often
    batch: int = 5000  # records delivered per partition per round (one transaction)
    batch_bytes: int = 4 << 20
    index_bytes: int = 4 << 20  # read per partition per round while indexing
    commit_timeout_s: float = 30.0


class Mover:
    """One ``tubeq.delayed`` partition's indexer and deliverer, for one leadership."""

    def __init__(self, partition: int, epoch: int, topics: TopicManager,
                 replication: ReplicaLeader, index: DelayIndex, new_producer: Callable,
                 settings: MoverSettings) -> None:
        self.partition, self.epoch = partition, epoch
        self.topics, self.replication, self.index = topics, replication, index
        self.new_producer, self.settings = new_producer, settings
        self.producer = None
        self.delivered = 0  # records copied to their targets (dropped ones not counted)
        self.ready_at = -1  # deliver once indexed this far (the log end after fencing)
        self.state = self._adopt()

    def _adopt(self) -> dict:
        """The index's state for this leadership: kept when it still matches the log,
        cut back where an earlier leadership's tail was truncated, dropped for a new topic."""
        store = self.topics.store_for(DELAY_TOPIC, self.partition)
        topic_id = self.topics.topic(DELAY_TOPIC).spec.topic_id
        state = self.index.state(self.partition)
        if state and state.get("topic_id") != topic_id:
            self.index.forget(self.partition)
            state = {}
        if state and state.get("epoch") != self.epoch:
            _, end = store.end_offset_for_epoch(self.partition, int(state["epoch"]))
            if 0 <= end < int(state["indexed_to"]):
                self.index.forget(self.partition, end)
                state = self.index.state(self.partition)
        if not state:
            state = {"indexed_to": store.earliest(self.partition), "pending": 0}
        return {**state, "epoch": self.epoch, "topic_id": topic_id}

    def step(self, now_ms: int) -> int | None:
        """One round; returns when its next record falls due (None: nothing pending)."""
        behind = self._index_new()
        if self.producer is None:
            self.producer = self.new_producer(self.partition)
            store = self.topics.store_for(DELAY_TOPIC, self.partition)
            self.ready_at = store.latest(self.partition)
        if self.state["indexed_to"] < self.ready_at:
            # Catching up: done records not read yet may cover what is due. Again at once
            # while there is more to read; else the log's stable end is held (a transaction).
            return now_ms if behind else None
        s = self.settings
        entries = self.index.due(self.partition, now_ms, s.batch, s.batch_bytes)
        if entries:
            self._deliver(entries)
        return self.index.next_due(self.partition)

    def _index_new(self) -> bool:
        """Index what became readable (read_committed) since the last round; True when
        this round's budget ran out before the readable end."""
        store = self.topics.store_for(DELAY_TOPIC, self.partition)
        start = int(self.state["indexed_to"])
        if start < store.earliest(self.partition):
            event(log, "delay.records_expired", partition=self.partition, first=start,
                  earliest=store.earliest(self.partition))
            start = store.earliest(self.partition)
        hw = self.replication.high_watermark(DELAY_TOPIC, self.partition)
        read = 0
        while read < self.settings.index_bytes:
            try:
                reply = visible_read(store, self.partition, start, hw, 1 << 20, committed=True)
            except OffsetOutOfRange:
                start = store.earliest(self.partition)
                continue
            if reply.next_offset <= start:
                break
            added, done = [], []
            offsets = np.frombuffer(reply.offsets, "<i8").tolist()
            for offset, frame in zip(offsets, iter_frames(reply.frames), strict=True):
                record = decode_frame(frame)
                if H_DONE in record.headers:
                    done.append(unpack_done(record.value))
                    continue
                try:
                    added.append((record.timestamp, offset, entry_value(record, frame)))
                except InvalidArgument as err:  # checked when produced: never, unless damaged
                    event(log, "delay.unreadable", logging.WARNING, partition=self.partition,
                          offset=offset, error=err.message[:300])
            read += len(reply.frames) + 1
            start = reply.next_offset
            self.state = self.index.update(
                self.partition, {**self.state, "indexed_to": start}, added,
                np.concatenate(done) if done else None)
        return read >= self.settings.index_bytes

    def _deliver(self, entries: list[tuple[int, int, bytes]]) -> None:
        done = np.array([(due, offset) for due, offset, _ in entries], DONE_DTYPE)
        producer, dropped = self.producer, 0
        producer.begin()
        try:
            for due, offset, value in entries:
                try:
                    topic, partition, tag_hash, frame = entry_parts(value)
                    producer.send_frame(topic, partition, frame, due, tag_hash)
                except _GONE as err:
                    dropped += 1
                    event(log, "delay.dropped", partition=self.partition, offset=offset,
                          error=f"{type(err).__name__}: {err}"[:300])
            producer.send(DELAY_TOPIC, pack_done(done), headers={H_DONE: b"1"},
                          partition=self.partition)
            producer.commit(self.settings.commit_timeout_s)
        except BaseException:
            self.close()  # whatever it left open, the next producer's init aborts
            raise
        self.index.remove(self.partition, done)
        self.state = {**self.state, "pending": self.index.state(self.partition)["pending"]}
        self.delivered += len(entries) - dropped
        if dropped:
            event(log, "delay.dropped_total", partition=self.partition, dropped=dropped)

    def close(self) -> None:
        producer, self.producer = self.producer, None
        if producer is not None:
            try:
                producer.close(timeout=1.0)
            except Exception:  # noqa: BLE001 - closing after a failure: nothing left to do
                log.debug("delay mover producer close failed", exc_info=True)


def entry_value(record: Record, frame: memoryview) -> bytes:
    """An index entry's value: the target and tag hash, then the stored frame as it is
    (delivered byte for byte: its due time is its timestamp already)."""
    topic, partition = target_of(record.headers)
    name = topic.encode()
    return _ENTRY.pack(partition, tag_hash(record.tag) if record.tag else 0, len(name)) \
        + name + bytes(frame)


def entry_parts(value: bytes) -> tuple[str, int, int, bytes]:
    """(target topic, partition, tag hash, frame) of an index entry's value."""
    partition, hashed, size = _ENTRY.unpack_from(value)
    start = _ENTRY.size + size
    return value[_ENTRY.size:start].decode(), partition, hashed, value[start:]


class DelayMovers:
    """The thread that runs a :class:`Mover` for each ``tubeq.delayed`` partition led here."""

    def __init__(self, topics: TopicManager, replication: ReplicaLeader, index: DelayIndex,
                 new_producer: Callable, settings: MoverSettings | None = None) -> None:
        self.topics, self.replication, self.index = topics, replication, index
        self.new_producer = new_producer
        self.settings = settings or MoverSettings()
        self.movers: dict[int, Mover] = {}
        self.delivered_before = 0  # by movers since closed (a leadership that moved away)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="delay-movers", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():  # never started without masters (a broker alone)
            self._thread.join(timeout)
        for p in list(self.movers):
            self._drop(p)

    def pending(self) -> int:
        """Records waiting in the partitions led here."""
        return sum(int(m.state.get("pending", 0)) for m in list(self.movers.values()))

    def delivered(self) -> int:
        return self.delivered_before + sum(m.delivered for m in list(self.movers.values()))

    def overdue_s(self) -> float:
        """How long the most overdue pending record is past its due time (0: none)."""
        now = time.time_ns() // 1_000_000
        dues = [self.index.next_due(p) for p in list(self.movers)]
        return max([0.0] + [(now - d) / 1000 for d in dues if d is not None and d < now])

    def _drop(self, partition: int) -> None:
        mover = self.movers.pop(partition, None)
        if mover is not None:
            self.delivered_before += mover.delivered
            mover.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            wait = self.settings.interval_s
            try:
                soonest = self.round()
                if soonest is not None:
                    wait = min(wait, max(0.0, soonest / 1000 - time.time()))
            except Exception:  # noqa: BLE001 - one bad round must not end delayed delivery
                log.exception("delay.round_failed")
                wait = 1.0
            self._stop.wait(wait)

    def round(self) -> int | None:
        """One round over the partitions led here; the soonest next due time."""
        led = self._led()
        for p in [p for p, m in self.movers.items() if led.get(p) != m.epoch]:
            self._drop(p)
        soonest = None
        for p, epoch in sorted(led.items()):
            mover = self.movers.get(p)
            try:
                if mover is None:
                    mover = self.movers[p] = Mover(p, epoch, self.topics, self.replication,
                                                   self.index, self.new_producer, self.settings)
                due = mover.step(time.time_ns() // 1_000_000)
            except (ProducerFenced, NotLeader, PartitionNotHosted, UnknownTopic):
                self._drop(p)  # another leadership's mover took over: stand down
                continue
            except TubeqError as err:  # a target or the coordinator not there now: retry
                event(log, "delay.round_retry", partition=p,
                      error=f"{type(err).__name__}: {err}"[:300])
                continue
            if due is not None:
                soonest = due if soonest is None else min(soonest, due)
        return soonest

    def _led(self) -> dict[int, int]:
        """{partition: leader epoch} of the delay topic's partitions led here."""
        try:
            led = self.topics.led(DELAY_TOPIC)
        except UnknownTopic:
            return {}
        out = {}
        for p in led:
            role = self.topics.role(DELAY_TOPIC, p)
            out[p] = role.leader_epoch if role is not None else 0
        return out
