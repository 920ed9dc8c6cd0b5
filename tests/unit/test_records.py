"""The record batch codec: round trips, limits and corruption detection, with bytes only."""
from __future__ import annotations

import itertools
import struct
import zlib

import numpy as np
import pytest

from lib.errors import BatchTooLarge, CorruptRecord, RecordTooLarge
from lib.records import (
    FLAG_VALUE_ZLIB,
    FRAME_HEADER_SIZE,
    HEADER_SIZE,
    Record,
    batch_crc,
    decode_frame,
    decode_frames,
    encode_batch,
    encode_frame,
    parse_batch,
    tag_hash,
)


def sample_records() -> list[Record]:
    return [
        Record(b"hello", key=b"k1", tag="orders", headers={"h": b"1", "trace": b""}, timestamp=17),
        Record(b"", key=None, tag=None, timestamp=18),
        Record(b"x" * 5000, key=b"", tag="t", timestamp=-1),
        Record("näive".encode(), tag="ünïcode", headers={"é": b"\x00\xff"}, timestamp=2**40),
    ]


def test_batch_round_trip_keeps_every_field():
    records = sample_records()
    view = parse_batch(encode_batch(records, producer_id=7, producer_epoch=2, base_sequence=9))
    assert (view.count, view.producer_id, view.producer_epoch, view.base_sequence) == (4, 7, 2, 9)
    decoded = decode_frames(view.frames, offsets=[10, 11, 12, 13], partition=3)
    for before, after in zip(records, decoded, strict=True):
        assert (after.value, after.key, after.tag, after.headers, after.timestamp) == (
            before.value, before.key, before.tag, before.headers, before.timestamp)
    assert [r.offset for r in decoded] == [10, 11, 12, 13]
    assert {r.partition for r in decoded} == {3}


def test_columns_match_the_frames():
    records = sample_records()
    view = parse_batch(encode_batch(records))
    assert list(view.sizes) == [len(encode_frame(r)) for r in records]
    assert list(view.tag_hashes) == [tag_hash(r.tag) for r in records]
    assert list(view.timestamps) == [r.timestamp for r in records]
    assert view.timestamps.dtype == np.dtype("<i8")


def test_tag_hash_is_stable_and_zero_only_without_tag():
    assert tag_hash(None) == tag_hash("") == 0
    assert tag_hash("orders") == tag_hash(b"orders") == zlib.crc32(b"orders")
    assert tag_hash("orders") == tag_hash("orders")  # not Python's salted hash()
    assert tag_hash("a") != tag_hash("b")


def test_zlib_flag_decompresses_the_value():
    rec = Record(zlib.compress(b"abc" * 100), flags=FLAG_VALUE_ZLIB)
    assert decode_frame(encode_frame(rec)).value == b"abc" * 100


def test_every_corrupt_byte_position_is_detected():
    batch = encode_batch(sample_records()[:2])
    for i in range(len(batch)):
        corrupted = bytearray(batch)
        corrupted[i] ^= 0x5A
        with pytest.raises(CorruptRecord):
            parse_batch(bytes(corrupted))


def test_every_corrupt_byte_of_a_frame_is_detected():
    frame = encode_frame(sample_records()[0])
    for i in range(len(frame)):
        corrupted = bytearray(frame)
        corrupted[i] ^= 0x01
        with pytest.raises(CorruptRecord):
            decode_frame(bytes(corrupted))


@pytest.mark.parametrize("cut", [0, 1, HEADER_SIZE - 1, HEADER_SIZE, HEADER_SIZE + 5, -1])
def test_truncated_batch_is_rejected(cut):
    batch = encode_batch(sample_records())
    with pytest.raises(CorruptRecord):
        parse_batch(batch[:cut])


def test_oversized_message_names_the_limit():
    batch = encode_batch([Record(b"x" * 2000)])
    with pytest.raises(RecordTooLarge) as err:
        parse_batch(batch, max_message_bytes=1000)
    assert err.value.limit == 1000 and "1000" in str(err.value)


