"""The producers' side of a store: its idempotent producers' windows and its transactions,
partition by partition (storage/producers.py, storage/aborted.py; docs/transactions.md).

``Store.producers`` is one of these: the broker lists and adopts windows for replication,
writes the coordinator's markers and asks where ``read_committed`` readers stop and what they
leave out. It works under the store's lock and appends through the store's own append (the
callables it is given), so a marker takes its offset and its place in the cache like any
batch.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lib.errors import TxnRecordsLost
from lib.records import BatchView, control_frame
from storage.core import StoreCore
from storage.datalog import ATTR_COMMIT, ATTR_CONTROL, ProducerFields
from storage.partition_log import PartitionLog
from storage.producers import OpenTxn, ProducerBatch


class StoreProducers:
    """Producer windows and transactions of one store's partitions (module docstring)."""

    def __init__(self, core: StoreCore, readable: Callable[[int], PartitionLog],
                 writable: Callable[[int], PartitionLog], add: Callable,
                 wait_synced: Callable[[int], None], wall_clock: Callable[[], float]) -> None:
        """``readable``/``writable``: the store's partition lookups (raising its errors);
        ``add``: its append into the active block (lock held); ``wait_synced``: until the
        data log is fsynced to a position (lock held)."""
        self._core, self._readable, self._writable = core, readable, writable
        self._add, self._wait_synced, self._wall_clock = add, wait_synced, wall_clock

    def write_marker(self, partition: int, producer_id: int, producer_epoch: int,
                     commit: bool, *, leader_epoch: int = 0) -> int | None:
        """End the producer's open transaction on the partition with a commit or abort
        marker (a control record, storage/producers.py); returns its offset once it is
        fsynced, whatever the topic's durability (the coordinator retries until then), or
        None when no transaction of the producer is open here (a retried marker: its
        epoch still fences the producer's older ones). An abort first records the ranges of
        the transaction's batches in the aborted index (storage/aborted.py). ProducerFenced
        when a newer epoch of the producer wrote here."""
        now_ms = int(self._wall_clock() * 1e3)
        frame = control_frame(commit, now_ms, producer_id, producer_epoch)
        view = BatchView(1, -1, -1, -1, np.array([len(frame)], np.uint32),
                         np.zeros(1, np.uint32), np.array([now_ms], np.int64),
                         memoryview(frame))
        fields = ProducerFields(producer_id, producer_epoch, -1,
                                ATTR_CONTROL | (ATTR_COMMIT if commit else 0))
        with self._core.cond:
            part = self._writable(partition)
            part.producers.check_marker(producer_id, producer_epoch)
            if part.producers.open_txn(producer_id) is None:
                part.producers.end_txn(producer_id, producer_epoch, now_ms)
                return None
            base, end_pos = self._add(partition, view, True, leader_epoch, None, fields)
            self._wait_synced(end_pos)
        return base

    def sync_txn(self, partition: int, producer_id: int, producer_epoch: int,
                 records: int) -> None:
        """Before a commit: make sure the producer's open transaction holds the ``records``
        it acknowledged on the partition, and that they are on disk (fsynced up to its last
        batch, whatever the topic's durability), so the commit marker cannot outlive them.
        TxnRecordsLost when fewer are held (a crash of an ``async`` copy lost the rest)."""
        with self._core.cond:
            part = self._writable(partition)
            txn = part.producers.open_txn(producer_id)
            held = 0 if txn is None or txn.epoch != producer_epoch else sum(
                last - first + 1 for first, last, _end in txn.ranges)
            if held < records:
                raise TxnRecordsLost(
                    f"{part.producers.topic}/{partition} holds {held} of the {records} "
                    f"records producer {producer_id} epoch {producer_epoch} had acknowledged "
                    "there in its transaction (lost in a crash or a leader change): abort "
                    "the transaction", partition=partition, held=held, acknowledged=records)
            if records:
                self._wait_synced(txn.ranges[-1][2])

    def open_txns(self, partition: int) -> list[tuple[int, OpenTxn]]:
        """(producer id, transaction) of every transaction open on the partition."""
        with self._core.cond:
            return self._readable(partition).producers.open_txns()

    def last_stable(self, partition: int) -> int:
        """The last stable offset: ``read_committed`` readers stop before the first offset
        of the oldest open transaction (the log end when none is open)."""
        with self._core.cond:
            part = self._readable(partition)
            return part.producers.last_stable(part.next)

    def transactional(self, partition: int) -> bool:
        """Whether a transaction ever wrote to the partition (its reads may hold control
        records and aborted ones)."""
        with self._core.cond:
            return self._readable(partition).transactional

    def aborted_ranges(self, partition: int, start: int, end: int) -> np.ndarray:
        """(first, last) offsets of aborted transactions' batches overlapping [start, end)."""
        with self._core.cond:
            return self._readable(partition).aborted.overlapping(start, end)

    def batches(self, partition: int, start: int, end: int) -> list[ProducerBatch]:
        """The idempotent batches the partition remembers whose last record is in
        [start, end) (start -1: all below ``end``), oldest first: what a leader lists to its
        followers."""
        with self._core.cond:
            return self._readable(partition).producers.between(start, end)

    def adopt(self, partition: int, batches: list[ProducerBatch],
                        replace: bool = False, copied_from: int = -1) -> None:
        """Remember batches a leader listed after their records (from ``copied_from`` on)
        were copied here; ``replace``: they are its whole windows (storage/producers.py)."""
        with self._core.cond:
            self._readable(partition).producers.adopt(
                batches, int(self._wall_clock() * 1e3), replace, copied_from)
