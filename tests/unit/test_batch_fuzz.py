"""What the broker acknowledges, recovery keeps and consumers read: frame checks at append.

Batches here have a *valid batch CRC* over frames that may be broken (what a buggy or hostile
producer can send): ``parse_batch`` must refuse each broken frame by name, and whatever it
accepts must parse again in recovery's chunk scanner and decode in the consumer's decoder.
Structure-aware fuzzing (hypothesis) mutates real frames, then rebuilds the batch around them.
"""
from __future__ import annotations

import struct
import tempfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lib.errors import CorruptRecord, RecordTooLarge
from lib.records import (
    FRAME_HEAD,
    MAX_HEADERS,
    Record,
    batch_head,
    decode_frames,
    decode_span,
    encode_frame,
    parse_batch,
    tag_hash,
)
from lib.records.check import few_columns, many_columns
from storage.datalog import CHUNK, chunk_header, parse_chunk
from storage.store import Store
from tests.helpers import read_all

BIG = dict(max_message_bytes=1 << 20, max_batch_bytes=64 << 20)


def rebuild(frames: list[bytes], tags: list[int] | None = None,
            times: list[int] | None = None) -> bytes:
    """A batch around ``frames`` with a valid batch CRC and columns taken from the frames."""
    sizes = [len(f) for f in frames]
    if tags is None:
        tags = [_tag_of(f) for f in frames]
    if times is None:
        times = [struct.unpack_from("<q", f, 10)[0] if len(f) >= 18 else 0 for f in frames]
    body = b"".join(frames)
    return batch_head(body, sizes, tags, times) + body


def _tag_of(frame: bytes) -> int:
    if len(frame) < 20:
        return 0
    tag_len = struct.unpack_from("<H", frame, 18)[0]
    return tag_hash(frame[30:30 + tag_len]) if tag_len else 0


def with_crc(frame: bytearray) -> bytes:
    """The frame with its own CRC recomputed (a structural lie the frame CRC cannot catch)."""
    struct.pack_into("<I", frame, 4, zlib.crc32(frame[8:]))
    return bytes(frame)


GOOD = [Record(b"value-%d" % i, key=b"k" if i % 2 else None, tag=f"t{i % 3}",
               headers={"h": b"%d" % i} if i % 3 == 0 else {}, timestamp=1000 + i)
        for i in range(6)]


def good_frames() -> list[bytes]:
    return [encode_frame(r) for r in GOOD]


def test_a_valid_batch_passes_every_frame_check():
    view = parse_batch(rebuild(good_frames()))
    assert view.count == len(GOOD)


@pytest.mark.parametrize("damage, problem", [
    (lambda f: f.__setitem__(40, f[40] ^ 1), "CRC"),  # value byte flipped, frame CRC kept
    (lambda f: struct.pack_into("<i", f, 20, 10_000), "run past|add up"),  # key_len too long
    (lambda f: struct.pack_into("<i", f, 20, -7), "negative"),
    (lambda f: struct.pack_into("<H", f, 18, 5_000), "run past|add up"),  # tag_len too long
    (lambda f: struct.pack_into("<I", f, 26, 3), "add up"),  # value_len too short
    (lambda f: struct.pack_into("<H", f, 24, 9), "headers|add up"),  # header count too high
    (lambda f: f.__setitem__(8, 0x40), "unknown flags"),
    (lambda f: f.__setitem__(8, 0x80), "control record"),
    (lambda f: f.__setitem__(8, 0x01), "compressed value does not inflate"),  # zlib flag
])
@pytest.mark.parametrize("copies", [1, 3], ids=["frame-by-frame", "whole-array"])
def test_a_broken_frame_with_a_valid_batch_crc_is_refused_by_name(damage, problem, copies):
    frames = good_frames() * copies  # 6 frames are checked one by one, 18 over whole arrays
    bad = bytearray(frames[3])
    damage(bad)
    frames[3] = bytes(bad) if problem == "CRC" else with_crc(bad)
    with pytest.raises(CorruptRecord, match=problem) as info:
        parse_batch(rebuild(frames))
    assert "frame 3 of the batch" in str(info.value)


@pytest.mark.parametrize("copies", [1, 3], ids=["frame-by-frame", "whole-array"])
def test_columns_that_disagree_with_the_frames_are_refused(copies):
    frames = good_frames() * copies
    tags = [_tag_of(f) for f in frames]
    tags[2] ^= 1
    with pytest.raises(CorruptRecord, match="tag-hash column"):
        parse_batch(rebuild(frames, tags=tags))
    times = [r.timestamp for r in GOOD] * copies
    times[4] += 1
    with pytest.raises(CorruptRecord, match="timestamp column"):
        parse_batch(rebuild(frames, times=times))


