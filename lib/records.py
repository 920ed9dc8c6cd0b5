"""Record batch codec: the one format used on the wire and on disk. Pure bytes, no I/O.

Batch layout (little-endian)::

    header   40 bytes  magic "TQRB", version, flags, reserved, length, crc,
                       count, producer_id, producer_epoch, reserved, base_sequence, reserved
    sizes    u32[count]   frame sizes        -- column arrays let the broker compute positions,
    tags     u32[count]   tag hashes         -- index entries and tag filters with numpy over
    times    i64[count]   timestamps (ms)    -- whole arrays, never per record
    frames   sum(sizes) bytes

``crc`` is one CRC-32 over every other byte of the batch: the broker checks a batch with one
call. Each frame is self-describing so a store can be rebuilt from its data log alone::

    length u32 | crc u32 | flags u8 | attrs u8 | timestamp i64 | tag_len u16 | key_len i32
    | header_count u16 | value_len u32 | tag | key | headers (name_len u16, value_len u32,
    name, value)* | value

The frame crc covers every byte after the crc field. ``key_len`` is -1 for "no key".
"""
from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from lib.errors import BatchTooLarge, CorruptRecord, RecordTooLarge

MAGIC = b"TQRB"
VERSION = 1
BATCH_HEADER = struct.Struct("<4sBBHII" "IqhhiI")
HEADER_SIZE = BATCH_HEADER.size  # 40: keeps the i64 column 8-byte aligned
CRC_AT, CRC_END = 12, 16  # the batch crc covers every byte but [CRC_AT:CRC_END]
COLUMN_BYTES_PER_RECORD = 16

FRAME_HEAD = struct.Struct("<II")
FRAME_TAIL = struct.Struct("<BBqHiHI")
FRAME_HEADER_SIZE = FRAME_HEAD.size + FRAME_TAIL.size  # 30
# The same 30 bytes as a numpy record: every frame header of a batch is read in one gather.
FRAME_DTYPE = np.dtype([("length", "<u4"), ("crc", "<u4"), ("flags", "u1"), ("attrs", "u1"),
                        ("ts", "<i8"), ("tag_len", "<u2"), ("key_len", "<i4"),
                        ("header_count", "<u2"), ("value_len", "<u4")])
FRAME_TAG_LEN_AT = FRAME_DTYPE.fields["tag_len"][1]  # 18
FRAME_VALUE_LEN_AT = FRAME_DTYPE.fields["value_len"][1]  # 26
HEADER_ENTRY = struct.Struct("<HI")

FLAG_VALUE_ZLIB = 0x01  # value is zlib-compressed (set by the producer per record)
KNOWN_FLAGS = FLAG_VALUE_ZLIB

DEFAULT_MAX_MESSAGE_BYTES = 1 << 20
DEFAULT_MAX_BATCH_BYTES = 4 << 20
MAX_TAG_BYTES = 255
MAX_HEADERS = 256  # per record: bounds the broker's header walk (one numpy pass per header)
MAX_RECORDS_PER_BATCH = 1 << 20

_U8 = np.dtype(np.uint8)
_FRAME = struct.Struct("<IIBBqHiHI")  # FRAME_HEAD + FRAME_TAIL, read in one call
_pack_head, _pack_tail, _crc32 = FRAME_HEAD.pack, FRAME_TAIL.pack, zlib.crc32
_U16 = np.dtype("<u2")
_U32 = np.dtype("<u4")
_I64 = np.dtype("<i8")
_FRAME_HEADER_BYTES = np.arange(FRAME_HEADER_SIZE)


@dataclass(slots=True)
class Record:
    """One message. ``offset`` and ``partition`` are filled in when it is read back."""

    value: bytes
    key: bytes | None = None
    tag: str | None = None
    headers: dict[str, bytes] = field(default_factory=dict)
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
    return zlib.crc32(raw) or 1


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


@dataclass(frozen=True, slots=True)
class BatchView:
    """A validated batch: header fields plus zero-copy numpy views of its columns and frames."""

    count: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    sizes: np.ndarray
    tag_hashes: np.ndarray
    timestamps: np.ndarray
    frames: memoryview

    @property
    def frames_bytes(self) -> int:
        return len(self.frames)


