"""Fetched frames as columns: checked once, decoded by nobody (no Record per message).

``PullConsumer.poll_columns`` hands these out for readers that want whole columns (the Spark
source builds Arrow arrays from them): each is a run of consecutive frames of one partition,
checked with the broker's own whole-array check (:func:`lib.records.check.frame_columns`:
structure, CRC, compressed values inflate), with the frame headers as one numpy structured
array. Where each field lies is arithmetic on those arrays: the tag and key follow the 30-byte
header, the value is the tail of the frame (headers sit between key and value). Values that
are compressed or records with headers are for :meth:`FrameColumns.records`.
"""
from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from itertools import repeat

import numpy as np

from lib.errors import CorruptRecord
from lib.records.check import FEW_FRAMES, frame_columns
from lib.records.decode import decode_frame, decode_span, undecodable
from lib.records.layout import (
    FLAG_VALUE_ZLIB,
    FRAME_HEADER_SIZE,
    NO_HEADERS,
    U8,
    U32,
    Record,
    frame_headers,
    frame_starts,
)

_LENGTH = struct.Struct("<I")
_new_record = partial(tuple.__new__, Record)  # C-level: no Python frame per record


@dataclass(frozen=True)
class FrameColumns:
    """Consecutive checked frames of one partition, with their offsets."""

    topic: str
    partition: int
    frames: memoryview  # the frames back to back (a view of the fetched bytes)
    offsets: np.ndarray  # int64, one per frame

    def __len__(self) -> int:
        return len(self.offsets)

    @cached_property
    def sizes(self) -> np.ndarray:
        return np.array(walk_sizes(self.frames), U32)

    @cached_property
    def starts(self) -> np.ndarray:
        return frame_starts(self.sizes)

    @cached_property
    def head(self) -> np.ndarray:
        """The FRAME_DTYPE header of every frame."""
        return frame_headers(np.frombuffer(self.frames, U8), self.starts)

    @property
    def ends(self) -> np.ndarray:
        return self.starts + self.sizes

    @property
    def plain(self) -> bool:
        """No record has headers or a compressed value: every field is a plain slice."""
        head = self.head
        return not (head["header_count"].any() or (head["flags"] & FLAG_VALUE_ZLIB).any())

    def value_spans(self) -> tuple[np.ndarray, np.ndarray]:
        """(start, end) byte positions of every value (stored bytes: compressed if flagged)."""
        ends = self.ends
        return ends - self.head["value_len"].astype(np.int64), ends

    def key_spans(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(start, end, present) of every key; ``present`` False: no key (not an empty one)."""
        head = self.head
        start = self.starts + FRAME_HEADER_SIZE + head["tag_len"].astype(np.int64)
        key_len = head["key_len"].astype(np.int64)
        return start, start + np.maximum(key_len, 0), key_len >= 0

    def tag_spans(self) -> tuple[np.ndarray, np.ndarray]:
        start = self.starts + FRAME_HEADER_SIZE
        return start, start + self.head["tag_len"].astype(np.int64)

    def first(self, n: int) -> FrameColumns:
        """The first ``n`` frames (what they already know is kept, not recomputed)."""
        if n >= len(self):
            return self
        sizes = self.sizes[:n]
        out = FrameColumns(self.topic, self.partition, self.frames[:int(sizes.sum())],
                           self.offsets[:n])
        out.__dict__.update(sizes=sizes, starts=self.starts[:n], head=self.head[:n])
        return out

    def records(self) -> list[Record]:
        """Every frame as a Record: fields sliced and records built by C-level maps over the
        columns (no Python bytecode per plain record); records with headers or compressed
        values are decoded one by one."""
        src = bytes(self.frames)
        head, n = self.head, len(self)
        starts = self.starts
        ends = starts + self.sizes
        values = _slices(src, ends - head["value_len"].astype(np.int64), ends)
        field_at = starts + FRAME_HEADER_SIZE
        tag_lens = head["tag_len"].astype(np.int64)
        tags: list | repeat = repeat(None, n)
        if tag_lens.any():
            tags = list(map(str, _slices(src, field_at, field_at + tag_lens),
                            repeat("utf-8"), repeat("replace")))
            for i in np.flatnonzero(tag_lens == 0).tolist():
                tags[i] = None
        key_lens = head["key_len"].astype(np.int64)
        keys: list | repeat = repeat(None, n)
        if (key_lens >= 0).any():
            key_at = field_at + tag_lens
            keys = _slices(src, key_at, key_at + np.maximum(key_lens, 0))
            for i in np.flatnonzero(key_lens < 0).tolist():
                keys[i] = None
        out = list(map(_new_record, zip(
            values, keys, tags, repeat(NO_HEADERS, n), head["ts"].tolist(),
            self.offsets.tolist(), repeat(self.partition, n), head["flags"].tolist(),
            repeat(self.topic, n), strict=True)))
        odd = head["header_count"] | (head["flags"] & FLAG_VALUE_ZLIB)
        for i in np.flatnonzero(odd).tolist():
            out[i] = decode_frame(memoryview(src)[int(starts[i]):int(ends[i])])._replace(
                offset=out[i].offset, partition=self.partition, topic=self.topic)
        return out


def _slices(src: bytes, starts: np.ndarray, ends: np.ndarray) -> list[bytes]:
    return list(map(src.__getitem__, map(slice, starts.tolist(), ends.tolist())))


def walk_sizes(frames: memoryview, count: int = -1) -> list[int]:
    """The length field of each frame (of the first ``count``), walked from the start: each
    frame's place depends on the one before, so this one loop is the floor (a tight one, ~0.1
    µs a frame). CorruptRecord for a length that is impossible or runs past the end."""
    unpack, total, pos, out = _LENGTH.unpack_from, len(frames), 0, []
    while pos < total and count != len(out):
        if pos + FRAME_HEADER_SIZE > total:
            raise CorruptRecord(f"truncated frame at byte {pos} of the fetched run")
        (length,) = unpack(frames, pos)
        if length < FRAME_HEADER_SIZE or pos + length > total:
            raise CorruptRecord(f"frame at byte {pos} has an impossible length {length}")
        out.append(length)
        pos += length
    return out


def _sized_run(sizes: np.ndarray, room: int) -> int:
    """The bytes ``sizes`` span, checked to fit ``room`` with every frame at least a header
    (so whole-array gathers stay inside the run); the frame check then holds each length
    field equal to its size."""
    if len(sizes) and int(sizes.min()) < FRAME_HEADER_SIZE:
        raise CorruptRecord(f"a fetched frame size is below the {FRAME_HEADER_SIZE}-byte header")
    total = int(sizes.sum(dtype=np.int64))
    if total > room:
        raise CorruptRecord(f"fetched frame sizes add up to {total} bytes, {room} came")
    return total


def checked_columns(topic: str, partition: int, frames: memoryview,
                    offsets: np.ndarray, sizes: Sequence[int] | np.ndarray | None = None,
                    ) -> FrameColumns:
    """Check a run of fetched frames as the broker checks a batch (CorruptRecord if any frame
    is bad) and wrap them; the run must hold exactly ``len(offsets)`` frames. ``sizes``: the
    frames' sizes when the caller knows them already (walked, or the broker's)."""
    cols = FrameColumns(topic, partition, frames, np.asarray(offsets, np.int64))
    if sizes is not None:
        cols.__dict__["sizes"] = np.asarray(sizes, U32)
    if len(cols.sizes) != len(cols.offsets):
        raise CorruptRecord(f"{len(cols.sizes)} fetched frames for {len(cols.offsets)} offsets")
    frame_columns(frames, cols.sizes, cols.head if len(cols) > FEW_FRAMES else None)
    return cols


def checked_run(frames: bytes, offsets: list[int], pos: int, partition: int,
                topic: str, sizes: np.ndarray | None = None) -> tuple[FrameColumns, int]:
    """The ``len(offsets)`` frames of a fetch that start at byte ``pos``, checked: (columns,
    end byte). ``sizes``: the broker's size of each of these frames (else they are walked;
    either way every length field must agree). A bad frame raises CorruptRecord naming its
    topic, partition and offset."""
    mv = memoryview(frames)
    try:
        if sizes is None:
            sizes = walk_sizes(mv[pos:], len(offsets))
            stop = pos + sum(sizes)
        else:
            stop = pos + _sized_run(sizes, len(frames) - pos)
        if len(sizes) != len(offsets):
            raise CorruptRecord(f"{len(sizes)} fetched frames for {len(offsets)} offsets")
        return checked_columns(topic, partition, mv[pos:stop], offsets, sizes), stop
    except CorruptRecord as exc:
        # The record decoder names the offset of the first bad frame; where it finds none
        # (a fault only the whole-run check sees), the run's first offset is named.
        decode_span(frames, offsets, pos, partition, topic)
        raise undecodable(topic, partition, offsets[0], exc) from exc
