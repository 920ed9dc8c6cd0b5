"""The record format itself: sizes, offsets, flags, limits, numpy views of frame headers,
the :class:`Record` type and the stable tag hash. Every other module of ``lib.records`` and
every user of the format reads it from here."""
from __future__ import annotations

import struct
from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

import numpy as np

try:  # ISA-L's CRC-32 is zlib's, bit for bit, 3-5x faster (pyproject.toml says why)
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - a platform without isal wheels: same values, slower
    from zlib import crc32

MAGIC = b"TQRB"
VERSION = 2  # written by this build
# v2's batch crc covers the header and the columns; the frames are covered by their own CRCs,
# which every reader checks (the broker on append). v1's also covered the frames: every frame
# byte was CRC'd twice on each side, 0.4 us per KiB each time. Both are read.
READ_VERSIONS = (1, 2)
BATCH_HEADER = struct.Struct("<4sBBHII" "IqhhiI")
HEADER_SIZE = BATCH_HEADER.size  # 40: keeps the i64 column 8-byte aligned
CRC_AT, CRC_END = 12, 16  # the batch crc covers [:CRC_AT] and [CRC_END:frames] (v1: to the end)
COUNT_AT = 16
COLUMN_BYTES_PER_RECORD = 16
# Up to FEW_COLUMNS records (send_sync, low rates) a batch's columns (sizes, tag hashes,
# timestamps) are packed and read with one struct call each: numpy's fixed cost dominates there.
FEW_COLUMNS = 16
COLUMNS_OF = [struct.Struct(f"<{n}I{n}I{n}q") for n in range(FEW_COLUMNS + 1)]  # by count

FRAME_HEAD = struct.Struct("<II")
FRAME_TAIL = struct.Struct("<BBqHiHI")
FRAME_HEADER_SIZE = FRAME_HEAD.size + FRAME_TAIL.size  # 30
# The same 30 bytes as a numpy record: every frame header of a batch is read in one gather.
FRAME_DTYPE = np.dtype([("length", "<u4"), ("crc", "<u4"), ("flags", "u1"), ("attrs", "u1"),
                        ("ts", "<i8"), ("tag_len", "<u2"), ("key_len", "<i4"),
                        ("header_count", "<u2"), ("value_len", "<u4")])
FRAME_FLAGS_AT = FRAME_DTYPE.fields["flags"][1]  # 8
FRAME_TAG_LEN_AT = FRAME_DTYPE.fields["tag_len"][1]  # 18
FRAME_VALUE_LEN_AT = FRAME_DTYPE.fields["value_len"][1]  # 26
HEADER_ENTRY = struct.Struct("<HI")

FLAG_VALUE_ZLIB = 0x01  # value is zlib-compressed (set by the producer per record)
KNOWN_FLAGS = FLAG_VALUE_ZLIB  # what a producer may set
# A control record (a transaction's commit or abort marker): written by the broker for the
# transaction coordinator, never accepted from a producer, never delivered to consumers.
FLAG_CONTROL = 0x80
STORED_FLAGS = KNOWN_FLAGS | FLAG_CONTROL  # what a store's frames may carry
# Batch header flags: a transactional producer's batch (its records belong to the open
# transaction of its producer id until a marker commits or aborts it).
BATCH_TRANSACTIONAL = 0x01
KNOWN_BATCH_FLAGS = BATCH_TRANSACTIONAL

DEFAULT_MAX_MESSAGE_BYTES = 1 << 20
DEFAULT_MAX_BATCH_BYTES = 4 << 20
MAX_TAG_BYTES = 255
MAX_HEADERS = 256  # per record: bounds the broker's header walk (one numpy pass per header)
MAX_RECORDS_PER_BATCH = 1 << 20

U8 = np.dtype(np.uint8)
FRAME_HEADER = struct.Struct("<IIBBqHiHI")  # FRAME_HEAD + FRAME_TAIL, read in one call
U16 = np.dtype("<u2")
U32 = np.dtype("<u4")
I64 = np.dtype("<i8")