def test_oversized_batch_names_the_limit():
    batch = encode_batch([Record(b"x" * 100) for _ in range(100)])
    with pytest.raises(BatchTooLarge) as err:
        parse_batch(batch, max_batch_bytes=4096)
    assert err.value.limit == 4096


def test_empty_batch_cannot_be_encoded():
    with pytest.raises(CorruptRecord):
        encode_batch([])


def test_batch_with_lying_size_column_is_rejected_even_with_valid_crc():
    batch = bytearray(encode_batch([sample_records()[0], sample_records()[2]]))
    sizes_at = HEADER_SIZE
    s0, s1 = struct.unpack_from("<II", batch, sizes_at)
    struct.pack_into("<II", batch, sizes_at, s0 + 1, s1 - 1)  # still adds up
    struct.pack_into("<I", batch, 12, batch_crc(memoryview(batch)))
    with pytest.raises(CorruptRecord, match="length field"):
        parse_batch(bytes(batch))


def as_version_1(batch: bytes) -> bytes:
    """The same batch as an older producer built it: version 1, its crc over the frames too."""
    old = bytearray(batch)
    old[4] = 1
    struct.pack_into("<I", old, 12, zlib.crc32(old[16:], zlib.crc32(old[:12])))
    return bytes(old)


def test_a_version_1_batch_from_an_older_producer_is_still_read():
    records = sample_records()
    view = parse_batch(as_version_1(encode_batch(records)))
    assert [r.value for r in decode_frames(view.frames, range(4), 0)] == \
        [r.value for r in records]


def test_a_version_1_batch_with_a_damaged_frame_fails_its_batch_crc():
    batch = bytearray(as_version_1(encode_batch(sample_records())))
    batch[-1] ^= 1
    with pytest.raises(CorruptRecord, match="batch CRC"):
        parse_batch(bytes(batch))


def test_the_batch_crc_covers_the_columns_and_each_frame_crc_its_frame():
    batch = encode_batch(sample_records())
    column = bytearray(batch)
    column[HEADER_SIZE + 4 * 4 + 1] ^= 1  # a tag-hash column byte
    with pytest.raises(CorruptRecord, match="batch CRC"):
        parse_batch(bytes(column))
    frame = bytearray(batch)
    frame[-1] ^= 1  # the last value byte: not under the batch crc, under its frame's
    with pytest.raises(CorruptRecord, match="frame 3 of the batch.*CRC|CRC.*frame 3"):
        parse_batch(bytes(frame))


@pytest.mark.parametrize("sizes", ["one size", "two sizes"])
@pytest.mark.parametrize("damaged", [0, 17, 39])
def test_a_damaged_frame_among_many_is_named_whether_or_not_the_frames_share_a_size(
        sizes, damaged):
    """Frames of one size are checked over the rows of one strided view, others one slice at a
    time: either way each frame's own bytes, from its first to its last (a row that started
    or ended a byte off would pass the damaged byte by)."""
    from lib.records.layout import STRIDED_FROM
    count = 40
    assert count >= STRIDED_FROM
    values = [b"v" * (64 if sizes == "one size" or i % 3 else 65) for i in range(count)]
    batch = encode_batch([Record(v, timestamp=5) for v in values])
    assert parse_batch(batch).count == count
    frames_at = len(batch) - sum(len(encode_frame(Record(v, timestamp=5))) for v in values)
    first = frames_at + sum(len(encode_frame(Record(v, timestamp=5))) for v in values[:damaged])
    size = len(encode_frame(Record(values[damaged], timestamp=5)))
    for at in (first + 8, first + size - 1):  # the first and the last byte under its CRC
        bad = bytearray(batch)
        bad[at] ^= 1
        with pytest.raises(CorruptRecord, match=f"frame {damaged} of the batch.*CRC"):
            parse_batch(bytes(bad))


def test_a_batch_of_an_unknown_version_names_the_versions_read():
    batch = bytearray(encode_batch([Record(b"v")]))
    batch[4] = 9
    with pytest.raises(CorruptRecord, match="version 9, this build reads 1, 2"):
        parse_batch(bytes(batch))


