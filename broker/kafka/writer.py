"""Kafka record batches (magic 2) written from tubeq frames: what a Fetch answers.

A run of frames of one partition becomes one uncompressed batch, offsets as deltas from the
first (gaps where control or aborted records were left out are legal in Kafka's format). The
frames are checked first as the broker checks a produced batch (structure, every frame's CRC:
a corrupt frame is never served). Runs without headers or compressed values (what producers
send) are written per column (:func:`frames_batch`: the varints with numpy, the records
joined from slices by C-level maps); others record by record (:func:`kafka_batch`).
"""
from __future__ import annotations

import struct
from collections.abc import Sequence
from itertools import repeat

import numpy as np
from crc32c import crc32c

from broker.kafka import varints
from broker.kafka.batches import (
    BATCH_HEADER,
    CRC_FROM,
    LENGTH_AFTER,
    TAG_HEADER,
    TRANSACTIONAL,
)
from lib.records import Record
from lib.records.columns import FrameColumns
from lib.records.layout import FRAME_HEADER_SIZE


def _zigzag(value: int) -> bytes:
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_SMALL = [_zigzag(i) for i in range(-64, 64)]  # one byte each: most deltas and lengths


def _vi(value: int) -> bytes:
    return _SMALL[value + 64] if -64 <= value < 64 else _zigzag(value)


def kafka_batch(records: Sequence[Record], producer_id: int = -1, producer_epoch: int = -1,
                base_sequence: int = -1, transactional: bool = False,
                leader_epoch: int = -1, end: int = 0) -> bytes:
    """One Kafka batch (magic 2, uncompressed) of ``records`` (their offsets and timestamps
    as read from tubeq; at least one), spanning the offsets up to ``end`` (exclusive) when
    that is further: see :func:`gap_batch`."""
    base_offset, base_ts = records[0].offset, records[0].timestamp
    parts, vi = [], _vi
    max_ts = base_ts
    for r in records:
        ts = r.timestamp
        if ts > max_ts:
            max_ts = ts
        body = [b"\x00", vi(ts - base_ts), vi(r.offset - base_offset)]
        if r.key is None:
            body.append(b"\x01")  # -1
        else:
            body += (vi(len(r.key)), r.key)
        body += (vi(len(r.value)), r.value)
        headers = list(r.headers.items())
        if r.tag:
            headers.append((TAG_HEADER, r.tag.encode()))
        body.append(vi(len(headers)))
        for name, hv in headers:
            raw = name.encode()
            body += (vi(len(raw)), raw, vi(len(hv)), hv)
        joined = b"".join(body)
        parts += (vi(len(joined)), joined)
    return _sealed(b"".join(parts), len(records), base_offset,
                   max(records[-1].offset, end - 1) - base_offset, base_ts, max_ts,
                   producer_id, producer_epoch, base_sequence, transactional, leader_epoch)


def frames_batch(cols: FrameColumns, leader_epoch: int = -1, end: int = 0) -> bytes:
    """One Kafka batch of checked frames (at least one): per column when no record has a
    tag, headers or a compressed value, else record by record; spanning the offsets up to
    ``end`` (exclusive) when that is further (:func:`gap_batch`)."""
    head = cols.head
    if head["tag_len"].any() or not cols.plain:
        return kafka_batch(cols.records(), leader_epoch=leader_epoch, end=end)
    n = len(cols)
    src = bytes(cols.frames)
    offsets = cols.offsets
    stamps = head["ts"].astype(np.int64)
    base_offset, base_ts = int(offsets[0]), int(stamps[0])
    key_len = head["key_len"].astype(np.int64)
    value_len = head["value_len"].astype(np.int64)
    keyed = bool((key_len >= 0).any())
    columns = [varints.encode(stamps - base_ts), varints.encode(offsets - base_offset),
               varints.encode(key_len)]
    tail_cols = [varints.encode(value_len)]
    if not keyed:  # no key between: the value's length joins the rest
        columns, tail_cols = columns + tail_cols, []
    body_len = 2 + np.maximum(key_len, 0) + value_len + sum(s for _, s in columns) + \
        sum(s for _, s in tail_cols)  # attributes and the empty header count: 1 byte each
    length = varints.encode(body_len)
    front = _rows([length, (np.zeros((n, 1), np.uint8), np.ones(n, np.int64)), *columns])
    ends = cols.ends
    values = _slices(src, ends - value_len, ends)
    if keyed:
        key_at = cols.starts + FRAME_HEADER_SIZE
        keys = _slices(src, key_at, key_at + np.maximum(key_len, 0))
        pieces = _interleave([front, keys, _rows(tail_cols), values, repeat(b"\x00", n)], n)
    else:
        pieces = _interleave([front, values, repeat(b"\x00", n)], n)
    payload = b"".join(pieces)
    return _sealed(payload, n, base_offset, max(int(offsets[-1]), end - 1) - base_offset,
                   base_ts, int(stamps.max()), leader_epoch=leader_epoch)


def gap_batch(start: int, end: int, leader_epoch: int = -1) -> bytes:
    """A batch of no record spanning offsets ``start`` .. ``end - 1``: what a Fetch answers
    where every record of the range was left out (a transaction's marker, an aborted record
    for read_committed). Kafka clients move their position past a batch's last offset, the
    same way past records compaction removed; without it a client would fetch the marker's
    offset again forever (tubeq's own consumer is told ``next_offset``)."""
    return _sealed(b"", 0, start, end - 1 - start, -1, -1, leader_epoch=leader_epoch)


def _rows(columns: list[tuple[np.ndarray, np.ndarray]]) -> list[bytes]:
    """Per record, the bytes of its varints in ``columns`` (each (n, 10) bytes and sizes),
    one after the other: one masked copy of all of them, then a slice each."""
    matrix = np.concatenate([b for b, _ in columns], axis=1)
    width = np.concatenate([np.arange(b.shape[1]) for b, _ in columns])
    limit = np.concatenate([np.repeat(s[:, None], b.shape[1], axis=1) for b, s in columns],
                           axis=1)
    flat = matrix[width[None, :] < limit].tobytes()
    sizes = sum(s for _, s in columns)
    ends = np.cumsum(sizes)
    return _slices(flat, ends - sizes, ends)


def _slices(src: bytes, starts: np.ndarray, ends: np.ndarray) -> list[bytes]:
    return list(map(src.__getitem__, map(slice, starts.tolist(), ends.tolist())))


def _interleave(columns: list, n: int) -> list:
    out: list = [None] * (n * len(columns))
    for i, column in enumerate(columns):
        out[i::len(columns)] = column
    return out


def _sealed(payload: bytes, count: int, base_offset: int, last_delta: int, base_ts: int,
            max_ts: int, producer_id: int = -1, producer_epoch: int = -1,
            base_sequence: int = -1, transactional: bool = False,
            leader_epoch: int = -1) -> bytes:
    """The batch header (its CRC-32C over attributes..end) and ``payload``."""
    head = bytearray(BATCH_HEADER.pack(
        base_offset, BATCH_HEADER.size - LENGTH_AFTER + len(payload), leader_epoch, 2, 0,
        TRANSACTIONAL if transactional else 0, last_delta, base_ts, max_ts, producer_id,
        producer_epoch, base_sequence, count))
    struct.pack_into(">I", head, 17, crc32c(payload, crc32c(memoryview(head)[CRC_FROM:])))
    return bytes(head) + payload
