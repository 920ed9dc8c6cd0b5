"""Idempotent producers' windows of a partition (storage/producers.py): retries answered with
the same offsets, gaps and zombies refused, bounded, kept across a snapshot."""
from __future__ import annotations

import pytest

from lib.errors import OutOfOrderSequence, ProducerFenced
from storage.checkpoints import OwnCheckpoint
from storage.producers import (
    WINDOW,
    ProducerBatch,
    ProducerLimits,
    ProducerWindows,
    encode_snapshot,
    read_snapshot,
)


def _append(w: ProducerWindows, seq: int, count: int, base: int, epoch: int = 0,
            pid: int = 7, now: int = 0, end_pos: int = 0) -> None:
    assert w.check(pid, epoch, seq, count) is None
    w.record(ProducerBatch(pid, epoch, seq, count, base, end_pos), now)


def _offsets(b: ProducerBatch | None) -> tuple[int, int] | None:
    return None if b is None else (b.base_offset, b.last_offset)


def test_retried_batch_returns_its_original_offsets():
    w = ProducerWindows("t", 0)
    _append(w, 0, 10, 100)
    _append(w, 10, 5, 110)
    assert _offsets(w.check(7, 0, 0, 10)) == (100, 109)
    assert _offsets(w.check(7, 0, 10, 5)) == (110, 114)


def test_sequence_gap_is_out_of_order():
    w = ProducerWindows("t", 0)
    _append(w, 0, 10, 0)
    with pytest.raises(OutOfOrderSequence) as info:
        w.check(7, 0, 11, 1)
    assert info.value.expected == 10 and "t/0" in info.value.message


def test_retry_older_than_the_window_is_refused():
    w = ProducerWindows("t", 0)
    for i in range(WINDOW + 1):
        _append(w, i, 1, i)
    with pytest.raises(OutOfOrderSequence):
        w.check(7, 0, 0, 1)
    assert _offsets(w.check(7, 0, 1, 1)) == (1, 1)


def test_lower_epoch_is_fenced_and_higher_epoch_restarts():
    w = ProducerWindows("t", 0)
    _append(w, 0, 3, 0, epoch=2)
    with pytest.raises(ProducerFenced):
        w.check(7, 1, 3, 1)
    _append(w, 0, 1, 3, epoch=3)  # a new session may start anywhere
    with pytest.raises(ProducerFenced):
        w.check(7, 2, 3, 1)


def test_a_copy_of_a_remembered_batch_is_not_remembered_twice():
    w = ProducerWindows("t", 0)
    _append(w, 0, 2, 0)
    w.adopt([ProducerBatch(7, 0, 0, 2, 0)], now_ms=1)
    assert [b.base_offset for b in w.between(-1, 100)] == [0]


def test_truncation_forgets_the_batches_cut_away():
    w = ProducerWindows("t", 0)
    _append(w, 0, 2, 0)
    _append(w, 2, 2, 2)
    w.truncate(3)
    assert [b.base_sequence for b in w.between(-1, 100)] == [0]
    assert w.check(7, 0, 2, 2) is None, "sequence 2 may be written again"


def test_the_least_recently_used_producers_go_past_the_cap_and_old_ones_expire():
    w = ProducerWindows("t", 0, ProducerLimits(max_producers=10, expiry_ms=1_000))
    for pid in range(11):
        _append(w, 0, 1, pid, pid=pid, now=pid)
    assert len(w) <= 10 and w.check(10, 0, 0, 1) is not None
    assert w.check(0, 0, 0, 1) is None, "the least recently used was forgotten"
    w.expire(now_ms=1_005)  # used at 5..10: within 1 s; 2..4: more than 1 s ago
    assert sorted(b.producer_id for b in w.between(-1, 100)) == [5, 6, 7, 8, 9, 10]


def test_a_snapshot_holds_only_what_the_files_hold_and_reads_back(tmp_path):
    w = ProducerWindows("t", 3)
    _append(w, 0, 2, 0, end_pos=100)
    _append(w, 2, 2, 2, end_pos=200)  # still in a cache block at position 150
    OwnCheckpoint(tmp_path).save_snapshot(encode_snapshot(150, w.rows(150)))
    position, rows, _txns = read_snapshot(tmp_path)
    back = ProducerWindows("t", 3)
    back.load(rows)
    assert position == 150 and [b.base_sequence for b in back.between(-1, 100)] == [0]
    (tmp_path / "producers.snap").write_bytes(b"junk")
    assert read_snapshot(tmp_path)[0] == 0, "damaged: rebuilt from the whole data log"