def parse_batch(
    data: bytes | bytearray | memoryview,
    *,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
) -> BatchView:
    """Validate a batch with one CRC call and whole-array checks; never loops per record.

    Raises CorruptRecord (structure or CRC), BatchTooLarge or RecordTooLarge, each naming the
    problem and the limit.
    """
    buf = memoryview(data).cast("B") if not isinstance(data, memoryview) else data.cast("B")
    if len(buf) > max_batch_bytes:
        raise BatchTooLarge(
            f"batch is {len(buf)} bytes, limit {max_batch_bytes}",
            size=len(buf), limit=max_batch_bytes)
    if len(buf) < HEADER_SIZE:
        raise CorruptRecord(
            f"batch is {len(buf)} bytes, shorter than its {HEADER_SIZE}-byte header")
    magic, version, _flags, _r, length, crc, count, pid, epoch, _r2, base_seq, _r3 = (
        BATCH_HEADER.unpack_from(buf)
    )
    if magic != MAGIC:
        raise CorruptRecord(f"bad batch magic {bytes(magic)!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise CorruptRecord(f"unsupported batch version {version}, this build reads {VERSION}")
    if length != len(buf):
        raise CorruptRecord(f"batch length field says {length} bytes, got {len(buf)}")
    if batch_crc(buf) != crc:
        raise CorruptRecord("batch CRC mismatch: corrupted in transit or built wrongly")
    return _columns(buf, count, pid, epoch, base_seq, max_message_bytes)


def _columns(buf: memoryview, count: int, pid: int, epoch: int, base_seq: int,
             max_message_bytes: int) -> BatchView:
    frames_at = HEADER_SIZE + COLUMN_BYTES_PER_RECORD * count
    if count < 1 or count > MAX_RECORDS_PER_BATCH or frames_at > len(buf):
        raise CorruptRecord(f"batch record count {count} does not fit its {len(buf)} bytes")
    sizes = np.frombuffer(buf, _U32, count, HEADER_SIZE)
    tags = np.frombuffer(buf, _U32, count, HEADER_SIZE + 4 * count)
    times = np.frombuffer(buf, _I64, count, HEADER_SIZE + 8 * count)
    frames = buf[frames_at:]
    if int(sizes.sum(dtype=np.int64)) != len(frames):
        raise CorruptRecord("batch frame sizes do not add up to its frame bytes")
    if int(sizes.min()) < FRAME_HEADER_SIZE:
        raise CorruptRecord(f"a frame is shorter than the {FRAME_HEADER_SIZE}-byte frame header")
    biggest = int(sizes.max())
    if biggest > max_message_bytes:
        raise RecordTooLarge(
            f"a message is {biggest} bytes, limit {max_message_bytes}",
            size=biggest, limit=max_message_bytes,
        )
    check_frames(frames, sizes, tags, times)
    return BatchView(count, pid, epoch, base_seq, sizes, tags, times, frames)


def check_frames(frames: memoryview, sizes: np.ndarray, tag_hashes: np.ndarray,
                 timestamps: np.ndarray) -> None:
    """:func:`frame_columns`, and the batch's tag-hash and timestamp columns must agree with
    the frames (the index is built from the columns and rebuilt from the frames)."""
    tags, times = frame_columns(frames, sizes)
    _require(times == timestamps, "its timestamp disagrees with the batch timestamp column")
    _require(tags == tag_hashes, "its tag disagrees with the batch tag-hash column")


def frame_columns(frames: memoryview, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Check every frame of a run the way decoding will and return each frame's tag hash and
    timestamp: the one frame check of the broker (append) and of recovery (chunk scan).

    Length field, known flags, tag/key/headers/value lengths adding up to the frame (headers
    walked with one numpy pass per header position) and each frame's CRC. Whole-array numpy
    for the structure; the CRCs are one C-level ``map`` of ``zlib.crc32`` over the frame
    slices (no Python bytecode per record). Raises CorruptRecord naming the first bad frame.
    """
    starts = frame_starts(sizes)
    ends = starts + sizes
    u8 = np.frombuffer(frames, _U8)
    head = frame_headers(u8, starts)
    _require(head["length"] == sizes, "its length field disagrees with the batch size column")
    _require(head["flags"] & ~np.uint8(KNOWN_FLAGS) == 0, "it has unknown flags")
    key_lens = head["key_len"].astype(np.int64)
    _require(key_lens >= -1, "its key length is negative")
    tag_lens = head["tag_len"].astype(np.int64)
    pos = starts + FRAME_HEADER_SIZE + tag_lens + np.maximum(key_lens, 0)
    _require(pos <= ends, "its tag and key run past the end of the frame")
    pos = _walk_headers(u8, pos, ends, head["header_count"])
    _require(pos + head["value_len"] == ends, "its field lengths do not add up to the frame "
             "length")
    _require(_crcs(frames, starts + 8, ends) == head["crc"], "its CRC does not match its bytes")
    tagged = np.flatnonzero(tag_lens)
    hashes = np.zeros(len(sizes), _U32)
    if len(tagged):
        at = starts[tagged] + FRAME_HEADER_SIZE
        hashes[tagged] = np.maximum(_crcs(frames, at, at + tag_lens[tagged]), 1)  # tag_hash
    return hashes, head["ts"]


def frame_sizes(frames: memoryview) -> np.ndarray:
    """The size of each frame of a run, by its length field (recovery has no size column)."""
    return np.fromiter(map(len, iter_frames(frames)), _U32)


def frame_headers(u8: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The :data:`FRAME_DTYPE` header of the frame at each start (one gather for all)."""
    return u8[starts[:, None] + _FRAME_HEADER_BYTES].view(FRAME_DTYPE).ravel()


def _crcs(frames: memoryview, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """CRC-32 of each byte range, in one C-level pass (map over slices, no Python loop)."""
    return np.fromiter(map(zlib.crc32, map(frames.__getitem__,
                                           map(slice, starts.tolist(), ends.tolist()))),
                       _U32, len(starts))


def _walk_headers(u8: np.ndarray, pos: np.ndarray, ends: np.ndarray,
                  counts: np.ndarray) -> np.ndarray:
    """Positions after each frame's headers; header k of every frame is read in one pass."""
    _require(counts <= MAX_HEADERS, f"it has more than {MAX_HEADERS} headers")
    most = int(counts.max()) if len(counts) else 0
    if most == 0:
        return pos
    pos = pos.copy()
    for k in range(most):
        live = np.flatnonzero(counts > k)
        at = pos[live]
        _require_at(live, at + HEADER_ENTRY.size <= ends[live], "its headers run past its end")
        lens = gather_u16(u8, at).astype(np.int64) + gather_u32(u8, at + 2)
        pos[live] = at + HEADER_ENTRY.size + lens
        _require_at(live, pos[live] <= ends[live], "its headers run past its end")
    return pos


def _require(ok: np.ndarray, problem: str) -> None:
    if not ok.all():
        raise CorruptRecord(f"frame {int(np.argmin(ok))} of the batch is malformed: {problem}")


def _require_at(index: np.ndarray, ok: np.ndarray, problem: str) -> None:
    if not ok.all():
        raise CorruptRecord(f"frame {int(index[np.argmin(ok)])} of the batch is malformed: "
                            f"{problem}")


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
    return np.ascontiguousarray(u8[idx]).view(_U32).ravel()


def gather_u16(u8: np.ndarray, at: np.ndarray) -> np.ndarray:
    idx = at[:, None] + np.arange(2)
    return np.ascontiguousarray(u8[idx]).view(_U16).ravel()


def decode_frame(frame: bytes | memoryview) -> Record:
    """Decode and CRC-check one frame; raises CorruptRecord naming what is wrong."""
    mv = memoryview(frame)
    if len(mv) < FRAME_HEADER_SIZE:
        raise CorruptRecord(f"frame of {len(mv)} bytes is shorter than its header")
    length, crc = FRAME_HEAD.unpack_from(mv)
    if length != len(mv):
        raise CorruptRecord(f"frame length field says {length}, frame has {len(mv)} bytes")
    if zlib.crc32(mv[8:]) != crc:
        raise CorruptRecord("frame CRC mismatch")
    flags, _a, ts, tag_len, key_len, n_headers, value_len = FRAME_TAIL.unpack_from(mv, 8)
    pos = FRAME_HEADER_SIZE
    tag = bytes(mv[pos:pos + tag_len]).decode("utf-8", "replace") if tag_len else None
    pos += tag_len
    key = None
    if key_len >= 0:
        key = bytes(mv[pos:pos + key_len])
        pos += key_len
    headers: dict[str, bytes] = {}
    for _ in range(n_headers):
        if pos + HEADER_ENTRY.size > length:
            raise CorruptRecord("frame headers run past the end of the frame")
        nlen, vlen = HEADER_ENTRY.unpack_from(mv, pos)
        pos += HEADER_ENTRY.size
        name = bytes(mv[pos:pos + nlen]).decode("utf-8", "replace")
        headers[name] = bytes(mv[pos + nlen:pos + nlen + vlen])
        pos += nlen + vlen
    if pos + value_len != length:
        raise CorruptRecord("frame field lengths do not add up to the frame length")
    value = bytes(mv[pos:length])
    if flags & FLAG_VALUE_ZLIB:
        value = zlib.decompress(value)
    return Record(value, key, tag, headers, ts, flags=flags)


def iter_frames(data: bytes | memoryview) -> Iterable[memoryview]:
    """Split a run of concatenated frames by their length fields."""
    mv = memoryview(data)
    pos = 0
    while pos < len(mv):
        if pos + 4 > len(mv):
            raise CorruptRecord("truncated frame length at the end of the frame run")
        (length,) = struct.unpack_from("<I", mv, pos)
        if length < FRAME_HEADER_SIZE or pos + length > len(mv):
            raise CorruptRecord(f"frame at byte {pos} has an impossible length {length}")
        yield mv[pos:pos + length]
        pos += length


def decode_frames(data: bytes | memoryview, offsets: Sequence[int] | np.ndarray | None = None,
                  partition: int = -1, topic: str = "") -> list[Record]:
    """Decode a run of frames (a fetch result), checking every frame CRC."""
    records = [decode_frame(f) for f in iter_frames(data)]
    if offsets is not None:
        if len(offsets) != len(records):
            raise CorruptRecord(f"{len(records)} frames but {len(offsets)} offsets")
        for rec, off in zip(records, offsets, strict=True):
            rec.offset = int(off)
            rec.partition = partition
            rec.topic = topic
    return records


def headers_of(mapping: Mapping[str, bytes] | None) -> dict[str, bytes]:
    """Copy and type-check user headers (names str, values bytes)."""
    out: dict[str, bytes] = {}
    for name, val in (mapping or {}).items():
        if not isinstance(name, str) or not isinstance(val, (bytes, bytearray)):
            raise TypeError("headers map str names to bytes values")
        out[name] = bytes(val)
    return out


def decode_records(frames: bytes, offsets: np.ndarray, partition: int, topic: str,
                   sizes: list[int] | None = None) -> list[Record]:
    """Decode a fetched run of frames (one per offset), checking every frame CRC.

    Frames without headers or compression (the common case) are decoded inline; the others go
    through :func:`lib.records.decode_frame`. ``sizes`` (if given) receives each frame's size.
    """
    out, end = decode_span(frames, offsets.tolist(), 0, partition, topic, sizes)
    if end != len(frames):
        raise CorruptRecord(f"{len(out)} offsets but {len(frames) - end} more frame bytes")
    return out


def decode_span(frames: bytes, offsets: list[int], pos: int, partition: int, topic: str,
                sizes: list[int] | None = None) -> tuple[list[Record], int]:
    """Decode ``len(offsets)`` frames starting at byte ``pos``; returns them and the end.

    A frame that cannot be decoded raises CorruptRecord naming the topic, partition and
    offset, and how to skip it (nothing after it in the partition is delivered until then).
    """
    mv = memoryview(frames)
    n = len(mv)
    unpack, crc32 = _FRAME.unpack_from, zlib.crc32
    out: list[Record] = []
    append = out.append
    off = offsets[0] if offsets else -1
    try:
        for off in offsets:
            if pos + FRAME_HEADER_SIZE > n:
                raise CorruptRecord(f"fetched frames end early at byte {pos}")
            length, crc, flags, _a, ts, tag_len, key_len, n_headers, _vlen = unpack(mv, pos)
            end = pos + length
            if length < FRAME_HEADER_SIZE or end > n:
                raise CorruptRecord(f"fetched frame at byte {pos} has length {length}")
            if n_headers or flags & FLAG_VALUE_ZLIB:
                rec = decode_frame(mv[pos:end])
                rec.offset, rec.partition, rec.topic = off, partition, topic
            else:
                if crc32(mv[pos + 8:end]) != crc:
                    raise CorruptRecord("frame CRC mismatch")
                p = pos + FRAME_HEADER_SIZE
                tag = str(mv[p:p + tag_len], "utf-8", "replace") if tag_len else None
                p += tag_len
                key = None
                if key_len >= 0:
                    key, p = frames[p:p + key_len], p + key_len
                rec = Record(frames[p:end], key, tag, {}, ts, off, partition, flags, topic)
            append(rec)
            if sizes is not None:
                sizes.append(length)
            pos = end
    except (CorruptRecord, zlib.error) as exc:
        raise _undecodable(topic, partition, off, exc) from exc
    return out, pos


def _undecodable(topic: str, partition: int, offset: int, exc: Exception) -> CorruptRecord:
    why = exc.message if isinstance(exc, CorruptRecord) else f"bad compressed value: {exc}"
    return CorruptRecord(
        f"{topic}[{partition}] offset {offset} cannot be decoded ({why}); nothing after it in "
        f"this partition is delivered until the consumer seeks past it: "
        f"seek(TopicPartition({topic!r}, {partition}), {offset + 1})",
        topic=topic, partition=partition, offset=offset)
