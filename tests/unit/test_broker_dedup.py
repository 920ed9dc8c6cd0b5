"""Idempotent producer dedup: retries answered with the same offsets, gaps and zombies refused."""
from __future__ import annotations

import pytest

from broker.dedup import WINDOW, Dedup
from lib.errors import OutOfOrderSequence, ProducerFenced


def _append(d: Dedup, seq: int, count: int, base: int, epoch: int = 0, pid: int = 7):
    assert d.check(pid, epoch, seq, count, "t", 0) is None
    d.record(pid, epoch, seq, count, "t", 0, base, base + count - 1)


def test_retried_batch_returns_its_original_offsets():
    d = Dedup()
    _append(d, 0, 10, 100)
    _append(d, 10, 5, 110)
    assert d.check(7, 0, 0, 10, "t", 0) == (100, 109)
    assert d.check(7, 0, 10, 5, "t", 0) == (110, 114)


def test_sequence_gap_is_out_of_order():
    d = Dedup()
    _append(d, 0, 10, 0)
    with pytest.raises(OutOfOrderSequence) as info:
        d.check(7, 0, 11, 1, "t", 0)
    assert info.value.expected == 10


def test_retry_older_than_the_window_is_refused():
    d = Dedup()
    for i in range(WINDOW + 1):
        _append(d, i, 1, i)
    with pytest.raises(OutOfOrderSequence):
        d.check(7, 0, 0, 1, "t", 0)
    assert d.check(7, 0, 1, 1, "t", 0) == (1, 1)


def test_lower_epoch_is_fenced_and_higher_epoch_restarts():
    d = Dedup()
    _append(d, 0, 3, 0, epoch=2)
    with pytest.raises(ProducerFenced):
        d.check(7, 1, 3, 1, "t", 0)
    _append(d, 0, 1, 3, epoch=3)  # a new session may start anywhere
    with pytest.raises(ProducerFenced):
        d.check(7, 2, 3, 1, "t", 0)


def test_non_idempotent_batches_are_never_deduplicated():
    d = Dedup()
    d.record(-1, -1, -1, 1, "t", 0, 0, 0)
    assert d.check(-1, -1, -1, 1, "t", 0) is None


def test_state_is_per_partition_and_forgotten_with_the_topic():
    d = Dedup()
    _append(d, 0, 1, 0)
    assert d.check(7, 0, 5, 1, "t", 1) is None  # another partition: no state yet
    d.forget_topic("t")
    assert d.check(7, 0, 5, 1, "t", 0) is None
