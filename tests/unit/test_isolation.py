"""What a consumer's read shows of transactions (broker/isolation.py through
broker.data.visible_read), on a real store: control records never, aborted records only to
read_uncommitted, nothing past the last stable offset to read_committed."""
from __future__ import annotations

import dataclasses

import numpy as np

from broker.data import visible_read
from lib.records import Record, decode_frames, encode_batch
from storage.store import Store
from tests.helpers import SMALL_STORE, batch_of


def txn(pid: int, seq: int, *values: bytes) -> bytes:
    return encode_batch([Record(v, timestamp=1) for v in values], producer_id=pid,
                        producer_epoch=0, base_sequence=seq, transactional=True)


def seen(store: Store, committed: bool, high_watermark: int | None = None,
         offset: int = 0) -> tuple[list[bytes], list[int], int]:
    """Values and offsets read from ``offset`` on, as a consumer reads (on from next_offset
    until a read moves no further: a read stops where the files end and the cache begins),
    and where it stopped."""
    values, offsets = [], []
    while True:
        reply = visible_read(store, 0, offset, high_watermark, 1 << 20, committed=committed)
        offsets += np.frombuffer(reply.offsets, "<i8").tolist()
        values += [r.value for r in decode_frames(reply.frames)]
        if reply.next_offset == offset:
            return values, offsets, offset
        offset = reply.next_offset


def test_reads_by_isolation(tmp_path):
    cfg = dataclasses.replace(SMALL_STORE, cache_block_bytes=1 << 20, segment_bytes=1 << 20)
    with Store(tmp_path, "iso", 0, [0], cfg) as s:
        s.append(0, txn(7, 0, b"a1", b"a2"))  # 0-1: aborted below
        s.append(0, batch_of([b"plain"]))  # 2
        s.append(0, txn(8, 0, b"c1"))  # 3: committed below
        s.producers.write_marker(0, 7, 0, commit=False)  # 4
        s.append(0, txn(9, 0, b"open"))  # 5: still open
        s.producers.write_marker(0, 8, 0, commit=True)  # 6
        s.append(0, batch_of([b"late"]))  # 7
        assert seen(s, committed=False) == (
            [b"a1", b"a2", b"plain", b"c1", b"open", b"late"], [0, 1, 2, 3, 5, 7], 8)
        assert seen(s, committed=True) == ([b"plain", b"c1"], [2, 3], 5), \
            "stops at the open transaction of producer 9"
        assert seen(s, committed=True, offset=5) == ([], [], 5)
        s.producers.write_marker(0, 9, 0, commit=True)  # 8
        assert seen(s, committed=True, offset=4) == ([b"open", b"late"], [5, 7], 9)
        assert seen(s, committed=True, high_watermark=6, offset=4) == ([b"open"], [5], 6)


def test_a_partition_without_transactions_is_read_as_it_is(tmp_path):
    with Store(tmp_path, "plain", 0, [0], SMALL_STORE) as s:
        s.append(0, batch_of([b"x", b"y"]))
        assert not s.producers.transactional(0)
        assert seen(s, committed=True) == ([b"x", b"y"], [0, 1], 2)


def test_a_fetch_read_of_several_batches_keeps_their_pieces_and_a_push_read_joins(tmp_path):
    """A Fetch answer writes a read's pieces unjoined (lib.wire.Runs, its len the bytes);
    protobuf, which a push answer is built with, gets the frames as bytes."""
    from lib.wire import Runs
    cfg = dataclasses.replace(SMALL_STORE, cache_block_bytes=1 << 20, segment_bytes=1 << 20)
    with Store(tmp_path, "pieces", 0, [0], cfg) as s:
        s.append(0, batch_of([b"one", b"two"]))
        s.append(0, batch_of([b"three"]))
        fetched = visible_read(s, 0, 0, None, 1 << 20, pieces=True)
        pushed = visible_read(s, 0, 0, None, 1 << 20)
        assert isinstance(fetched.frames, Runs) and len(fetched.frames.pieces) == 2
        assert len(fetched.frames) == len(pushed.frames) == len(bytes(fetched.frames))
        assert bytes(fetched.frames) == bytes(pushed.frames)
        assert [r.value for r in decode_frames(bytes(fetched.frames))] == [b"one", b"two",
                                                                           b"three"]
        assert fetched.fields()["frames"] == bytes(pushed.frames)  # what protobuf is given
        assert fetched.entry()[1] is fetched.frames  # the answer's pieces, unjoined
