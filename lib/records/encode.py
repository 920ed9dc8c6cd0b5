"""Encoding frames and batches (producers; tests). The broker never encodes a frame."""
from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lib.errors import CorruptRecord, RecordTooLarge
from lib.records.layout import (
    BATCH_HEADER,
    BATCH_TRANSACTIONAL,
    COLUMN_BYTES_PER_RECORD,
    COLUMNS_OF,
    COUNT_AT,
    CRC_AT,
    CRC_END,
    FEW_COLUMNS,
    FLAG_CONTROL,
    FRAME_DTYPE,
    FRAME_HEAD,
    FRAME_HEADER_SIZE,
    FRAME_TAIL,
    HEADER_ENTRY,
    HEADER_SIZE,
    I64,
    MAGIC,
    MAX_HEADERS,
    MAX_TAG_BYTES,
    U32,
    VERSION,
    Record,
    crc32,
    tag_hash,
)

# Bound once: the frame encoders call them per record.
_pack_head, _pack_tail, _crc32 = FRAME_HEAD.pack, FRAME_TAIL.pack, crc32


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
    return FRAME_HEAD.pack(len(body) + 8, crc32(body)) + body


CONTROL_VALUE = struct.Struct("<qi")  # a marker's producer id and epoch


def control_frame(commit: bool, timestamp: int, producer_id: int = -1,
                  producer_epoch: int = -1) -> bytes:
    """A transaction marker's frame (FLAG_CONTROL; key ``commit`` or ``abort``, the producer
    id and epoch as its value, so a copy of the log knows the marker from its frame alone):
    written by the broker for the coordinator, refused from producers, never delivered to
    consumers."""
    return encode_frame(Record(CONTROL_VALUE.pack(producer_id, producer_epoch),
                               key=b"commit" if commit else b"abort",
                               timestamp=timestamp, flags=FLAG_CONTROL))


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
    transactional: bool = False,
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
        transactional=transactional,
    )


