"""Idempotent producer dedup: a retried batch is acknowledged again, not appended twice.

A batch header carries ``producer_id``, ``producer_epoch`` and ``base_sequence`` (the sequence
number of its first record; each record takes one). Per (producer_id, topic, partition) the
broker keeps the last :data:`WINDOW` appended batches. For a new batch:

- ``producer_id < 0``: not idempotent, always appended;
- epoch lower than the one seen: :class:`ProducerFenced` (a newer instance took over the id);
- epoch higher: a new producer session, appended and the window restarts;
- ``base_sequence`` of a batch in the window: a retry, answered with that batch's offsets;
- ``base_sequence`` right after the last batch (or no state yet): appended;
- anything else: :class:`OutOfOrderSequence` (a gap, or a retry older than the window).

Replication: a follower keeps the same windows for the partitions it copies, from the producer
batches its leader lists in each ReplicaFetch answer (:meth:`remembered`, :meth:`adopt`), and
drops the entries of records it truncates away (:meth:`truncate`). So a new leader answers a
retry of a batch its predecessor acknowledged with the same offsets, instead of appending it
again.

The state is in memory only: after a broker restart the first batch of each producer is
accepted as is, so a retry that straddles the restart of a partition's only copy can be
appended twice (a restarted replica gets the windows from its leader again). Callers hold
:meth:`lock_for` around check + append + record so two copies of the same batch cannot both
pass the check; the replication methods take it themselves.
"""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

from lib.errors import OutOfOrderSequence, ProducerFenced

WINDOW = 5


@dataclass(frozen=True)
class Appended:
    base_sequence: int
    count: int
    base_offset: int
    last_offset: int


@dataclass(frozen=True)
class ProducerBatch:
    """One remembered batch with its producer: what a leader tells its followers."""

    producer_id: int
    producer_epoch: int
    batch: Appended


@dataclass
class _State:
    epoch: int
    batches: deque[Appended] = field(default_factory=lambda: deque(maxlen=WINDOW))


class Dedup:
    def __init__(self) -> None:
        self._states: dict[tuple[int, str, int], _State] = {}
        self._producers: dict[tuple[str, int], set[int]] = {}  # partition -> producer ids
        self._locks: dict[tuple[str, int], threading.Lock] = {}
        self._guard = threading.Lock()

    def lock_for(self, topic: str, partition: int) -> threading.Lock:
        """The lock serialising idempotent appends to one partition."""
        with self._guard:
            lock = self._locks.get((topic, partition))
            if lock is None:
                lock = self._locks[(topic, partition)] = threading.Lock()
            return lock

    def check(self, producer_id: int, epoch: int, base_sequence: int, count: int, topic: str,
              partition: int) -> tuple[int, int] | None:
        """(base, last) offsets of an earlier copy of this batch, or None to append it."""
        if producer_id < 0:
            return None
        state = self._states.get((producer_id, topic, partition))
        if state is None:
            return None
        if epoch < state.epoch:
            raise ProducerFenced(
                f"producer {producer_id} epoch {epoch} is fenced by epoch {state.epoch} on "
                f"{topic}/{partition}", producer_id=producer_id, epoch=epoch,
                current_epoch=state.epoch)
        if epoch > state.epoch or not state.batches:
            return None
        for b in state.batches:
            if b.base_sequence == base_sequence and b.count == count:
                return b.base_offset, b.last_offset
        expected = state.batches[-1].base_sequence + state.batches[-1].count
        if base_sequence == expected:
            return None
        raise OutOfOrderSequence(
            f"producer {producer_id} sent base sequence {base_sequence} to {topic}/{partition}, "
            f"expected {expected}" + (" (a gap: earlier batches were lost)"
                                      if base_sequence > expected else
                                      f" (older than the last {WINDOW} batches)"),
            producer_id=producer_id, base_sequence=base_sequence, expected=expected)

    def record(self, producer_id: int, epoch: int, base_sequence: int, count: int, topic: str,
               partition: int, base_offset: int, last_offset: int) -> None:
        """Remember an appended batch (call after the append succeeded)."""
        if producer_id < 0:
            return
        key = (producer_id, topic, partition)
        state = self._states.get(key)
        if state is None or epoch > state.epoch:
            state = self._states[key] = _State(epoch)
            self._producers.setdefault((topic, partition), set()).add(producer_id)
        elif epoch < state.epoch:
            return  # a fenced producer's batch, as copied from a leader: nothing to remember
        state.batches.append(Appended(base_sequence, count, base_offset, last_offset))

    # ------------------------------------------------------------ replication

    def remembered(self, topic: str, partition: int, start: int, end: int
                   ) -> list[ProducerBatch]:
        """The remembered batches of a partition whose last record is in [start, end),
        oldest first (start -1: every one below ``end``)."""
        if start >= end or (topic, partition) not in self._producers:
            return []
        with self.lock_for(topic, partition):
            out = [ProducerBatch(pid, state.epoch, b)
                   for pid in self._producers.get((topic, partition), ())
                   if (state := self._states.get((pid, topic, partition))) is not None
                   for b in state.batches if start <= b.last_offset < end]
        out.sort(key=lambda pb: pb.batch.base_offset)
        return out

    def adopt(self, topic: str, partition: int, batches: list[ProducerBatch],
              replace: bool = False) -> None:
        """Remember batches a leader listed (oldest first), after their records were copied
        here; ``replace``: they are the leader's whole windows, so forget ours first."""
        with self.lock_for(topic, partition):
            if replace:
                self._drop(topic, partition, lambda _b: True)
            for pb in batches:
                b = pb.batch
                self.record(pb.producer_id, pb.producer_epoch, b.base_sequence, b.count, topic,
                            partition, b.base_offset, b.last_offset)

    def truncate(self, topic: str, partition: int, end: int) -> None:
        """Forget batches with records at or after ``end``: this copy no longer holds them."""
        with self.lock_for(topic, partition):
            self._drop(topic, partition, lambda b: b.last_offset >= end)

    def _drop(self, topic: str, partition: int, gone) -> None:
        """Remove the partition's batches ``gone`` says (the partition's lock held)."""
        pids = self._producers.get((topic, partition), set())
        for pid in list(pids):
            state = self._states.get((pid, topic, partition))
            if state is not None:
                kept = [b for b in state.batches if not gone(b)]
                if len(kept) != len(state.batches):
                    state.batches.clear()
                    state.batches.extend(kept)
                if state.batches:
                    continue
                del self._states[(pid, topic, partition)]
            pids.discard(pid)

    def forget_topic(self, topic: str) -> None:
        """Drop the state of a topic (deleted or re-created)."""
        with self._guard:
            for key in [k for k in self._states if k[1] == topic]:
                del self._states[key]
            for key in [k for k in self._producers if k[0] == topic]:
                del self._producers[key]
