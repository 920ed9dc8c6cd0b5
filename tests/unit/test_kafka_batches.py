"""Kafka record batches (magic 2) read and written by broker/kafka/batches.py, held to
kafka-python's own implementation of the format (a codec nobody here wrote)."""
from __future__ import annotations

import gzip
import struct

import cramjam
import lz4.frame
import numpy as np
import pytest
import zstandard
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from broker.kafka.batches import (
    MAX_INFLATED,
    TAG_HEADER,
    XERIAL,
    UnsupportedCompression,
    UnsupportedFormat,
    read_batches,
)
from broker.kafka.writer import frames_batch, kafka_batch
from lib.errors import BatchTooLarge, CorruptRecord, InvalidArgument, RecordTooLarge
from lib.records import Record, encode_batch, parse_batch
from lib.records.columns import FrameColumns, checked_columns


def built(codec: int = 0, count: int = 3, **producer) -> bytes:
    state = dict(producer_id=-1, producer_epoch=-1, base_sequence=-1) | producer
    builder = DefaultRecordBatchBuilder(2, codec, False, state["producer_id"],
                                        state["producer_epoch"], state["base_sequence"], 1 << 24)
    for i in range(count):
        builder.append(i, 1000 + i, b"k%d" % i if i % 2 else None, b"value-%d" % i * 20,
                       [("h", b"x"), (TAG_HEADER, b"red")] if i == 1 else [])
    return bytes(builder.build())


@pytest.mark.parametrize("codec", [0, 1])  # none, gzip
def test_kafka_python_batches_read_as_tubeq_records(codec):
    [batch] = read_batches(built(codec, producer_id=7, producer_epoch=2, base_sequence=40),
                           1000)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (7, 2, 40)
    assert [(r.key, r.value, r.timestamp) for r in batch.all_records()] == [
        (b"k%d" % i if i % 2 else None, b"value-%d" % i * 20, 1000 + i) for i in range(3)]
    records = batch.all_records()
    assert records[1].tag == "red" and records[1].headers == {"h": b"x"}
    assert records[0].tag is None and records[0].headers == {}


def test_tubeq_records_write_as_a_batch_kafka_python_reads():
    records = [Record(b"v%d" % i, key=b"k" if i else None, tag="blue" if i == 2 else None,
                      headers={"a": b"b"} if i == 1 else {}, timestamp=5000 - i, offset=o)
               for i, o in enumerate((10, 11, 14))]  # a gap: records left out of a read
    batch = DefaultRecordBatch(bytearray(kafka_batch(records)))
    assert batch.validate_crc()
    got = list(batch)
    assert [r.offset for r in got] == [10, 11, 14]
    assert [(r.key, r.value, r.timestamp) for r in got] == [
        (None, b"v0", 5000), (b"k", b"v1", 4999), (b"k", b"v2", 4998)]
    assert got[1].headers == [("a", b"b")] and got[2].headers == [(TAG_HEADER, b"blue")]
    assert batch.max_timestamp == 5000


def test_damaged_batches_are_refused_naming_the_problem():
    good = built()
    flipped = bytearray(good)
    flipped[-3] ^= 0xFF
    with pytest.raises(CorruptRecord, match="CRC-32C"):
        read_batches(bytes(flipped), 1000)
    with pytest.raises(CorruptRecord, match="does not fit"):
        read_batches(good[:-5], 1000)
    legacy = bytearray(good)
    legacy[16] = 1
    with pytest.raises(UnsupportedFormat, match="magic 1"):
        read_batches(bytes(legacy), 1000)
    with pytest.raises(CorruptRecord, match="outside 1..2"):
        read_batches(good, 2)
    with pytest.raises(CorruptRecord, match="no record batch"):
        read_batches(b"", 1000)
    with pytest.raises(UnsupportedCompression, match="codec 5"):
        read_batches(_recompressed(good, 5, b"whatever"), 1000)
    with pytest.raises(CorruptRecord, match="lz4 record batch does not inflate"):
        read_batches(_recompressed(good, 3, b"not an lz4 frame"), 1000)


def _snappy(data: bytes) -> bytes:
    """Kafka's snappy: the xerial framing of the Java client and librdkafka."""
    block = bytes(cramjam.snappy.compress_raw(data))
    return XERIAL + b"\x00\x00\x00\x01\x00\x00\x00\x01" + struct.pack(">i", len(block)) + block


CODECS = {1: gzip.compress, 2: _snappy, 3: lz4.frame.compress,
          4: lambda data: zstandard.ZstdCompressor().compress(data)}


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_every_kafka_codec_is_read_and_a_bomb_refused_within_the_limit(codec):
    plain = plain_built()
    body = plain[61:]
    [batch] = read_batches(_recompressed(plain, codec, CODECS[codec](body)), 1000)
    assert batch.all_records() == read_batches(plain, 1000)[0].all_records()
    bomb = CODECS[codec](b"\x00" * (MAX_INFLATED + 1024))
    with pytest.raises(CorruptRecord, match="inflates past"):
        read_batches(_recompressed(built(), codec, bomb), 1000)


def test_a_control_batch_may_not_be_produced():
    control = bytearray(built())
    struct.pack_into(">h", control, 21, 0x20)
    with pytest.raises(InvalidArgument, match="control batch"):
        read_batches(_resealed(control), 1000)