def test_frame_shorter_than_header_is_rejected():
    with pytest.raises(CorruptRecord):
        decode_frame(b"\x00" * (FRAME_HEADER_SIZE - 1))


def test_offsets_must_match_frame_count():
    view = parse_batch(encode_batch(sample_records()))
    with pytest.raises(CorruptRecord):
        decode_frames(view.frames, offsets=[1, 2])


def test_columns_encoder_builds_exactly_what_the_per_record_encoder_builds():
    from lib.records import encode_columns
    varied = ([b"v" * (i % 50) for i in range(300)],
              [b"k%d" % i if i % 7 else b"" for i in range(300)],  # empty key != no key
              [f"t{i % 4}" if i % 2 else "" for i in range(300)])
    fixed = ([b"%05d" % i for i in range(300)], [b"k%03d" % i for i in range(300)],
             [f"t{i % 4}" for i in range(300)])  # every column one width: laid out as rows
    for (values, keys, tags), k, t in itertools.product(
            (varied, fixed), (False, True), (False, True)):
        k, t = keys if k else None, tags if t else None
        run = encode_columns(values, 77, k, t)
        records = [Record(v, key=k[i] if k else None, tag=(t[i] or None) if t else None,
                          timestamp=77) for i, v in enumerate(values)]
        assert run.frames == b"".join(encode_frame(r) for r in records)
        assert list(run.sizes) == [len(encode_frame(r)) for r in records]
        if t is not None:
            assert list(run.tag_hashes) == [tag_hash(r.tag) for r in records]


@pytest.mark.parametrize("stamps", ["one", "runs", "scattered"])
@pytest.mark.parametrize("sizes", ["fixed", "varied"])
def test_columns_encoder_with_a_timestamp_per_record_matches_the_per_record_encoder(
        stamps, sizes):
    """Equal frame tails share one CRC start: found as runs of equal neighbours (a producer's
    batch: one size, a few milliseconds), or as distinct pairs when runs are many."""
    import numpy as np

    from lib.records import encode_columns
    rng = np.random.default_rng(7)
    n = 400
    values = [b"v" * (20 if sizes == "fixed" else int(rng.integers(0, 60))) for _ in range(n)]
    ts = {"one": np.full(n, 5, np.int64),
          "runs": np.repeat(np.arange(4, dtype=np.int64) + 1_000, n // 4),
          "scattered": rng.integers(0, 3, n).astype(np.int64)}[stamps]
    run = encode_columns(values, ts)
    assert run.frames == b"".join(encode_frame(Record(v, timestamp=int(t)))
                                  for v, t in zip(values, ts, strict=True))


def test_the_frame_crc_is_zlibs_crc32_and_comes_from_isal():
    """Frames are checked with ISA-L's CRC-32 (pyproject.toml: 3-5x faster): it must be zlib's
    value for value, chained or not, on any buffer, and the dependency must be the one in use."""
    import zlib

    from lib.records.layout import crc32
    data = bytes(range(256)) * 40
    for cut in (0, 1, 7, 100, 1024, len(data)):
        view = memoryview(data)[cut // 2:cut]
        assert crc32(view) == zlib.crc32(view)
        assert crc32(view, 0xDEADBEEF) == zlib.crc32(view, 0xDEADBEEF)
    assert crc32.__module__.startswith("isal")


def test_column_pieces_hold_no_object_the_cyclic_gc_tracks():
    """A sealed batch keeps its pieces until sent: per-record memoryviews there (GC-tracked)
    set off gen-0 collections every 700 records and full ones as they aged (3 full collections
    per 300k records of 1 KiB); bytes slices are invisible to the collector."""
    import gc

    from lib.records.encode import ROWS_UP_TO, column_pieces
    for size in (ROWS_UP_TO + 1, 1024):  # records past the 2-D rows layout: a piece each
        values = [bytes([i % 256]) * size for i in range(50)]
        pieces, _sizes, _hashes = column_pieces(values, 5)
        assert len(pieces) == 100
        assert not [p for p in pieces if gc.is_tracked(p)]
        assert b"".join(pieces) == b"".join(encode_frame(Record(v, timestamp=5)) for v in values)
