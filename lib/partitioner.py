"""Which partition a record goes to.

A record with a key goes to ``zlib.crc32(key) % partitions``. CRC-32 is fixed by its standard,
so every process, language and Python version puts the same key on the same partition; Python's
``hash()`` is salted per process and must never be used here. A keyed record goes to its
partition even while that partition is unavailable (the producer retries until it is back):
moving it elsewhere would break the per-key order.

A record without a key goes round robin over the *available* partitions (all partitions when
none is available, so the producer's retries can wait for one to come back).
"""
from __future__ import annotations

import itertools
import threading
import zlib
from collections.abc import Sequence


def key_partition(key: bytes, partitions: int) -> int:
    """The stable partition of ``key`` among ``partitions`` partitions."""
    return zlib.crc32(key) % partitions


class Partitioner:
    """Key hash, else round robin per topic. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, itertools.count] = {}

    def partition(self, topic: str, key: bytes | None, partitions: int,
                  available: Sequence[int]) -> int:
        """Pick the partition of one record of ``topic`` (``partitions`` in total)."""
        if key is not None:
            return zlib.crc32(key) % partitions
        counter = self._counters.get(topic)
        if counter is None:
            with self._lock:
                counter = self._counters.setdefault(topic, itertools.count())
        # next() on itertools.count is atomic under the GIL: no lock per record.
        n = next(counter)
        if available:
            return available[n % len(available)]
        return n % partitions
