"""Kafka record batches (magic 2) to tubeq batches and back.

Produce: a Kafka batch is checked (length, magic, CRC-32C over attributes..end), its records
(uncompressed, or gzip, snappy, lz4 or zstd, each inflated within :data:`MAX_INFLATED` bytes:
the codecs are cramjam's snappy, python-lz4 and python-zstandard) are read into tubeq
:class:`~lib.records.Record`\\ s and encoded as one tubeq batch carrying the Kafka producer id,
epoch and base sequence, so the store's idempotence and transactions apply as to tubeq's own
producer. The other way, a run of tubeq frames becoming one Kafka batch, is
broker/kafka/writer.py.

Both walk records one by one: a Kafka record's fields are varints, so where one ends is known
only by reading the one before it. The cost per record is stated in the README.

Mapping: a tubeq tag travels as the header :data:`TAG_HEADER`; a Kafka null value or header
value reads as empty bytes (tubeq values are bytes), and a header repeated in one record keeps
its last value (tubeq headers are a map).
"""
from __future__ import annotations

import io
import struct
import zlib
from typing import NamedTuple

import cramjam
import lz4.frame
import numpy as np
import zstandard
from crc32c import crc32c

from broker.kafka import varints
from lib.errors import BatchTooLarge, CorruptRecord, InvalidArgument, RecordTooLarge, TubeqError
from lib.records import BatchView, Record, encode_batch
from lib.records.encode import batch_head, column_pieces
from lib.records.layout import COLUMN_BYTES_PER_RECORD, HEADER_SIZE

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


class Plain(NamedTuple):
    """The records of a batch without headers, as columns (the fast path)."""

    values: list[memoryview]
    keys: list[memoryview] | None  # None: no record has a key
    timestamps: np.ndarray  # int64


class KafkaBatch(NamedTuple):
    records: list[Record]  # read one by one (records with headers); empty when ``plain``
    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool
    plain: Plain | None = None

    def tubeq(self) -> bytes:
        """The tubeq batch of these records, with the Kafka producer's id, epoch and base
        sequence (the store deduplicates and fences on them)."""
        ids = dict(producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                   base_sequence=self.base_sequence, transactional=self.transactional)
        if self.plain is None:
            return encode_batch(self.records, **ids)
        pieces, sizes, _ = column_pieces(self.plain.values, self.plain.timestamps,
                                         self.plain.keys)
        head = batch_head(pieces, sizes, None, self.plain.timestamps, **ids)
        return b"".join((head, *pieces))

    def view(self, max_message_bytes: int, max_batch_bytes: int) -> BatchView | None:
        """The checked view of the tubeq batch the store appends, built from the columns
        without the tubeq batch around them: what ``parse_batch`` would find in it (the
        frames are this module's own, from a batch whose CRC-32C held), its limits checked
        here. None on the record-by-record path (the caller parses :meth:`tubeq`)."""
        if self.plain is None:
            return None
        if self.transactional and self.producer_id < 0:
            raise CorruptRecord("a transactional batch needs a producer id (>= 0)")
        pieces, sizes, _ = column_pieces(self.plain.values, self.plain.timestamps,
                                         self.plain.keys)
        biggest, total = int(sizes.max()), int(sizes.sum(dtype=np.int64))
        if biggest > max_message_bytes:
            raise RecordTooLarge(f"a message is {biggest} bytes, limit {max_message_bytes}",
                                 size=biggest, limit=max_message_bytes)
        if total + HEADER_SIZE + COLUMN_BYTES_PER_RECORD * len(sizes) > max_batch_bytes:
            raise BatchTooLarge(f"batch is {total} bytes of records, limit {max_batch_bytes}",
                                size=total, limit=max_batch_bytes)
        count = len(sizes)
        return BatchView(count, self.producer_id, self.producer_epoch, self.base_sequence,
                         sizes, np.zeros(count, np.uint32),
                         self.plain.timestamps.astype(np.int64),
                         memoryview(b"".join(pieces)), self.transactional,
                         keyed=self.plain.keys is not None)

    def all_records(self) -> list[Record]:
        """The records, however they were read (tests and tools; not the hot path)."""
        if self.plain is None:
            return self.records
        keys = self.plain.keys or [None] * len(self.plain.values)
        return [Record(bytes(v), None if k is None else bytes(k), None, {}, int(ts))
                for v, k, ts in zip(self.plain.values, keys, self.plain.timestamps.tolist(),
                                    strict=True)]


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
    ids = (head[9], head[10], head[11], bool(attributes & TRANSACTIONAL))
    plain = _read_plain(bytes(body), count, base_ts)
    if plain is not None:
        return KafkaBatch([], *ids, plain=plain)
    return KafkaBatch(_read_records(body, count, base_ts), *ids)


