"""Kafka record batches (magic 2) read and written by broker/kafka/batches.py, held to
kafka-python's own implementation of the format (a codec nobody here wrote)."""
from __future__ import annotations

import gzip
import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from broker.kafka.batches import (
    MAX_INFLATED,
    TAG_HEADER,
    UnsupportedCompression,
    UnsupportedFormat,
    kafka_batch,
    read_batches,
)
from lib.errors import CorruptRecord, InvalidArgument
from lib.records import Record


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
    assert [(r.key, r.value, r.timestamp) for r in batch.records] == [
        (b"k%d" % i if i % 2 else None, b"value-%d" % i * 20, 1000 + i) for i in range(3)]
    assert batch.records[1].tag == "red" and batch.records[1].headers == {"h": b"x"}
    assert batch.records[0].tag is None and batch.records[0].headers == {}


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
    with pytest.raises(UnsupportedCompression, match="lz4"):
        read_batches(_recompressed(good, 3, b"whatever"), 1000)


def test_a_gzip_bomb_is_refused_within_the_inflate_limit():
    bomb = gzip.compress(b"\x00" * (MAX_INFLATED + 1024))
    with pytest.raises(CorruptRecord, match="inflates past"):
        read_batches(_recompressed(built(), 1, bomb), 1000)


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