def test_too_many_headers_are_refused_at_both_ends():
    many = {f"h{i}": b"" for i in range(MAX_HEADERS + 1)}
    with pytest.raises(RecordTooLarge, match=f"limit {MAX_HEADERS}"):
        encode_frame(Record(b"v", headers=many))
    ok = encode_frame(Record(b"v", headers={f"h{i}": b"" for i in range(MAX_HEADERS)}))
    parse_batch(rebuild([ok]))


def test_a_consumer_names_the_partition_and_offset_of_a_frame_it_cannot_decode():
    frames = good_frames()
    bad = bytearray(frames[1])
    bad[-1] ^= 1
    run = frames[0] + bytes(bad) + frames[2]
    with pytest.raises(CorruptRecord, match=r"orders\[4\] offset 11 .*seek") as info:
        decode_span(run, [10, 11, 12], 0, 4, "orders")
    assert (info.value.partition, info.value.offset) == (4, 11)


# ------------------------------------------------------------------------------- fuzzing


@st.composite
def mutated_frames(draw) -> list[bytes]:
    """Real frames with a few bytes overwritten; the frame CRC recomputed or not."""
    records = draw(st.lists(st.builds(
        Record,
        value=st.binary(max_size=40),
        key=st.none() | st.binary(max_size=8),
        tag=st.none() | st.text("abc", min_size=1, max_size=4),
        headers=st.dictionaries(st.text("xy", min_size=1, max_size=3), st.binary(max_size=5),
                                max_size=3),
        timestamp=st.integers(-2**40, 2**40), offset=st.just(-1), partition=st.just(-1),
        flags=st.just(0), topic=st.just("")), min_size=1, max_size=6))
    frames = [bytearray(encode_frame(r)) for r in records]
    for _ in range(draw(st.integers(0, 4))):
        i = draw(st.integers(0, len(frames) - 1))
        at = draw(st.integers(0, len(frames[i]) - 1))
        frames[i][at] = draw(st.integers(0, 255))
        if draw(st.booleans()):
            frames[i] = bytearray(with_crc(frames[i]))
    for f in frames:  # keep the length field truthful so the size column check is not all
        if draw(st.booleans()) and len(f) >= 8:
            FRAME_HEAD.pack_into(f, 0, len(f), zlib.crc32(f[8:]))
    return [bytes(f) for f in frames]


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_frames())
def test_whatever_append_accepts_recovery_keeps_and_decode_reads(frames):
    try:
        view = parse_batch(rebuild(frames), **BIG)
    except CorruptRecord:
        return
    body = bytes(view.frames)
    decoded = decode_frames(body)  # the general decoder
    assert len(decoded) == view.count
    fast, end = decode_span(body, list(range(view.count)), 0, 0, "t")  # the consumer's
    assert end == len(body) and [r.value for r in fast] == [r.value for r in decoded]
    chunk = chunk_header(0, view.count, 0, len(body)) + body
    scanned, why = parse_chunk(memoryview(chunk), 0, 0)  # recovery's
    assert scanned is not None, why
    assert list(scanned.entries["size"]) == list(view.sizes)
    assert list(scanned.entries["tag"]) == list(view.tag_hashes)
    assert list(scanned.entries["ts"]) == list(view.timestamps)
    starts = np.concatenate(([0], np.cumsum(view.sizes)[:-1])) + CHUNK.size
    assert list(scanned.entries["pos"]) == list(starts)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_frames())
def test_the_frame_by_frame_check_agrees_with_the_whole_array_check(frames):
    """Small batches are checked frame by frame, large ones over whole arrays: the same
    frames must get the same verdict and the same columns from both."""
    body = memoryview(b"".join(frames))
    verdicts = []
    for check, sizes in ((few_columns, [len(f) for f in frames]),
                         (many_columns, np.array([len(f) for f in frames], np.uint32))):
        try:
            tags, times = check(body, sizes)
            verdicts.append((list(tags), list(times)))
        except CorruptRecord:
            verdicts.append("refused")
    assert verdicts[0] == verdicts[1]


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(mutated_frames(), min_size=1, max_size=5))
def test_a_store_reopened_without_its_checkpoint_keeps_every_accepted_batch(tmp_path, batches):
    root = Path(tempfile.mkdtemp(dir=tmp_path))  # tmp_path is shared by every example
    accepted: list[bytes] = []
    with Store(root, "fuzz", 0, [0]) as s:
        for frames in batches:
            try:
                s.append(0, rebuild(frames))
            except CorruptRecord:
                continue
            accepted += frames
    (root / "fuzz" / "0" / "checkpoint.json").unlink()  # recovery scans the whole data log
    with Store(root, "fuzz", 0, [0]) as s:
        assert s.latest(0) == len(accepted)
        got = read_all(s, 0)
    assert [r.value for r in got] == [decode_frames(f)[0].value for f in accepted]
