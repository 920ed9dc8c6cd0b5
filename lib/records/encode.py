"""Encoding frames and batches (producers; tests). The broker never encodes a frame."""
from __future__ import annotations

import itertools
import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from lib.errors import CorruptRecord, RecordTooLarge
from lib.records.layout import (
    _I64,
    _U32,
    BATCH_HEADER,
    CRC_AT,
    CRC_END,
    FRAME_DTYPE,
    FRAME_HEAD,
    FRAME_HEADER_SIZE,
    FRAME_TAIL,
    HEADER_ENTRY,
    HEADER_SIZE,
    MAGIC,
    MAX_HEADERS,
    MAX_TAG_BYTES,
    VERSION,
    Record,
    _crc32,
    _pack_head,
    _pack_tail,
    frame_starts,
    tag_hash,
)


def encode_frame(record: Record) -> bytes:
    """Encode one frame; producers call this per record, the broker never does."""
    tag = record.tag.encode() if record.tag else b""
    if len(tag) > MAX_TAG_BYTES:
        raise RecordTooLarge(f"tag is {len(tag)} bytes, limit {MAX_TAG_BYTES}", limit=MAX_TAG_BYTES)
    if len(record.headers) > MAX_HEADERS:
        raise RecordTooLarge(f"record has {len(record.headers)} headers, limit {MAX_HEADERS}",
                             limit=MAX_HEADERS)
    key = record.key
    parts = [b"", b"", tag, key or b""]
    for name, val in record.headers.items():
        raw_name = name.encode()
        parts += (HEADER_ENTRY.pack(len(raw_name), len(val)), raw_name, val)
    parts.append(record.value)
    parts[1] = FRAME_TAIL.pack(
        record.flags, 0, record.timestamp, len(tag), -1 if key is None else len(key),
        len(record.headers), len(record.value),
    )
    body = b"".join(parts)
    return FRAME_HEAD.pack(len(body) + 8, zlib.crc32(body)) + body


def plain_frame(value: bytes, key: bytes | None, timestamp: int, flags: int = 0
                ) -> tuple[bytes, ...]:
    """The frame of a record without tag and headers, as pieces to join or append: byte for
    byte what :func:`encode_frame` builds, without its intermediate copies (the producer's hot
    path; tests/unit/test_producer_input.py checks the equality)."""
    if key is None:
        tail = _pack_tail(flags, 0, timestamp, 0, -1, 0, len(value))
        return _pack_head(FRAME_HEADER_SIZE + len(value), _crc32(value, _crc32(tail))), tail, \
            value
    tail = _pack_tail(flags, 0, timestamp, 0, len(key), 0, len(value))
    crc = _crc32(value, _crc32(key, _crc32(tail)))
    return _pack_head(FRAME_HEADER_SIZE + len(key) + len(value), crc), tail, key, value


