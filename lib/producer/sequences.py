"""An idempotent producer's ids and sequence numbers, partition by partition.

Most partitions share the producer's id, asked of the active master (lib/producer/ids.py)
when the first batch is sealed. A partition whose batch failed for good moves to an id of its
own (the broker cannot tell whether that batch was stored; a fresh id starts a new sequence
instead of leaving a gap), asked for when its next batch is sealed; a batch refused as a gap
restarts its partition at once under a fresh id (lib/producer/sender.py: when). Used by the
sender thread, and by a caller's thread in ``send_direct`` for a partition it claimed.

A transactional producer's partitions all share its instance's id and epoch, and start again
at sequence 0 whenever a transaction ends (:meth:`reset`: the end bumped the epoch).
"""
from __future__ import annotations

from collections.abc import Callable

from lib.errors import PermissionDenied
from lib.types import TopicPartition

FRESH_ID = -2  # a partition's next batch asks the master for a producer id of its own
MAX_SEQUENCE = 0x7FFFFFFF


class Sequences:
    """Producer id and next sequence number of each partition (module docstring)."""

    def __init__(self, new_producer_id: Callable[[], int]) -> None:
        self._new_producer_id = new_producer_id
        self._pids: dict[TopicPartition, int] = {}
        self._next: dict[TopicPartition, int] = {}
        self._shared = -1  # the id most partitions use
        self.epoch = 0  # of every id: 0 but for a transactional producer

    def take(self, tp: TopicPartition, count: int) -> tuple[int, int]:
        """The partition's producer id and the base sequence of its next ``count`` records;
        asks the master when the partition has no id yet (TubeqError when it cannot)."""
        pid = self._pids.get(tp)
        if pid is None:
            if self._shared < 0:
                self._shared = self._asked(tp)
            pid = self._pids[tp] = self._shared
        elif pid == FRESH_ID:
            pid = self._pids[tp] = self._asked(tp)
        seq = self._next.get(tp, 0)
        self._next[tp] = (seq + count) & MAX_SEQUENCE
        return pid, seq

    def reset(self, producer_id: int, epoch: int) -> None:
        """Every partition goes on under ``producer_id`` and ``epoch``, from sequence 0."""
        self._shared, self.epoch = producer_id, epoch
        self._pids.clear()
        self._next.clear()

    def current(self, tp: TopicPartition, pid: int) -> bool:
        """Whether ``pid`` is still the partition's producer id."""
        return pid >= 0 and self._pids.get(tp) == pid

    def rewind(self, tp: TopicPartition, seq: int) -> None:
        """The partition's next batch takes sequence ``seq`` again (nothing after it was
        stored: a batch refused whole, sent again in pieces)."""
        self._next[tp] = seq

    def fresh(self, tp: TopicPartition) -> None:
        """The partition starts a new sequence under an id of its own, asked for when its
        next batch is sealed."""
        self._pids[tp] = FRESH_ID
        self._next[tp] = 0

    def restart(self, tp: TopicPartition, count: int) -> int:
        """A fresh id for the partition now, its first ``count`` sequences taken (by the
        batch restamped with it); TubeqError when the master cannot be asked."""
        pid = self._asked(tp)
        self._pids[tp], self._next[tp] = pid, count
        return pid

    def _asked(self, tp: TopicPartition) -> int:
        """A producer id from the master; a refusal names the topic the send was for."""
        try:
            return self._new_producer_id()
        except PermissionDenied as exc:
            raise PermissionDenied(f"producing to {tp.topic} needs a producer id, refused: "
                                   f"{exc.message}", topic=tp.topic) from None
