"""Kafka record batches (magic 2) to tubeq batches and back.

Produce: a Kafka batch is checked (length, magic, CRC-32C over attributes..end), its records
(uncompressed, or gzip within :data:`MAX_INFLATED` bytes) are read into tubeq
:class:`~lib.records.Record`\\ s and encoded as one tubeq batch carrying the Kafka producer id,
epoch and base sequence, so the store's idempotence and transactions apply as to tubeq's own
producer. Fetch: a run of tubeq frames becomes one Kafka batch, offsets as deltas from the
first (gaps where control or aborted records were left out are legal in Kafka's format).

Both walk records one by one: a Kafka record's fields are varints, so where one ends is known
only by reading the one before it. The cost per record is stated in the README.

Mapping: a tubeq tag travels as the header :data:`TAG_HEADER`; a Kafka null value or header
value reads as empty bytes (tubeq values are bytes), and a header repeated in one record keeps
its last value (tubeq headers are a map).
"""
from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from typing import NamedTuple

from crc32c import crc32c

from lib.errors import CorruptRecord, InvalidArgument, TubeqError
from lib.records import Record

TAG_HEADER = "tubeq.tag"
# baseOffset, length, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordCount
BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
CRC_FROM = 21  # the CRC covers attributes to the end
LENGTH_AFTER = 12  # ``length`` counts the bytes after baseOffset and itself
COMPRESSION_MASK, TRANSACTIONAL, CONTROL = 0x07, 0x10, 0x20
GZIP = 1
COMPRESSION_NAMES = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
MAX_INFLATED = 64 << 20  # a compressed batch may not inflate past this (bounded memory)


class UnsupportedFormat(TubeqError):
    """Magic 0/1 message sets, or a compression tubeq does not read."""

    code = "UNSUPPORTED_FORMAT"


class UnsupportedCompression(TubeqError):
    code = "UNSUPPORTED_COMPRESSION"


class KafkaBatch(NamedTuple):
    records: list[Record]
    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool


def read_batches(data: bytes | memoryview, max_records: int) -> list[KafkaBatch]:
    """The batches of a Produce partition's ``records`` field, checked; CorruptRecord or
    UnsupportedFormat naming what is wrong."""
    view, pos, out = memoryview(data), 0, []
    while pos < len(view):
        if len(view) - pos < BATCH_HEADER.size:
            raise CorruptRecord(f"{len(view) - pos} bytes left where a {BATCH_HEADER.size}-"
                                "byte record batch header should start")
        head = BATCH_HEADER.unpack_from(view, pos)
        length, magic = head[1], head[3]
        if magic != 2:
            raise UnsupportedFormat(f"record batch magic {magic}: tubeq reads magic 2 "
                                    "(Kafka 0.11+ clients) only")
        end = pos + LENGTH_AFTER + length
        if length < BATCH_HEADER.size - LENGTH_AFTER or end > len(view):
            raise CorruptRecord(f"record batch length {length} does not fit the "
                                f"{len(view) - pos} bytes sent")
        if crc32c(view[pos + CRC_FROM:end]) != head[4]:
            raise CorruptRecord("record batch CRC-32C mismatch")
        out.append(_read_batch(view[pos:end], head, max_records))
        pos = end
    if not out:
        raise CorruptRecord("no record batch in the partition's records")
    return out


def _read_batch(batch: memoryview, head: tuple, max_records: int) -> KafkaBatch:
    attributes, base_ts, count = head[5], head[7], head[12]
    if attributes & CONTROL:
        raise InvalidArgument("a control batch (transaction marker) may not be produced")
    if not 0 < count <= max_records:
        raise CorruptRecord(f"record count {count} outside 1..{max_records}")
    body = _inflate(batch[BATCH_HEADER.size:], attributes & COMPRESSION_MASK)
    records = _read_records(body, count, base_ts)
    return KafkaBatch(records, head[9], head[10], head[11], bool(attributes & TRANSACTIONAL))


def _inflate(body: memoryview, codec: int) -> memoryview:
    if codec == 0:
        return body
    if codec != GZIP:
        name = COMPRESSION_NAMES.get(codec, str(codec))
        raise UnsupportedCompression(f"compression {name}: tubeq's Kafka port reads none "
                                     "and gzip (set compression.type=gzip or none)")
    inflater = zlib.decompressobj(wbits=31)
    try:
        out = inflater.decompress(body, MAX_INFLATED)
    except zlib.error as exc:
        raise CorruptRecord(f"gzip record batch does not inflate: {exc}") from None
    if inflater.unconsumed_tail:
        raise CorruptRecord(f"gzip record batch inflates past {MAX_INFLATED} bytes",
                            limit=MAX_INFLATED)
    return memoryview(out)


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    """A zigzag varint (Kafka's varint and varlong) at ``pos``; (value, next position)."""
    shift = result = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecord("varint longer than 10 bytes")


def _read_records(body: memoryview, count: int, base_ts: int) -> list[Record]:
    out, pos, varint = [], 0, _varint
    try:
        for _ in range(count):
            length, pos = varint(body, pos)
            end = pos + length
            if length < 6 or end > len(body):
                raise CorruptRecord(f"record length {length} does not fit the batch")
            pos += 1  # attributes: unused in magic 2
            ts_delta, pos = varint(body, pos)
            _offset_delta, pos = varint(body, pos)
            key_len, pos = varint(body, pos)
            key = None
            if key_len >= 0:
                key, pos = bytes(body[pos:pos + key_len]), pos + key_len
            value_len, pos = varint(body, pos)
            value = b""
            if value_len >= 0:
                value, pos = bytes(body[pos:pos + value_len]), pos + value_len
            header_count, pos = varint(body, pos)
            headers, tag = {}, None
            for _h in range(header_count):
                name_len, pos = varint(body, pos)
                name, pos = str(body[pos:pos + name_len], "utf-8"), pos + name_len
                hv_len, pos = varint(body, pos)
                hv = b""
                if hv_len >= 0:
                    hv, pos = bytes(body[pos:pos + hv_len]), pos + hv_len
                if name == TAG_HEADER:
                    tag = hv.decode("utf-8")
                else:
                    headers[name] = hv
            if pos != end:
                raise CorruptRecord(f"record of {length} bytes read as {length + end - pos}")
            out.append(Record(value, key, tag or None, headers, base_ts + ts_delta))
    except (IndexError, UnicodeDecodeError) as exc:
        raise CorruptRecord(f"record batch ends inside a record: {exc}") from None
    if pos != len(body):
        raise CorruptRecord(f"{len(body) - pos} bytes after the batch's {count} records")
    return out


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
                leader_epoch: int = -1) -> bytes:
    """One Kafka batch (magic 2, uncompressed) of ``records`` (their offsets and timestamps
    as read from tubeq; at least one)."""
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
    payload = b"".join(parts)
    attributes = TRANSACTIONAL if transactional else 0
    last_delta = records[-1].offset - base_offset
    head = bytearray(BATCH_HEADER.pack(
        base_offset, BATCH_HEADER.size - LENGTH_AFTER + len(payload), leader_epoch, 2, 0,
        attributes, last_delta, base_ts, max_ts, producer_id, producer_epoch, base_sequence,
        len(records)))
    crc = crc32c(payload, crc32c(memoryview(head)[CRC_FROM:]))
    struct.pack_into(">I", head, 17, crc)
    return bytes(head) + payload