def assemble_batch(
    frames: Sequence[bytes],
    tag_hashes: Iterable[int],
    timestamps: Iterable[int],
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    """Build a batch from already encoded frames (lets the producer encode each record once)."""
    body = b"".join(frames)
    head = batch_head(body, [len(f) for f in frames], tag_hashes, timestamps,
                      producer_id=producer_id, producer_epoch=producer_epoch,
                      base_sequence=base_sequence, transactional=transactional)
    return head + body


ROWS_UP_TO = 512  # encode_columns lays out fixed-size records up to this size as 2-D rows
MAX_BULK_FIELD = 1 << 26  # encode_columns packs value and key lengths into one int64


def batch_head(
    frames: bytes | bytearray | memoryview | Pieces,
    sizes: Sequence[int],
    tag_hashes: Iterable[int] | None,
    timestamps: Sequence[int],
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    """Header and column arrays of a batch whose frames are already laid out back to back in
    ``frames`` (bytes, or a list of pieces to join): ``batch_head(...) + frames`` is the
    batch. The crc is computed over the pieces, so the caller joins them once, into whatever
    envelope it sends (the producer's request). ``tag_hashes`` None means no record has a
    tag."""
    n = len(sizes)
    if n <= FEW_COLUMNS:
        columns = COLUMNS_OF[n].pack(*sizes, *([0] * n if tag_hashes is None else tag_hashes),
                                     *timestamps)
    else:
        tags = np.zeros(n, dtype=U32) if tag_hashes is None else \
            np.fromiter(tag_hashes, dtype=U32, count=n)
        columns = b"".join((np.array(sizes, dtype=U32).tobytes(), tags.tobytes(),
                            np.array(timestamps, dtype=I64).tobytes()))
    fields = [MAGIC, VERSION, BATCH_TRANSACTIONAL if transactional else 0, 0,
              HEADER_SIZE + len(columns) + joined_len(frames), 0, n,
              producer_id, producer_epoch, 0, base_sequence, 0]
    header = BATCH_HEADER.pack(*fields)
    fields[5] = crc32(columns, crc32(header[CRC_END:], crc32(header[:CRC_AT])))
    return BATCH_HEADER.pack(*fields) + columns


def restamp_batch(batch: memoryview, producer_id: int, producer_epoch: int,
                  base_sequence: int) -> None:
    """Give the (writable) batch another producer id, epoch and base sequence, and the CRC
    that goes with them."""
    fields = list(BATCH_HEADER.unpack_from(batch))
    fields[7], fields[8], fields[10] = producer_id, producer_epoch, base_sequence
    fields[5] = 0
    BATCH_HEADER.pack_into(batch, 0, *fields)
    fields[5] = batch_crc(batch, fields[1])
    BATCH_HEADER.pack_into(batch, 0, *fields)


class Pieces(list):
    """Frames as pieces to join once, into whatever carries them, and their total bytes."""

    __slots__ = ("nbytes",)

    def __init__(self, pieces: Iterable[Any], nbytes: int) -> None:
        super().__init__(pieces)
        self.nbytes = nbytes


def joined_len(frames: bytes | bytearray | memoryview | Pieces) -> int:
    """Bytes of ``frames``, whole or as :class:`Pieces`."""
    return frames.nbytes if isinstance(frames, Pieces) else len(frames)


def batch_crc(buf: memoryview, version: int = VERSION) -> int:
    """CRC-32 of the batch's header (but the crc field) and columns; version 1 batches also
    covered their frames (layout.py: why no longer)."""
    end = len(buf)
    if version != 1 and len(buf) >= COUNT_AT + 4:
        count = int.from_bytes(buf[COUNT_AT:COUNT_AT + 4], "little")
        end = min(end, HEADER_SIZE + COLUMN_BYTES_PER_RECORD * count)
    return crc32(buf[CRC_END:end], crc32(buf[:CRC_AT]))


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


def encode_columns(values: Sequence[bytes], timestamp: int | np.ndarray,
                   keys: Sequence[bytes] | None = None,
                   tags: Sequence[str] | None = None) -> EncodedRun:
    """Frames for many records without headers in one pass over columns (the bulk producer):
    :func:`column_pieces` joined."""
    pieces, sizes, tag_hashes = column_pieces(values, timestamp, keys, tags)
    return EncodedRun(b"".join(pieces), sizes, tag_hashes)


def column_pieces(values: Sequence[bytes], timestamp: int | np.ndarray,
                  keys: Sequence[bytes] | None = None, tags: Sequence[str] | None = None
                  ) -> tuple[Pieces, np.ndarray, np.ndarray | None]:
    """The frames of many records without headers as pieces to join, with their sizes and
    tag hashes. The producer joins the pieces once, into its request (``Producer.send``'s
    plain records, when their batch is sealed). ``timestamp`` is one for all or an int64
    array, one per record; ``keys`` (bytes each) and ``tags`` (str each, "" for none) are per
    record when given.

    Byte for byte what :func:`encode_frame` builds per record, with no Python bytecode per
    record: the 30-byte frame headers are one numpy structured array; the CRCs are C-level
    ``map`` s of ``zlib.crc32`` over the caller's own objects, one per column, each fed the
    running CRCs of the previous one (a frame's tail differs between records only by its
    length fields, so one crc32 per distinct tail starts them); the frames are one ``join``.
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
        tag_hashes = np.fromiter(map(_crc32, raw_tags), U32, n)
        tag_hashes[(tag_hashes == 0) & (tlen > 0)] = 1  # tag_hash: never 0 for a real tag
        columns.append(raw_tags)
    if keys is not None:
        head["key_len"] = np.fromiter(map(len, keys), np.int64, n)
        columns.append(keys)
    columns.append(values)
    key_lens = head["key_len"].astype(np.int64)
    biggest = max(int(vlen.max(initial=0)), int(key_lens.max(initial=0)))
    if biggest >= MAX_BULK_FIELD:
        raise RecordTooLarge(f"a value or key is {biggest} bytes, limit {MAX_BULK_FIELD - 1}",
                             size=biggest, limit=MAX_BULK_FIELD - 1)
    sizes = FRAME_HEADER_SIZE + head["tag_len"].astype(np.int64) + np.maximum(key_lens, 0) \
        + vlen
    head["length"] = sizes
    shape = (vlen << 35) | ((key_lens + 1) << 9) | head["tag_len"]
    stamps = timestamp if isinstance(timestamp, np.ndarray) else None
    head["crc"] = _frame_crcs(head, columns, *_tail_kinds(shape, stamps))
    widths = [head["tag_len"]] if tags is not None else []
    widths += [key_lens] if keys is not None else []
    return Pieces(_lay_out(head, columns, [*widths, vlen]), int(sizes.sum())), \
        sizes.astype(U32), tag_hashes


def encode_run(values: Sequence[bytes], timestamp: int, keys: Sequence[bytes] | None = None,
               tags: Sequence[str] | None = None,
               headers: Sequence[Mapping[str, bytes] | None] | None = None) -> EncodedRun:
    """:func:`encode_columns`, or, with ``headers`` (a mapping or None per record), one
    :func:`encode_frame` per record: headers vary in number and size per record, which the
    column pass does not lay out. Either way the same frames as ``Producer.send``."""
    if headers is None:
        return encode_columns(values, timestamp, keys, tags)
    frames = [encode_frame(Record(bytes(v), None if keys is None else bytes(keys[i]),
                                  (tags[i] or None) if tags is not None else None,
                                  headers_of(headers[i]), timestamp))
              for i, v in enumerate(values)]
    hashes = None if tags is None else np.fromiter(map(tag_hash, tags), U32, len(tags))
    return EncodedRun(b"".join(frames), np.fromiter(map(len, frames), U32, len(frames)),
                      hashes)


def _lay_out(head: np.ndarray, columns: list[Sequence[bytes]], widths: list[np.ndarray]
             ) -> list[Any]:
    """The frames back to back, as pieces to join: header, then each column's bytes, per
    record. When every column has one width (fixed-size records, the usual bulk load) and
    records are small, the frames are the rows of one 2-D array filled column block by column
    block, one piece (2x faster than the join at 100 B; at 1 KiB its extra copies cost more
    than they save); else a header piece and a piece per column, per record."""
    n = len(head)
    heads = head.view(np.uint8).reshape(n, FRAME_HEADER_SIZE)
    if all(int(w.min()) == int(w.max()) for w in widths) and \
            sum(int(w[0]) for w in widths) <= ROWS_UP_TO:
        cut = np.cumsum([FRAME_HEADER_SIZE] + [int(w[0]) for w in widths]).tolist()
        rows = np.empty((n, cut[-1]), np.uint8)
        rows[:, :FRAME_HEADER_SIZE] = heads
        for column, a, b in zip(columns, cut, cut[1:], strict=False):
            if b > a:
                rows[:, a:b] = np.frombuffer(b"".join(column), np.uint8).reshape(n, b - a)
        return [memoryview(rows).cast("B")]
    flat = heads.tobytes()  # bytes slices, not memoryviews: untracked by the cyclic GC
    at = range(0, FRAME_HEADER_SIZE * (n + 1), FRAME_HEADER_SIZE)
    pieces: list[Any] = [None] * (n * (len(columns) + 1))
    step = len(columns) + 1
    pieces[::step] = map(flat.__getitem__, map(slice, at, at[1:]))
    for i, column in enumerate(columns, 1):
        pieces[i::step] = column
    return pieces


def _tail_kinds(shape: np.ndarray, stamps: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Which frames have equal tails (header bytes 8..30; they vary by ``shape``, the length
    fields, and by timestamp): (index of the first frame of each kind, each frame's kind).

    A producer's batch is a few runs of equal tails (one value size, a few milliseconds), so
    runs of equal neighbours are the kinds, with no sort; when that finds many runs the
    kinds are the distinct (shape, timestamp) pairs instead (np.unique sorts)."""
    n = len(shape)
    if n == 0:
        return np.zeros(0, np.intp), np.zeros(0, np.intp)
    change = shape[1:] != shape[:-1]
    if stamps is not None:
        change |= stamps[1:] != stamps[:-1]
    starts = np.flatnonzero(change) + 1
    if len(starts) * 8 <= n:
        kinds = np.zeros(n, np.intp)
        kinds[starts] = 1
        return np.concatenate(([0], starts)), np.cumsum(kinds)
    if stamps is not None:
        _, shape_id = np.unique(shape, return_inverse=True)
        _, ts_id = np.unique(stamps, return_inverse=True)
        shape = shape_id.ravel() * (int(ts_id.max()) + 1) + ts_id.ravel()
    _kinds, first, inverse = np.unique(shape, return_index=True, return_inverse=True)
    return first, inverse.ravel()


def _frame_crcs(head: np.ndarray, columns: list[Sequence[bytes]], first: np.ndarray,
                kinds: np.ndarray) -> np.ndarray:
    """Each frame's CRC: crc32 over its tail (header bytes 8..30), then its columns' bytes;
    one crc32 per kind of tail (:func:`_tail_kinds`)."""
    tails = head.view(np.uint8).reshape(len(head), FRAME_HEADER_SIZE)[first, 8:]
    running: Iterable[int] = np.fromiter(map(_crc32, tails), np.int64, len(first))[
        kinds].tolist()
    for column in columns:
        running = map(_crc32, column, running)
    return np.fromiter(running, U32, len(head))
