"""lib/wire.py against protobuf: a Spliced answer parses as the protobuf message it stands
for, split() reads what protobuf reads (the blob as a view), and a follower refuses frames
its leader's CRC does not vouch for."""
from __future__ import annotations

import random

import numpy as np
import pytest
from google.protobuf.message import DecodeError

from broker.replica_answer import REPLICA_ENTRIES, REPLICA_FRAMES
from broker.replica_fetcher import append_copied, read_answer
from lib.errors import CorruptRecord
from lib.fetch_wire import fetch_answer, read_fetch
from lib.proto import broker_pb2 as pb
from lib.records import Record, encode_batch, frame_columns, parse_batch
from lib.records.layout import crc32
from lib.wire import Runs, Spliced, leading, split


def _data(topic: str, partition: int, frames: bytes) -> pb.ReplicaFetchData:
    d = pb.ReplicaFetchData(topic=topic, partition=partition, base_offset=7, log_end=99,
                            sizes=np.array([len(frames)], "<u4").tobytes() if frames else b"",
                            diverging_end_offset=-1)
    d.epochs.add(epoch=3, start_offset=7)
    d.producer_batches.add(producer_id=5, base_sequence=2, count=1, base_offset=7)
    if frames:
        d.frames_crc = crc32(frames)
    return d


CASES = [[], [("t", 0, b"")], [("t", 0, b"abc"), ("orders", 9, bytes(range(256)) * 300)],
         [("a", 1, b"x" * 70_000), ("b", 2, b""), ("c", 3, b"y")]]


@pytest.mark.parametrize("parts", CASES)
def test_a_spliced_answer_is_the_protobuf_message_with_its_frames(parts):
    entries = [(_data(t, p, b""), frames) for t, p, frames in parts]
    raw = Spliced(pb.ReplicaFetchResponse(), REPLICA_ENTRIES, REPLICA_FRAMES,
                  entries).SerializeToString()
    parsed = pb.ReplicaFetchResponse.FromString(raw)
    expected = pb.ReplicaFetchResponse()
    for (data, frames) in entries:
        whole = expected.partitions.add()
        whole.CopyFrom(data)
        whole.frames = bytes(frames)
    assert parsed == expected
    got = read_answer(raw, "leader")
    assert [(d, bytes(f)) for d, f in got] == [(d, bytes(f)) for d, f in entries]