def _read_plain(body: bytes, count: int, base_ts: int) -> Plain | None:
    """The records as columns when none has a header and the keys are all set or all null
    (what producers send); None when the batch needs the record-by-record read."""
    starts, ends = varints.record_spans(body, count)
    u8 = varints.padded(body)
    at = np.array(starts, np.int64) + 1  # past the attributes byte
    ts_delta, size = varints.read_at(u8, at)
    at += size
    _offset_delta, size = varints.read_at(u8, at)
    at += size
    key_len, size = varints.read_at(u8, at)
    key_at = at + size
    at = key_at + np.maximum(key_len, 0)
    value_len, size = varints.read_at(u8, np.minimum(at, len(body)))
    value_at = at + size
    at = value_at + np.maximum(value_len, 0)
    header_count, size = varints.read_at(u8, np.minimum(at, len(body)))
    if header_count.any() or not ((key_len < 0).all() or (key_len >= 0).all()):
        return None  # the record-by-record read checks these
    if (at + size != np.array(ends, np.int64)).any() or (key_len < -1).any() \
            or (value_len < -1).any():
        raise CorruptRecord("a record's fields do not add up to its length")
    view = memoryview(body)
    values = list(map(view.__getitem__, map(slice, value_at.tolist(),
                                            (value_at + np.maximum(value_len, 0)).tolist())))
    keys = None
    if count and key_len[0] >= 0:
        keys = list(map(view.__getitem__, map(slice, key_at.tolist(),
                                              (key_at + key_len).tolist())))
    return Plain(values, keys, base_ts + ts_delta)


def _inflate(body: memoryview, codec: int) -> memoryview:
    if codec == 0:
        return body
    inflate = _INFLATERS.get(codec)
    if inflate is None:
        raise UnsupportedCompression(f"compression codec {codec}: Kafka's are 1 (gzip), 2 "
                                     "(snappy), 3 (lz4) and 4 (zstd)")
    try:
        out = inflate(body)
    except CorruptRecord:
        raise
    except Exception as exc:  # noqa: BLE001 - any codec's error on untrusted bytes
        name = COMPRESSION_NAMES[codec]
        raise CorruptRecord(f"{name} record batch does not inflate: {exc}"[:300]) from None
    if len(out) > MAX_INFLATED:
        raise CorruptRecord(f"{COMPRESSION_NAMES[codec]} record batch inflates past "
                            f"{MAX_INFLATED} bytes", limit=MAX_INFLATED)
    return memoryview(out)


def _gunzip(body: memoryview) -> bytes:
    inflater = zlib.decompressobj(wbits=31)
    out = inflater.decompress(body, MAX_INFLATED + 1)
    if len(out) <= MAX_INFLATED and not inflater.eof:
        raise CorruptRecord("gzip record batch ends early")
    return out


XERIAL = b"\x82SNAPPY\x00"  # the Java client's snappy framing (xerial), then 8 bytes of versions


def _unsnappy(body: memoryview) -> bytes:
    """Kafka's snappy: xerial-framed blocks (the Java client, librdkafka) or one raw block;
    each block's declared size is checked against the limit before it is inflated."""
    raw = bytes(body)
    if not raw.startswith(XERIAL):
        return _snappy_block(raw, 0)
    pos, out, total = 16, [], 0
    while pos < len(raw):
        (size,) = struct.unpack_from(">i", raw, pos)
        block = raw[pos + 4:pos + 4 + size]
        if size < 0 or len(block) != size:
            raise CorruptRecord("a snappy block's length does not fit the batch")
        out.append(_snappy_block(block, total))
        total += len(out[-1])
        pos += 4 + size
    return b"".join(out)


def _snappy_block(block: bytes, before: int) -> bytes:
    declared, at, shift = 0, 0, 0
    while at < min(len(block), 5):  # the block's inflated size, a varint
        declared |= (block[at] & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if block[at - 1] < 0x80:
            break
    if before + declared > MAX_INFLATED:
        raise CorruptRecord(f"snappy record batch inflates past {MAX_INFLATED} bytes",
                            limit=MAX_INFLATED)
    return bytes(cramjam.snappy.decompress_raw(block))


def _unlz4(body: memoryview) -> bytes:
    inflater = lz4.frame.LZ4FrameDecompressor()
    out = inflater.decompress(bytes(body), max_length=MAX_INFLATED + 1)
    if len(out) <= MAX_INFLATED and not inflater.eof:
        raise CorruptRecord("lz4 record batch ends early")
    return out


def _unzstd(body: memoryview) -> bytes:
    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(bytes(body))) as reader:
        return reader.read(MAX_INFLATED + 1)


_INFLATERS = {GZIP: _gunzip, 2: _unsnappy, 3: _unlz4, 4: _unzstd}


def _read_records(body: memoryview, count: int, base_ts: int) -> list[Record]:
    out, pos, varint = [], 0, varints.read_one
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
