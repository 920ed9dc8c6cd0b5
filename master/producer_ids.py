"""Producer ids handed out by the active master (Kafka's InitProducerId), from memory, out of
blocks reserved in the replicated state.

One Raft round per id would make a producer's start (or a client calling in a loop) a write
to every master. Instead the active master reserves a block of :data:`BLOCK_SIZE` ids with one
replicated command (``reserve_producer_ids``, master/state_producers.py: the persistent
counter moves past the block on every master) and hands the block's ids out one by one;
when it is used up, the next call reserves another.

Never handed out twice: a block is used only by the allocator whose command reserved it, and
the counter only grows. A block belongs to the leadership (epoch) that reserved it: a master
that becomes active (after a failover, a restart, or a re-election of the same process)
reserves a fresh block before its first id, so every id it hands out is above every id any
earlier leadership handed out; the unused rest of an old block is skipped. (A deposed master
that has not noticed yet, cut off from the others, may hand out a few more ids of its block
until Raft steps it down: they are still unique, only not in order with the new master's.)

Thread-safety: :meth:`ProducerIdBlocks.take` may be called from any thread; one lock guards
the block, and a reservation holds it (the callers waiting then need the new block anyway).
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from lib.logs import event

log = logging.getLogger(__name__)
# Ids per reservation: one Raft round per 1,000 producers started. Ids are 63-bit, so
# skipping a block's rest at each failover costs nothing that could ever run out.
BLOCK_SIZE = 1000
PRODUCER_EPOCH = 0  # an idempotent producer without a transactional_id


@dataclass
class _Block:
    epoch: int | None  # the leadership that reserved it
    next_id: int
    end: int  # one past the last id


class ProducerIdBlocks:
    """The active master's current block of producer ids."""

    def __init__(self, reserve: Callable[[int], int], epoch: Callable[[], int | None],
                 block_size: int = BLOCK_SIZE) -> None:
        """``reserve(count)``: replicate a reservation of ``count`` ids and return the first
        (raises a TubeqError: NotLeader on a standby, Unavailable without a quorum).
        ``epoch()``: the leadership epoch serving now (None: not active)."""
        if block_size < 1:
            raise ValueError("block_size must be >= 1")
        self._reserve, self._epoch, self._size = reserve, epoch, block_size
        self._lock = threading.Lock()
        self._block = _Block(None, 0, 0)

    def take(self) -> int:
        """A producer id no caller ever got before (reserving a block when needed)."""
        with self._lock:
            epoch = self._epoch()
            block = self._block
            if epoch is None or block.epoch != epoch or block.next_id >= block.end:
                first = self._reserve(self._size)  # raises: nothing changes here
                if first < 1:
                    raise ValueError(f"a reserved producer id block starts at {first}")
                block = self._block = _Block(epoch, first, first + self._size)
                event(log, "master.producer_ids_reserved", first=first,
                      last=first + self._size - 1, epoch=epoch)
            block.next_id += 1
            return block.next_id - 1