def encode_batch(
    records: Sequence[Record],
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """Encode records into one batch (header, column arrays, frames)."""
    if not records:
        raise CorruptRecord("a batch needs at least one record")
    frames = [encode_frame(r) for r in records]
    return assemble_batch(
        frames,
        [tag_hash(r.tag) for r in records],
        [r.timestamp for r in records],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )


def assemble_batch(
    frames: Sequence[bytes],
    tag_hashes: Iterable[int],
    timestamps: Iterable[int],
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """Build a batch from already encoded frames (lets the producer encode each record once)."""
    body = b"".join(frames)
    head = batch_head(body, [len(f) for f in frames], tag_hashes, timestamps,
                      producer_id=producer_id, producer_epoch=producer_epoch,
                      base_sequence=base_sequence)
    return head + body


FEW_COLUMNS = 16


def batch_head(
    frames: bytes | bytearray,
    sizes: Sequence[int],
    tag_hashes: Iterable[int] | None,
    timestamps: Sequence[int],
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """Header and column arrays of a batch whose frames are already laid out back to back in
    ``frames``: ``batch_head(...) + frames`` is the batch. The crc is computed over the pieces,
    so the caller joins them once, into whatever envelope it sends (the producer's request).
    ``tag_hashes`` None means no record has a tag."""
    n = len(sizes)
    if n <= FEW_COLUMNS:  # struct beats numpy's fixed cost for a handful (send_sync)
        columns = struct.pack(f"<{n}I{n}I{n}q", *sizes,
                              *([0] * n if tag_hashes is None else tag_hashes), *timestamps)
    else:
        tags = np.zeros(n, dtype=_U32) if tag_hashes is None else \
            np.fromiter(tag_hashes, dtype=_U32, count=n)
        columns = b"".join((np.array(sizes, dtype=_U32).tobytes(), tags.tobytes(),
                            np.array(timestamps, dtype=_I64).tobytes()))
    header = bytearray(BATCH_HEADER.pack(
        MAGIC, VERSION, 0, 0, HEADER_SIZE + len(columns) + len(frames), 0, n, producer_id,
        producer_epoch, 0, base_sequence, 0))
    crc = zlib.crc32(frames, zlib.crc32(columns, zlib.crc32(
        header[CRC_END:], zlib.crc32(header[:CRC_AT]))))
    struct.pack_into("<I", header, CRC_AT, crc)
    return bytes(header) + columns


def batch_crc(buf: memoryview) -> int:
    """CRC-32 of every byte of the batch except the crc field itself."""
    return zlib.crc32(buf[CRC_END:], zlib.crc32(buf[:CRC_AT]))


def headers_of(mapping: Mapping[str, bytes] | None) -> dict[str, bytes]:
    """Copy and type-check user headers (names str, values bytes)."""
    out: dict[str, bytes] = {}
    for name, val in (mapping or {}).items():
        if not isinstance(name, str) or not isinstance(val, (bytes, bytearray)):
            raise TypeError("headers map str names to bytes values")
        out[name] = bytes(val)
    return out


@dataclass(frozen=True)
class EncodedRun:
    """Frames laid back to back, with the batch columns that describe them."""

    frames: bytes
    sizes: np.ndarray  # u32 per frame
    tag_hashes: np.ndarray | None  # u32 per frame, None: no record has a tag


def encode_columns(values: Sequence[bytes], timestamp: int,
                   keys: Sequence[bytes] | None = None,
                   tags: Sequence[str] | None = None) -> EncodedRun:
    """Frames for many records without headers in one pass over columns (the bulk producer).
    ``keys`` (bytes each) and ``tags`` (str each, "" for none) are per record when given.

    Byte for byte what :func:`encode_frame` builds per record: the 30-byte frame headers are
    one numpy structured array, the bytes are laid out with one ``join``, and the CRCs are one
    C-level ``map`` of ``zlib.crc32``, written back with one numpy scatter. No Python bytecode
    runs per record.
    """
    n = len(values)
    vlen = np.fromiter(map(len, values), np.int64, n)
    head = np.zeros(n, FRAME_DTYPE)
    head["ts"] = timestamp
    head["value_len"] = vlen
    head["key_len"] = -1
    columns: list[Sequence[bytes]] = []
    tag_hashes = None
    if tags is not None:
        raw_tags = list(map(str.encode, tags))
        tlen = np.fromiter(map(len, raw_tags), np.int64, n)
        if int(tlen.max(initial=0)) > MAX_TAG_BYTES:
            raise RecordTooLarge(f"a tag is {int(tlen.max())} bytes, limit {MAX_TAG_BYTES}",
                                 limit=MAX_TAG_BYTES)
        head["tag_len"] = tlen
        tag_hashes = np.fromiter(map(_crc32, raw_tags), _U32, n)
        tag_hashes[(tag_hashes == 0) & (tlen > 0)] = 1  # tag_hash: never 0 for a real tag
        columns.append(raw_tags)
    if keys is not None:
        head["key_len"] = np.fromiter(map(len, keys), np.int64, n)
        columns.append(keys)
    columns.append(values)
    sizes = FRAME_HEADER_SIZE + head["tag_len"].astype(np.int64) \
        + np.maximum(head["key_len"], 0) + vlen
    head["length"] = sizes
    heads = memoryview(head.tobytes())
    at = np.arange(0, FRAME_HEADER_SIZE * n, FRAME_HEADER_SIZE).tolist()
    head_pieces = map(heads.__getitem__, map(slice, at, at[1:] + [FRAME_HEADER_SIZE * n]))
    pieces = itertools.chain.from_iterable(zip(head_pieces, *columns, strict=True))
    buf = bytearray(b"".join(pieces))
    starts = frame_starts(sizes)
    ends = (starts + sizes).tolist()
    mv = memoryview(buf)
    crcs = np.fromiter(map(_crc32, map(mv.__getitem__, map(slice, (starts + 8).tolist(), ends))),
                       _U32, n)
    u8 = np.frombuffer(buf, np.uint8)
    u8[(starts + 4)[:, None] + np.arange(4)] = crcs.view(np.uint8).reshape(n, 4)
    del u8, mv
    return EncodedRun(bytes(buf), sizes.astype(_U32), tag_hashes)
