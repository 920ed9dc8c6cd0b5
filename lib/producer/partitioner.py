"""Which partition a record goes to.

A record with a key goes to ``zlib.crc32(key) % partitions``. CRC-32 is fixed by its standard,
so every process, language and Python version puts the same key on the same partition; Python's
``hash()`` is salted per process and must never be used here. A keyed record goes to its
partition even while that partition is unavailable (the producer retries until it is back):
moving it elsewhere would break the per-key order.

A record without a key goes round robin over the *available* partitions (all partitions when
none is available, so the producer's retries can wait for one to come back). With
``sticky_bytes`` > 0 (the producer passes its batch size) the round robin moves on once that
many bytes went to the current partition instead of after every record, as Kafka's sticky
partitioner does: one full batch per partition in turn rather than many small batches to every
partition, so keyless throughput does not drop as partitions are added.
"""
from __future__ import annotations

import threading
from collections.abc import Sequence

from lib.records.layout import crc32


def key_partition(key: bytes, partitions: int) -> int:
    """The stable partition of ``key`` among ``partitions`` partitions."""
    return crc32(key) % partitions


class Partitioner:
    """Key hash, else (sticky) round robin per topic. Thread-safe."""

    def __init__(self, sticky_bytes: int = 0) -> None:
        self.sticky_bytes = sticky_bytes
        self._lock = threading.Lock()
        self._turns: dict[str, list[int]] = {}  # topic -> [turn, bytes sent in this turn]

    def partition(self, topic: str, key: bytes | None, partitions: int,
                  available: Sequence[int], size: int = 0) -> int:
        """Pick the partition of one record of ``topic`` (``partitions`` in total) of
        ``size`` bytes."""
        if key is not None:
            return crc32(key) % partitions
        turn = self._turns.get(topic)
        if turn is None:
            with self._lock:
                turn = self._turns.setdefault(topic, [0, 0])
        # Unlocked read-modify-write: a race only makes a turn a record longer or shorter.
        n = turn[0]
        turn[1] += size
        if turn[1] >= self.sticky_bytes:
            turn[0], turn[1] = n + 1, 0
        if available:
            return available[n % len(available)]
        return n % partitions
