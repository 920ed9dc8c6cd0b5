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

The state is in memory only: after a broker restart the first batch of each producer is
accepted as is, so a retry that straddles a restart can be appended twice (persisting the
window with the data comes later). Callers hold :meth:`lock_for` around check + append + record
so two copies of the same batch cannot both pass the check.
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


@dataclass
class _State:
    epoch: int
    batches: deque[Appended] = field(default_factory=lambda: deque(maxlen=WINDOW))


class Dedup:
    def __init__(self) -> None:
        self._states: dict[tuple[int, str, int], _State] = {}
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
        state.batches.append(Appended(base_sequence, count, base_offset, last_offset))

    def forget_topic(self, topic: str) -> None:
        """Drop the state of a topic (deleted or re-created)."""
        with self._guard:
            for key in [k for k in self._states if k[1] == topic]:
                del self._states[key]
