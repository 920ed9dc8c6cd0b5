"""Kafka's zigzag varints over whole arrays (numpy), so a record batch's fields are read and
written per column, not per record.

A Kafka record's fields are varints: where one record ends is known only by reading its
length, so :func:`record_spans` walks the lengths one by one (the one per-record Python loop
left, a few bytecodes each); every other field is then read at once for all records by
:func:`read_at` (a 10-byte window gathered at each position) and written by :func:`encode`.
"""
from __future__ import annotations

import numpy as np

from lib.errors import CorruptRecord

WIDTH = 10  # the longest varint (a 64-bit varlong)
_STEPS = np.arange(WIDTH)
_SHIFTS = (7 * _STEPS).astype(np.uint64)


def padded(body: bytes | memoryview) -> np.ndarray:
    """``body`` as uint8 with WIDTH zero bytes after it, so a window never reads past it."""
    out = np.zeros(len(body) + WIDTH, np.uint8)
    out[:len(body)] = np.frombuffer(body, np.uint8)
    return out


def read_at(u8: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The zigzag varint starting at each position of ``at`` in ``u8`` (see :func:`padded`):
    (values int64, sizes in bytes int64). CorruptRecord if one runs past 10 bytes."""
    window = u8[at[:, None] + _STEPS]
    more = window >= 0x80
    size = np.argmin(more, axis=1) + 1
    if len(at) and bool(more.all(axis=1).any()):
        raise CorruptRecord("a varint runs past 10 bytes")
    digits = (window & 0x7F).astype(np.uint64) << _SHIFTS
    digits[_STEPS[None, :] >= size[:, None]] = 0
    raw = digits.sum(axis=1, dtype=np.uint64)
    value = (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)
    return value, size.astype(np.int64)


def record_spans(body: bytes, count: int) -> tuple[list[int], list[int]]:
    """(start, end) of each of ``count`` records after its length varint; CorruptRecord when
    a length does not fit."""
    starts, ends = [0] * count, [0] * count
    pos, n = 0, len(body)
    try:
        for i in range(count):
            b = body[pos]
            if b < 0x80:
                z, pos = b, pos + 1
            else:
                b2 = body[pos + 1]
                if b2 < 0x80:
                    z, pos = (b & 0x7F) | (b2 << 7), pos + 2
                else:
                    z, pos = _long(body, pos)
            starts[i] = pos
            pos += (z >> 1) ^ -(z & 1)
            ends[i] = pos
            if pos > n or pos <= starts[i]:
                raise CorruptRecord(f"record {i}'s length does not fit the batch")
    except IndexError:
        raise CorruptRecord("the record batch ends inside a record length") from None
    if pos != n:
        raise CorruptRecord(f"{n - pos} bytes after the batch's {count} records")
    return starts, ends


def _long(body: bytes | memoryview, pos: int) -> tuple[int, int]:
    """The raw (not yet zigzag-decoded) varint at ``pos``; (value, next position)."""
    shift = z = 0
    while True:
        b = body[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return z, pos
        shift += 7
        if shift > 63:
            raise CorruptRecord("a varint runs past 10 bytes")


def read_one(body: bytes | memoryview, pos: int) -> tuple[int, int]:
    """The zigzag varint at ``pos``; (value, next position): the record-by-record read."""
    z, pos = _long(body, pos)
    return (z >> 1) ^ -(z & 1), pos


def encode(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zigzag varints of int64 ``values``: (bytes as an (n, 10) uint8 array whose row i holds
    varint i in its first ``sizes[i]`` bytes, sizes)."""
    v = values.astype(np.int64)
    z = ((v << 1) ^ (v >> 63)).view(np.uint64)
    groups = (z[:, None] >> _SHIFTS) & np.uint64(0x7F)
    sizes = np.maximum(1, (np.uint64(64) - _leading_zeros(z) + np.uint64(6)) // np.uint64(7))
    sizes = sizes.astype(np.int64)
    out = groups.astype(np.uint8)
    out[_STEPS[None, :] < (sizes - 1)[:, None]] |= 0x80
    return out, sizes


def _leading_zeros(z: np.ndarray) -> np.ndarray:
    """Leading zero bits of each uint64 (64 for 0)."""
    bits = np.zeros(len(z), np.uint64)
    rest = z.copy()
    for shift in (32, 16, 8, 4, 2, 1):
        s = np.uint64(shift)
        big = rest >= (np.uint64(1) << s)
        bits[big] += s
        rest[big] >>= s
    return np.uint64(63) - bits + (z == 0).astype(np.uint64)
