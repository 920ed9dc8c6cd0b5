"""Transactions in a store, on real files (storage/producers.py, storage/aborted.py): the open
transactions hold the last stable offset, markers end them, an abort's ranges are indexed
before its marker, and all of it comes back after a clean close or a crash."""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from lib.errors import CorruptRecord, ProducerFenced
from lib.records import (
    FLAG_CONTROL,
    Record,
    assemble_batch,
    control_frame,
    decode_frames,
    encode_batch,
)
from storage.aborted import AbortedIndex
from storage.producers import SNAPSHOT
from storage.recovery import CHECKPOINT
from storage.store import Store
from tests.helpers import SMALL_STORE, batch_of, values

TOPIC, PARTS = "txn", [0, 1]


def open_store(root: Path, **overrides) -> Store:
    return Store(root, TOPIC, 0, PARTS, dataclasses.replace(SMALL_STORE, **overrides))


def store_dir(root: Path) -> Path:
    return root / TOPIC / "0"


def txn_batch(pid: int, seq: int, n: int, epoch: int = 0) -> bytes:
    return encode_batch([Record(b"t%d-%d" % (pid, seq + i), timestamp=1) for i in range(n)],
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        transactional=True)


def ranges(store: Store, partition: int = 0) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in store.producers.aborted_ranges(partition, 0, 1 << 60)]


def test_an_open_transaction_holds_the_last_stable_offset_until_its_marker(tmp_path):
    with open_store(tmp_path) as s:
        s.append(0, batch_of(values("plain", 2)))  # 0-1
        assert s.producers.last_stable(0) == 2
        assert s.append(0, txn_batch(7, 0, 3)) == (2, 4)
        s.append(0, batch_of(values("after", 2)))  # 5-6: stable only once 7 commits
        assert s.producers.last_stable(0) == 2
        assert s.producers.write_marker(0, 7, 0, commit=True) == 7
        assert s.producers.last_stable(0) == 8 and ranges(s) == []
        assert s.producers.write_marker(0, 7, 0, commit=True) is None, \
            "a retried marker writes nothing"
        assert s.latest(0) == 8


def test_an_abort_indexes_exactly_its_batches_and_keeps_other_producers(tmp_path):
    with open_store(tmp_path) as s:
        s.append(0, txn_batch(7, 0, 2))  # 0-1
        s.append(0, txn_batch(8, 0, 2))  # 2-3: another transaction, committed below
        s.append(0, batch_of(values("plain", 1)))  # 4
        s.append(0, txn_batch(7, 2, 3))  # 5-7
        assert s.producers.last_stable(0) == 0
        assert s.producers.write_marker(0, 7, 0, commit=False) == 8
        assert s.producers.last_stable(0) == 2, "producer 8's transaction is still open"
        assert ranges(s) == [(0, 1), (5, 7)]
        assert [(int(a), int(b)) for a, b in s.producers.aborted_ranges(0, 2, 5)] == [], \
            "no aborted offset in 2-4"
        s.producers.write_marker(0, 8, 0, commit=True)
        assert s.producers.last_stable(0) == s.latest(0) == 10


def test_a_marker_is_a_control_record_that_survives_a_full_scan(tmp_path):
    with open_store(tmp_path) as s:
        s.append(0, txn_batch(7, 0, 1))
        marker = s.producers.write_marker(0, 7, 0, commit=False)
        got = s.read(0, marker)
        assert len(got.offsets) == 1 and decode_frames(got.frames)[0].flags & FLAG_CONTROL
    (store_dir(tmp_path) / CHECKPOINT).unlink()
    (store_dir(tmp_path) / SNAPSHOT).unlink()
    with open_store(tmp_path) as s:  # the whole data log scanned: nothing damaged
        assert s.latest(0) == 2 and ranges(s) == [(0, 0)]
        assert s.read(0, marker).offsets.tolist() == [marker]


def test_a_producer_may_not_write_a_control_record():
    with pytest.raises(CorruptRecord, match="control record"):
        from lib.records import parse_batch
        parse_batch(assemble_batch([control_frame(True, 1)], [0], [1]))


def test_markers_fence_older_epochs(tmp_path):
    with open_store(tmp_path) as s:
        s.append(0, txn_batch(7, 0, 1, epoch=3))
        with pytest.raises(ProducerFenced):
            s.producers.write_marker(0, 7, 2, commit=True)  # a coordinator that fell behind
        # the coordinator's abort, its epoch bumped
        assert s.producers.write_marker(0, 7, 4, commit=False) == 1
        with pytest.raises(ProducerFenced):
            s.append(0, txn_batch(7, 1, 1, epoch=3))  # the zombie's late batch
        # nothing open: fences anyway
        assert s.producers.write_marker(1, 9, 5, commit=False) is None
        with pytest.raises(ProducerFenced):
            s.append(1, txn_batch(9, 0, 1, epoch=4))
        assert s.producers.last_stable(0) == s.latest(0)
        assert s.producers.last_stable(1) == s.latest(1) == 0


@pytest.mark.parametrize("mode", ["clean", "crash", "crash_snapshot_older"])
def test_transactions_come_back_after_a_reopen(tmp_path, mode):
    root = tmp_path / "root"
    extra = {"checkpoint_interval_ms": 10, "producer_snapshot_interval_ms": 10**9} \
        if mode == "crash_snapshot_older" else {}
    s = open_store(root, **extra)
    s.append(0, txn_batch(7, 0, 2))  # 0-1, aborted below
    s.append(0, txn_batch(8, 0, 2))  # 2-3, left open
    s.append(1, txn_batch(7, 0, 1))  # p1: 0, committed below
    s.producers.write_marker(0, 7, 0, commit=False)  # 4
    s.producers.write_marker(1, 7, 0, commit=True)  # p1: 1
    s.append(0, batch_of(values("plain", 2)))  # 5-6
    if mode == "clean":
        s.close()
    else:
        s.flush()
        shutil.copytree(root, tmp_path / "crashed")
        s.close()
        root = tmp_path / "crashed"
    with open_store(root) as s:
        assert s.producers.last_stable(0) == 2 and s.producers.last_stable(1) == 2 == s.latest(1)
        assert ranges(s) == [(0, 1)]
        assert s.producers.write_marker(0, 8, 0, commit=True) == 7
        assert s.producers.last_stable(0) == 8


def test_truncation_cuts_markers_rows_and_open_transactions(tmp_path):
    with open_store(tmp_path) as s:
        s.append(0, txn_batch(7, 0, 2))  # 0-1
        s.producers.write_marker(0, 7, 0, commit=False)  # 2
        s.append(0, txn_batch(8, 0, 2))  # 3-4
        s.truncate(0, 2)
        assert ranges(s) == [] and s.producers.last_stable(0) == 0, "7 is open again, 8 is gone"
        s.truncate(0, 0)
        assert s.producers.last_stable(0) == 0 == s.latest(0)


def test_the_aborted_index_drops_rows_of_a_lost_marker_and_a_torn_row(tmp_path):
    index = AbortedIndex(tmp_path)
    index.append([(0, 1), (5, 7)], producer_id=7, marker=8)
    index.append([(9, 9)], producer_id=8, marker=12)
    with open(tmp_path / "aborted", "ab") as f:
        f.write(b"\x01" * 5)  # a torn row: its marker never reached the log
    again = AbortedIndex(tmp_path)
    assert len(again) == 3
    again.truncate(10)  # the log ends at 10: the marker at 12 was lost
    assert [tuple(r) for r in AbortedIndex(tmp_path).overlapping(0, 100)] == [(0, 1), (5, 7)]
