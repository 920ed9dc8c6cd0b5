"""Decoding frames into :class:`Record` s (consumers, tools): the one place a frame is
decoded, every frame CRC checked."""
from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Sequence

import numpy as np

from lib.errors import CorruptRecord
from lib.records.layout import (
    FLAG_VALUE_ZLIB,
    FRAME_HEAD,
    FRAME_HEADER,
    FRAME_HEADER_SIZE,
    FRAME_TAIL,
    HEADER_ENTRY,
    NO_HEADERS,
    Record,
    crc32,
)


def decode_frame(frame: bytes | memoryview) -> Record:
    """Decode and CRC-check one frame; raises CorruptRecord naming what is wrong."""
    mv = memoryview(frame)
    if len(mv) < FRAME_HEADER_SIZE:
        raise CorruptRecord(f"frame of {len(mv)} bytes is shorter than its header")
    length, crc = FRAME_HEAD.unpack_from(mv)
    if length != len(mv):
        raise CorruptRecord(f"frame length field says {length}, frame has {len(mv)} bytes")
    if crc32(mv[8:]) != crc:
        raise CorruptRecord("frame CRC mismatch")
    flags, _a, ts, tag_len, key_len, n_headers, value_len = FRAME_TAIL.unpack_from(mv, 8)
    pos = FRAME_HEADER_SIZE
    tag = bytes(mv[pos:pos + tag_len]).decode("utf-8", "replace") if tag_len else None
    pos += tag_len
    key = None
    if key_len >= 0:
        key = bytes(mv[pos:pos + key_len])
        pos += key_len
    headers: dict[str, bytes] = {} if n_headers else NO_HEADERS  # type: ignore[assignment]
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
        try:
            value = zlib.decompress(value)
        except zlib.error as exc:
            raise CorruptRecord(f"frame's compressed value does not inflate ({exc})") from None
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
        return [rec._replace(offset=int(off), partition=partition, topic=topic)
                for rec, off in zip(records, offsets, strict=True)]
    return records


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
    unpack, new = FRAME_HEADER.unpack_from, tuple.__new__
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
            if not (n_headers or flags or tag_len) and key_len < 0:  # the commonest frame
                if crc32(mv[pos + 8:end]) != crc:
                    raise CorruptRecord("frame CRC mismatch")
                rec = new(Record, (frames[pos + FRAME_HEADER_SIZE:end], None, None, NO_HEADERS,
                                   ts, off, partition, 0, topic))
            elif n_headers or flags & FLAG_VALUE_ZLIB:
                rec = decode_frame(mv[pos:end])._replace(offset=off, partition=partition,
                                                          topic=topic)
            else:
                if crc32(mv[pos + 8:end]) != crc:
                    raise CorruptRecord("frame CRC mismatch")
                p = pos + FRAME_HEADER_SIZE
                tag = str(mv[p:p + tag_len], "utf-8", "replace") if tag_len else None
                p += tag_len
                key = None
                if key_len >= 0:
                    key, p = frames[p:p + key_len], p + key_len
                rec = new(Record, (frames[p:end], key, tag, NO_HEADERS, ts, off, partition,
                                   flags, topic))
            append(rec)
            if sizes is not None:
                sizes.append(length)
            pos = end
    except (CorruptRecord, zlib.error) as exc:
        raise undecodable(topic, partition, off, exc) from exc
    return out, pos


def undecodable(topic: str, partition: int, offset: int, exc: Exception) -> CorruptRecord:
    why = exc.message if isinstance(exc, CorruptRecord) else f"bad compressed value: {exc}"
    return CorruptRecord(
        f"{topic}[{partition}] offset {offset} cannot be decoded ({why}); nothing after it in "
        f"this partition is delivered until the consumer seeks past it: "
        f"seek(TopicPartition({topic!r}, {partition}), {offset + 1})",
        topic=topic, partition=partition, offset=offset)
