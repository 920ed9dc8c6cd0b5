"""Cutting a batch its broker refused as too large, and settling its futures from the pieces."""
from __future__ import annotations

import time

import numpy as np
import pytest

from lib.errors import DiskFull
from lib.producer.accumulator import Accumulator
from lib.producer.batch import Batch
from lib.producer.bulk import batch_offsets
from lib.producer.split import RefusedLimits, Split, cut, frames_of, piece_bounds
from lib.records import HEADER_SIZE
from lib.records.layout import COLUMN_BYTES_PER_RECORD
from lib.types import TopicPartition

TP = TopicPartition("t", 0)


def _batch(sizes: list[int]) -> tuple[Accumulator, Batch, list]:
    """A sealed batch of records of ``sizes`` frame bytes (arbitrary bytes: only cut here)."""
    acc = Accumulator(1 << 20, 1 << 24, 0.0, 0.1)
    futures = [acc.add(TP, (bytes([i % 256]) * size,), size, 0, 1000 + i)
               for i, size in enumerate(sizes)]
    batch, = acc.drain(time.monotonic())[0]
    return acc, batch, futures


@pytest.mark.parametrize("seed", range(5))
def test_pieces_are_as_few_as_the_limit_allows_and_each_fits(seed):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(30, 5000, 500)
    limit = 20_000
    bounds = piece_bounds(sizes, limit)
    assert bounds[0] == 0 and bounds[-1] == len(sizes)
    for i, j, k in zip(bounds, bounds[1:], bounds[2:] + [None], strict=False):
        whole = HEADER_SIZE + COLUMN_BYTES_PER_RECORD * (j - i) + int(sizes[i:j].sum())
        assert whole <= limit
        if k is not None:  # the next record would not have fitted (greedy: fewest pieces)
            assert whole + COLUMN_BYTES_PER_RECORD + int(sizes[j]) > limit


def test_a_record_alone_over_the_limit_cannot_be_cut():
    assert piece_bounds(np.array([100, 5000, 100]), 4000) is None
    assert piece_bounds(np.array([100, 100]), 10_000) == [0, 2]  # fits whole: one piece


def test_pieces_hold_the_frames_timestamps_and_tags_of_their_records():
    acc, batch, _ = _batch([100, 200, 300, 400])
    batch.tag_hashes = [1, 2, 3, 4]
    frames = frames_of(batch)
    pieces = cut(batch, frames, [0, 1, 3, 4])
    assert [len(p) for p in pieces] == [1, 2, 1]
    assert [bytes(p.buf) for p in pieces] == [bytes(frames[:100]), bytes(frames[100:600]),
                                              bytes(frames[600:])]
    assert [p.timestamps for p in pieces] == [[1000], [1001, 1002], [1003]]
    assert [p.tag_hashes for p in pieces] == [[1], [2, 3], [4]]
    assert sum(p.size for p in pieces) == batch.size


def test_the_frames_of_a_sealed_request_end_where_its_batch_does_whatever_follows_it():
    """A sealed request carries fields after the batch (acks_all, topic_id): a split takes
    the frames from the batch's end, not the request's (a topic_id after it once cut the
    frames two bytes off, and the broker refused every piece as malformed)."""
    from lib.produce_wire import produce_request

    _, batch, _ = _batch([100, 200, 300])
    frames = bytes(frames_of(batch))
    for acks_all, topic_id in ((False, 0), (True, 0), (True, 2**40), (False, 7)):
        batch.payload = produce_request(batch.tp, b"H" * 40, frames, acks_all, topic_id)
        assert bytes(frames_of(batch)) == frames


def test_every_record_gets_its_offset_from_its_piece_even_when_a_piece_is_cut_again():
    acc, batch, futures = _batch([10] * 6)
    pieces = cut(batch, frames_of(batch), [0, 2, 6])
    Split(batch, pieces, [0, 2, 6])
    inner = cut(pieces[1], memoryview(bytes(pieces[1].buf)), [0, 1, 4])
    Split(pieces[1], inner, [0, 1, 4])
    for piece, base in ((pieces[0], 50), (inner[0], 70), (inner[1], 90)):
        piece.base_offset = base
        parent = piece.split.settled(piece, None)
        while parent is not None and parent.split is not None:
            parent = parent.split.settled(parent, None)
    assert [f.result(0).offset for f in futures] == [50, 51, 70, 90, 91, 92]
    assert [f.result(0).timestamp for f in futures] == [1000 + i for i in range(6)]
    assert batch_offsets(batch).tolist() == [50, 51, 70, 90, 91, 92]
    assert batch.finished


def test_a_piece_that_fails_for_good_fails_the_batch_and_abandons_the_pieces_after_it():
    acc, batch, futures = _batch([10] * 3)
    pieces = cut(batch, frames_of(batch), [0, 1, 2, 3])
    Split(batch, pieces, [0, 1, 2, 3])
    pieces[0].base_offset = 7
    assert pieces[0].split.settled(pieces[0], None) is None
    error = DiskFull("disk full")
    assert pieces[1].split.settled(pieces[1], error) is batch
    assert all(f.exception(0) is error for f in futures)
    assert pieces[2].abandoned is error and pieces[1].abandoned is None
    assert pieces[2].split.settled(pieces[2], error) is None  # settled once only


def test_replaced_pieces_go_first_and_keep_the_bytes_accounted():
    acc, batch, _ = _batch([10] * 4)
    acc.add(TP, (b"later",), 5, 0, 2000)  # queued behind the batch in flight
    used = acc.used_bytes
    pieces = cut(batch, frames_of(batch), [0, 2, 4])
    acc.replace(batch, pieces)
    assert acc.used_bytes == used
    assert acc.drain(time.monotonic())[0] == [pieces[0]]
    acc.release(pieces[0])
    assert acc.drain(time.monotonic())[0] == [pieces[1]]


def test_a_refused_limit_holds_for_its_broker_only_and_for_a_while():
    now = [100.0]
    limits = RefusedLimits(memory_s=60.0, clock=lambda: now[0])
    limits.remember(TP, "b1:1", 70_000)
    assert limits.get(TP, "b1:1") == 70_000
    assert limits.get(TopicPartition("t", 1), "b1:1") is None  # another partition
    assert limits.get(TP, "b2:1") is None  # the leader moved: that broker's limit is unknown
    assert limits.get(TP, "b1:1") is None  # and forgotten, even if it moves back
    limits.remember(TP, "b1:1", 70_000)
    now[0] += 59.0
    assert limits.get(TP, "b1:1") == 70_000
    now[0] += 2.0
    assert limits.get(TP, "b1:1") is None  # old enough to try a whole batch again