def _recompressed(batch: bytes, codec: int, body: bytes) -> bytes:
    """``batch``'s header with another codec and body, length and CRC made again."""
    out = bytearray(batch[:61]) + body
    struct.pack_into(">i", out, 8, len(out) - 12)
    attributes = struct.unpack_from(">h", out, 21)[0]
    struct.pack_into(">h", out, 21, (attributes & ~7) | codec)
    return _resealed(out)


def _resealed(batch: bytearray) -> bytes:
    from crc32c import crc32c

    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


def plain_built(codec: int = 0, keys: str = "all", count: int = 50) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, False, 3, 1, 10, 1 << 24)
    for i in range(count):
        key = {"all": b"key-%d" % i, "none": None, "mixed": b"k" if i % 2 else None}[keys]
        builder.append(i, 1_700_000_000_000 + i * 3, key, b"v" * (i * 37 % 300), [])
    return bytes(builder.build())


@pytest.mark.parametrize(("codec", "keys"), [(0, "all"), (0, "none"), (1, "all")])
def test_batches_without_headers_are_read_as_columns_into_the_same_tubeq_batch(codec, keys):
    [batch] = read_batches(plain_built(codec, keys), 1000)
    assert batch.plain is not None  # the column read, no record-by-record loop
    records = batch.all_records()
    assert [(r.key, r.value, r.timestamp) for r in records] == [
        (b"key-%d" % i if keys == "all" else None, b"v" * (i * 37 % 300),
         1_700_000_000_000 + i * 3) for i in range(50)]
    ids = dict(producer_id=3, producer_epoch=1, base_sequence=10)
    assert batch.tubeq() == encode_batch(records, **ids)  # byte for byte the slow path's
    view = parse_batch(batch.tubeq())
    assert (view.count, view.producer_id, view.base_sequence) == (50, 3, 10)


def test_mixed_keys_take_the_record_by_record_read():
    [batch] = read_batches(plain_built(keys="mixed"), 1000)
    assert batch.plain is None
    assert [r.key for r in batch.records[:3]] == [None, b"k", None]


def test_a_record_length_that_lies_is_refused_on_the_column_read():
    good = bytearray(plain_built(count=3))
    good[61] += 2  # the first record's length varint (zigzag: +1)
    with pytest.raises(CorruptRecord):
        read_batches(_resealed(good), 1000)


def test_the_view_built_from_columns_is_what_parsing_the_tubeq_batch_finds():
    [batch] = read_batches(plain_built(keys="all"), 1000)
    made, parsed = batch.view(1 << 20, 4 << 20), parse_batch(batch.tubeq())
    for field in ("count", "producer_id", "producer_epoch", "base_sequence", "transactional"):
        assert getattr(made, field) == getattr(parsed, field), field
    for column in ("sizes", "tag_hashes", "timestamps"):
        assert getattr(made, column).tolist() == getattr(parsed, column).tolist(), column
    assert bytes(made.frames) == bytes(parsed.frames)
    with pytest.raises(RecordTooLarge, match="limit 100"):
        batch.view(100, 4 << 20)
    with pytest.raises(BatchTooLarge, match="limit 1000"):
        batch.view(1 << 20, 1000)
    [headered] = read_batches(built(), 1000)  # its second record has headers
    assert headered.view(1 << 20, 4 << 20) is None  # parsed from its tubeq batch instead


def _columns(records: list[Record], offsets: list[int]) -> FrameColumns:
    view = parse_batch(encode_batch(records))
    return checked_columns("t", 0, view.frames, np.array(offsets, np.int64))


@pytest.mark.parametrize("keys", ["all", "none", "mixed"])
def test_frames_are_written_per_column_as_the_record_by_record_writer_writes_them(keys):
    records = [Record(b"value-%d" % i * (i % 7 + 1),
                      key={"all": b"k%d" % i, "none": None, "mixed": b"k" if i % 3 else None}[keys],
                      timestamp=1_700_000_000_000 + (i * 977) % 5000) for i in range(300)]
    offsets = [10 + i + (i > 100) * 5 for i in range(300)]  # a gap: records left out
    out = frames_batch(_columns(records, offsets))
    expected = [r._replace(offset=o) for r, o in zip(records, offsets, strict=True)]
    assert out == kafka_batch(expected)  # byte for byte
    batch = DefaultRecordBatch(bytearray(out))
    assert batch.validate_crc()
    assert [(r.offset, r.key, r.value, r.timestamp) for r in batch] == [
        (r.offset, r.key, r.value, r.timestamp) for r in expected]


def test_frames_with_tags_or_headers_are_written_record_by_record():
    records = [Record(b"a", tag="red", timestamp=5), Record(b"b", headers={"h": b"1"},
                                                            timestamp=6)]
    batch = DefaultRecordBatch(bytearray(frames_batch(_columns(records, [0, 1]))))
    assert [r.headers for r in batch] == [[(TAG_HEADER, b"red")], [("h", b"1")]]


def test_a_request_whose_arrays_come_null_is_refused_by_name():
    from kafka.protocol.producer import ProduceRequest

    from broker.kafka import gateway, wire  # gateway: the served versions

    assert wire.SERVED[gateway.wire.API_VERSIONS_KEY]
    request = ProduceRequest[9](transactional_id=None, acks=1, timeout_ms=1, topic_data=None)
    request.with_header(correlation_id=1, client_id="x")
    with pytest.raises(wire.Malformed, match="TopicData is null"):
        wire.decode_request(bytes(request.encode(header=True)), 0, 9)  # found by the fuzz
