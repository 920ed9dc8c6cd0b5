"""lib.records.columns: fetched frames checked once and read as columns, never decoded."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from lib.errors import CorruptRecord
from lib.records import FLAG_VALUE_ZLIB, Record, decode_span, encode_frame
from lib.records.columns import checked_columns, checked_run, walk_sizes

PLAIN = [Record(b"v0"), Record(b"", key=b""), Record(b"v2" * 300, key=b"k2", tag="red"),
         Record(b"v3", tag="t\u00e9"), Record(b"v4" * 9, key=b"key-4")]


def run(records: list[Record]) -> tuple[memoryview, np.ndarray]:
    frames = b"".join(encode_frame(r) for r in records)
    return memoryview(frames), np.arange(100, 100 + len(records), dtype=np.int64)


def slices(cols, starts, ends) -> list[bytes]:
    return [bytes(cols.frames[a:b]) for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]


def test_spans_give_exactly_what_decoding_gives():
    cols = checked_columns("t", 3, *run(PLAIN))
    records = cols.records()
    assert cols.plain and len(cols) == len(PLAIN)
    assert slices(cols, *cols.value_spans()) == [r.value for r in records]
    start, end, present = cols.key_spans()
    keys = [k if p else None for k, p in zip(slices(cols, start, end), present, strict=True)]
    assert keys == [r.key for r in records]
    assert [t.decode() or None for t in slices(cols, *cols.tag_spans())] == \
        [r.tag for r in records]
    assert [r.offset for r in records] == cols.offsets.tolist() == list(range(100, 105))
    assert (cols.head["ts"] == [r.timestamp for r in records]).all()


def test_headers_or_compressed_values_are_not_plain_and_decode_per_record():
    packed = zlib.compress(b"z" * 500)
    cols = checked_columns("t", 0, *run([Record(b"a", headers={"h": b"1"}),
                                         Record(packed, flags=FLAG_VALUE_ZLIB)]))
    assert not cols.plain
    assert [(r.value, r.headers) for r in cols.records()] == [(b"a", {"h": b"1"}),
                                                              (b"z" * 500, {})]


def test_column_records_equal_the_record_decoder_on_every_kind_of_frame():
    """FrameColumns.records() (built over whole arrays) and decode_span (frame by frame, the
    poll path) must agree field for field, whatever mix of frames a run holds."""
    mixed = [*PLAIN, Record(b"h", key=b"k", tag="x", headers={"a": b"1", "b": b""}),
             Record(zlib.compress(b"q" * 200), tag="z", flags=FLAG_VALUE_ZLIB),
             Record(b"last")]
    frames, offsets = run(mixed)
    by_columns = checked_columns("topic", 7, frames, offsets).records()
    by_frames, end = decode_span(bytes(frames), offsets.tolist(), 0, 7, "topic")
    assert end == len(frames)
    assert by_columns == by_frames
    assert [(r.value, r.key, r.tag, dict(r.headers)) for r in by_columns] == \
        [(zlib.decompress(r.value) if r.flags else r.value, r.key, r.tag, dict(r.headers))
         for r in mixed]
    assert {(r.topic, r.partition) for r in by_columns} == {("topic", 7)}


def test_a_decoded_record_is_immutable_and_its_empty_headers_are_read_only():
    frames, offsets = run([Record(b"v")])
    rec = decode_span(bytes(frames), offsets.tolist(), 0, 0, "t")[0][0]
    with pytest.raises(AttributeError):
        rec.offset = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        rec.headers["h"] = b"x"  # type: ignore[index]
    assert rec._replace(offset=5).offset == 5 and rec.offset == 100


def test_first_keeps_a_prefix_and_what_is_known_of_it():
    cols = checked_columns("t", 0, *run(PLAIN))
    head = cols.first(2)
    assert len(head) == 2 and head.offsets.tolist() == [100, 101]
    assert [r.value for r in head.records()] == [b"v0", b""]
    assert cols.first(10) is cols


@pytest.mark.parametrize("damage", ["crc", "count", "length", "truncated"])
def test_a_bad_run_is_refused(damage):
    frames, offsets = run(PLAIN)
    raw = bytearray(frames)
    if damage == "crc":
        raw[-1] ^= 0xFF
    elif damage == "count":
        offsets = offsets[:-1]
    elif damage == "length":
        raw[0:4] = (7).to_bytes(4, "little")
    else:
        raw = raw[:-3]
    with pytest.raises(CorruptRecord):
        checked_columns("t", 0, memoryview(bytes(raw)), offsets)


def test_walk_sizes_stops_at_count_and_refuses_impossible_lengths():
    frames, _ = run(PLAIN)
    sizes = [len(encode_frame(r)) for r in PLAIN]
    assert walk_sizes(frames) == sizes and walk_sizes(frames, 2) == sizes[:2]
    with pytest.raises(CorruptRecord, match="impossible length"):
        walk_sizes(memoryview(b"\xff\xff\xff\xff" + bytes(40)))


# 5 and 25 frames: the frame-by-frame and the whole-array checks
@pytest.mark.parametrize("copies", [1, 5])
def test_the_brokers_sizes_split_a_run_as_walking_it_does(copies):
    frames, offsets = run(PLAIN * copies)
    data = b"before" + bytes(frames) + b"next partition"
    sizes = np.array(walk_sizes(frames), np.uint32)
    by_sizes, stop = checked_run(data, offsets.tolist(), 6, 0, "t", sizes)
    walked, walked_stop = checked_run(data, offsets.tolist(), 6, 0, "t")
    assert stop == walked_stop == 6 + len(frames)
    assert by_sizes.records() == walked.records()
    assert (by_sizes.head == walked.head).all()


@pytest.mark.parametrize("copies", [1, 5])
@pytest.mark.parametrize("wrong", ["below a header", "past the end", "shifted", "count"])
def test_wrong_sizes_from_a_broker_are_refused_as_corruption(copies, wrong):
    frames, offsets = run(PLAIN * copies)
    sizes = np.array(walk_sizes(frames), np.uint32)
    if wrong == "below a header":
        sizes[0] = 10
    elif wrong == "past the end":
        sizes[-1] += 1
    elif wrong == "shifted":  # same total: the length fields disagree
        sizes[0] += 1
        sizes[1] -= 1
    else:
        sizes = sizes[:-1]
    with pytest.raises(CorruptRecord):
        checked_run(bytes(frames), offsets.tolist(), 0, 0, "t", sizes)