NO_HEADERS: Mapping[str, bytes] = MappingProxyType({})  # shared and read-only


class Record(NamedTuple):
    """One message. ``offset`` and ``partition`` are filled in when it is read back.

    A named tuple (immutable, as kafka-python's ConsumerRecord): a consumer builds a fetch's
    records with one C-level ``map(tuple.__new__, ...)`` over columns, half the cost of a
    Python ``__init__`` per record (:meth:`lib.records.columns.FrameColumns.records`)."""

    value: bytes
    key: bytes | None = None
    tag: str | None = None
    headers: Mapping[str, bytes] = NO_HEADERS
    timestamp: int = 0
    offset: int = -1
    partition: int = -1
    flags: int = 0
    topic: str = ""


def tag_hash(tag: str | bytes | None) -> int:
    """Stable 32-bit hash of a tag (crc32, never 0 for a real tag; 0 means "no tag")."""
    if not tag:
        return 0
    raw = tag.encode() if isinstance(tag, str) else tag
    return crc32(raw) or 1


def frame_starts(sizes: np.ndarray) -> np.ndarray:
    """Start of each frame given the frame sizes (exclusive cumulative sum, int64)."""
    starts = np.empty(len(sizes), dtype=np.int64)
    if len(sizes):
        starts[0] = 0
        np.cumsum(sizes[:-1], dtype=np.int64, out=starts[1:])
    return starts


def gather_u32(u8: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Little-endian u32 at each byte position of ``at`` (whole-array gather)."""
    idx = at[:, None] + np.arange(4)
    return np.ascontiguousarray(u8[idx]).view(U32).ravel()


def gather_u16(u8: np.ndarray, at: np.ndarray) -> np.ndarray:
    idx = at[:, None] + np.arange(2)
    return np.ascontiguousarray(u8[idx]).view(U16).ravel()


def frame_headers(u8: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The :data:`FRAME_DTYPE` header of the frame at each start: one gather of rows from a
    view whose row i is the header-sized run of bytes at i (overlapping rows, no copy).
    Against gathering ``starts[:, None] + arange(header size)`` byte by byte: 3.9 against 9.2
    us for 200 frames, and numpy let the GIL go on nearly every call (it does for more than
    500 elements), three times as often as on the rows (counted with a busy thread beside)."""
    rows = np.ndarray((max(len(u8) - FRAME_HEADER_SIZE + 1, 0), FRAME_HEADER_SIZE), np.uint8,
                      u8, 0, (1, 1))
    return rows[starts].view(FRAME_DTYPE).ravel()


def range_crcs(data: bytes | memoryview, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """CRC-32 of each byte range, in one C-level pass (map over slices, no Python loop)."""
    view = memoryview(data)
    return np.fromiter(map(crc32, map(view.__getitem__,
                                           map(slice, starts.tolist(), ends.tolist()))),
                       U32, len(starts))


# From this many frames on, a batch whose frames share one size is checked over the rows of
# one strided view: the test that they do costs ~2 us, the rows save ~0.18 us a frame.
STRIDED_FROM = 16


def frame_crcs(frames: bytes | memoryview, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Each frame's CRC-32 (of its bytes after the length and crc fields). Frames of one size
    are the rows of one strided view, whose iteration makes each row in C: 0.33 against 0.51
    us per 1 KiB frame for slices of a memoryview (most of a frame's CRC cost is the call)."""
    count = len(sizes)
    if count < STRIDED_FROM or np.count_nonzero(sizes != sizes[0]):
        return range_crcs(frames, starts + 8, starts + sizes)
    size = int(sizes[0])
    rows = np.ndarray((count, size - 8), U8, frames, int(starts[0]) + 8, (size, 1))
    return np.fromiter(map(crc32, rows), U32, count)