@pytest.mark.parametrize("parts", CASES)
def test_frames_given_as_runs_of_pieces_serialize_as_the_joined_frames(parts):
    """A leader hands a read's pieces on uncut and unjoined (Runs): the bytes are the same as
    for the joined frames, and the pieces themselves are among the pieces written."""
    def runs(frames: bytes) -> Runs:
        view = memoryview(frames)
        return Runs([view[:len(frames) // 3], view[len(frames) // 3:]])

    joined = [(_data(t, p, b""), frames) for t, p, frames in parts]
    pieced = [(data, runs(frames)) for data, frames in joined]
    assert all(len(r) == len(f) and bytes(r) == f
               for (_, r), (_, f) in zip(pieced, joined, strict=True))
    as_runs = Spliced(pb.ReplicaFetchResponse(), REPLICA_ENTRIES, REPLICA_FRAMES, pieced)
    assert as_runs.SerializeToString() == Spliced(
        pb.ReplicaFetchResponse(), REPLICA_ENTRIES, REPLICA_FRAMES, joined).SerializeToString()
    written = as_runs.pieces()
    assert all(any(w is piece for w in written) for _, r in pieced for piece in r if piece)


def test_leading_takes_the_first_bytes_of_the_pieces_and_cuts_the_last_uncopied():
    pieces = [b"abc", memoryview(b"defg"), b"hi"]
    assert [bytes(p) for p in leading(pieces, 5)] == [b"abc", b"de"]
    assert leading(pieces, 7).pieces[1] is pieces[1]  # whole pieces pass as they are
    assert bytes(leading(pieces, 100)) == b"abcdefghi" and len(leading(pieces, 100)) == 9
    assert leading(pieces, 0).pieces == () and not leading(pieces, 0)


def test_split_reads_protobufs_own_bytes_and_hands_the_frames_out_as_views():
    message = pb.FetchResponse(throttle_ms=12)
    message.partitions.add(partition=1, frames=b"first", offsets=b"\x01" * 8, next_offset=2)
    message.partitions.add(partition=4, frames=b"second" * 100, sizes=b"\x02" * 4)
    raw = message.SerializeToString()
    head, entries = split(raw, 1, 2, pb.FetchResponse, pb.PartitionData)
    assert head == pb.FetchResponse(throttle_ms=12)
    assert [bytes(f) for _, f in entries] == [b"first", b"second" * 100]
    assert all(f.obj is raw for _, f in entries), "a view of the bytes received, no copy"
    for (data, frames), whole in zip(entries, message.partitions, strict=True):
        data.frames = bytes(frames)
        assert data == whole


def test_the_last_frames_field_wins_as_in_protobuf_and_unknown_fields_pass():
    entry = (b"\x4a\x03old" + b"\x10\x05"  # frames (field 9), partition 5
             + b"\x0a\x01t" + b"\xa8\x1f\x07"  # topic "t", unknown varint field 501
             + b"\x4a\x03new")
    raw = b"\x0a" + bytes([len(entry)]) + entry
    parsed = pb.ReplicaFetchResponse.FromString(raw).partitions[0]
    data, frames = read_answer(raw, "leader")[0]
    assert bytes(frames) == parsed.frames == b"new"
    assert (data.topic, data.partition) == (parsed.topic, parsed.partition) == ("t", 5)


def test_answers_protobuf_refuses_are_refused_with_a_named_error():
    rng = random.Random(5)
    entries = [(_data("orders", 3, b""), b"z" * 300)]
    good = Spliced(pb.ReplicaFetchResponse(), REPLICA_ENTRIES, REPLICA_FRAMES,
                   entries).SerializeToString()
    bad = [good[:n] for n in range(1, len(good))]
    for _ in range(500):
        damaged = bytearray(good)
        damaged[rng.randrange(len(good))] = rng.randrange(256)
        bad.append(bytes(damaged))
    refused, same, stricter = 0, 0, 0
    for raw in bad:
        try:
            whole = pb.ReplicaFetchResponse.FromString(raw)
        except DecodeError:
            with pytest.raises(CorruptRecord, match="does not parse"):
                read_answer(raw, "leader-9")
            refused += 1
            continue
        try:
            got = read_answer(raw, "leader-9")
        except CorruptRecord:  # groups (wire types 3, 4): protobuf keeps them as unknown
            stricter += 1
            continue
        for (data, frames), expected in zip(got, whole.partitions, strict=True):
            data.frames = bytes(frames)
            assert data == expected
        same += 1
    assert refused > 100 and same > 100 and stricter < 20


def _frames(n: int) -> tuple[bytes, np.ndarray]:
    batch = encode_batch([Record(b"v%d" % i * 40, tag="k" if i % 2 else None, timestamp=i)
                          for i in range(n)])
    view = parse_batch(batch)
    return bytes(view.frames), view.sizes


def test_a_run_the_leaders_crc_vouches_for_is_checked_for_structure_not_per_frame_crc():
    frames, sizes = _frames(40)
    rotten = bytearray(frames)
    rotten[-1] ^= 0xFF  # a value byte: only the frame's own CRC sees it
    with pytest.raises(CorruptRecord, match="CRC"):
        frame_columns(memoryview(bytes(rotten)), sizes)
    tags, stamps = frame_columns(memoryview(bytes(rotten)), sizes, contents=False)
    assert stamps.tolist() == list(range(40)) and (tags[1::2] > 0).all()
    broken = bytearray(frames)
    broken[0:4] = (999).to_bytes(4, "little")  # a length field: the structure says no
    for contents in (True, False):
        with pytest.raises(CorruptRecord, match="length"):
            frame_columns(memoryview(bytes(broken)), sizes, contents=contents)


def test_a_follower_refuses_frames_that_do_not_match_the_leaders_crc(tmp_path):
    from storage.config import StoreConfig
    from storage.store import Store

    frames, sizes = _frames(30)
    data = pb.ReplicaFetchData(topic="t", partition=0, base_offset=0,
                               sizes=sizes.astype("<u4").tobytes(), frames_crc=crc32(frames))
    data.epochs.add(epoch=1, start_offset=0)
    store = Store(tmp_path, "t", 0, [0], StoreConfig())
    try:
        damaged = bytearray(frames)
        damaged[100] ^= 1
        with pytest.raises(CorruptRecord, match="leader's CRC"):
            append_copied(store, 0, data, memoryview(bytes(damaged)))
        assert store.latest(0) == 0, "nothing of a damaged answer is stored"
        append_copied(store, 0, data, memoryview(frames))
        assert store.latest(0) == 30
        data.ClearField("frames_crc")  # a leader of before: every frame's CRC is checked
        with pytest.raises(CorruptRecord, match="CRC"):
            append_copied(store, 0, data, memoryview(bytes(damaged)))
    finally:
        store.close()


def test_a_fetch_answer_is_the_protobuf_fetch_response_and_reads_back_as_views():
    datas = [pb.PartitionData(partition=0, next_offset=3, offsets=b"\x00" * 8, latest=3),
             pb.PartitionData(partition=2, next_offset=9, error_code="OFFSET_OUT_OF_RANGE"),
             pb.PartitionData(partition=5, next_offset=1, sizes=b"\x07" * 4)]
    frames = [b"f" * 70_000, b"", b"abc"]
    answer = fetch_answer(list(zip(datas, frames, strict=True)))
    answer.head.throttle_ms = 40
    raw = answer.SerializeToString()
    expected = pb.FetchResponse(throttle_ms=40)
    for data, blob in zip(datas, frames, strict=True):
        whole = expected.partitions.add()
        whole.CopyFrom(data)
        whole.frames = blob
    assert pb.FetchResponse.FromString(raw) == expected  # what a plain stub reads
    head, got = read_fetch(raw, "b1")
    assert head == pb.FetchResponse(throttle_ms=40)
    assert [(d, bytes(f)) for d, f in got] == list(zip(datas, frames, strict=True))
    assert all(f.obj is raw for _, f in got if len(f)), "views of the bytes received"
    with pytest.raises(CorruptRecord, match="the Fetch answer of b1 does not parse"):
        read_fetch(raw[:-1], "b1")
