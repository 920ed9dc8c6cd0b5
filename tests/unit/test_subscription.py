"""SubscriptionState and the consumers' view of RouteCache: pure state, no processes."""
from __future__ import annotations

import numpy as np
import pytest

from lib import errors
from lib.consumer.subscription import SubscriptionState
from lib.proto import master_pb2
from lib.records import Record, decode_frames, decode_records, encode_frame
from lib.routes import RouteCache
from lib.types import TopicPartition

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def test_assign_reports_added_and_removed_and_keeps_state_of_kept_partitions():
    s = SubscriptionState()
    assert s.assign([A0, A1]) == ({A0, A1}, set())
    s.seek(A0, 7)
    assert s.assign([A0, B0]) == ({B0}, {A1})
    assert s.position(A0) == 7
    assert s.position(B0) is None
    assert s.assignment() == {A0, B0}


def test_new_partitions_need_a_position_and_are_not_fetchable_until_they_get_one():
    s = SubscriptionState()
    s.assign([A0, A1])
    assert sorted(s.missing_positions()) == [A0, A1]
    s.seek(A0, 3)
    assert s.missing_positions() == [A1]
    assert [(tp, pos) for tp, pos, _ in s.fetchable()] == [(A0, 3)]


def test_seek_rejects_negative_and_non_integer_offsets_and_unassigned_partitions():
    s = SubscriptionState()
    s.assign([A0])
    for bad in (-1, 1.5, "3", True):
        with pytest.raises(errors.InvalidArgument):
            s.seek(A0, bad)
    with pytest.raises(errors.InvalidArgument, match="not assigned"):
        s.seek(B0, 1)


def test_seek_gives_a_new_epoch_so_prefetched_data_is_refused():
    s = SubscriptionState()
    s.assign([A0])
    s.seek(A0, 10)
    old = s.epoch(A0)
    s.seek(A0, 10)
    assert s.epoch(A0) != old
    assert not s.advance(A0, old, 10, 20)
    assert s.advance(A0, s.epoch(A0), 10, 20)
    assert s.position(A0) == 20


def test_advance_refuses_data_that_does_not_start_at_the_position():
    s = SubscriptionState()
    s.assign([A0])
    s.seek(A0, 5)
    ep = s.epoch(A0)
    assert not s.advance(A0, ep, 4, 9)
    assert s.position(A0) == 5


def test_epochs_are_never_reused_after_revoke_and_reassign():
    s = SubscriptionState()
    s.assign([A0])
    s.seek(A0, 1)
    seen = s.epoch(A0)
    s.revoke([A0])
    s.assign([A0])
    assert s.epoch(A0) != seen


def test_uncommitted_lists_only_positions_that_moved_since_the_last_commit():
    s = SubscriptionState()
    s.assign([A0, A1, B0])
    s.seek(A0, 5)
    s.seek(A1, 8)
    s.set_committed(A1, 8)
    assert s.uncommitted() == {A0: 5}


def test_revoke_drops_partitions_and_returns_what_is_left_to_commit():
    s = SubscriptionState()
    s.assign([A0, A1])
    s.seek(A0, 5)
    s.seek(A1, 6)
    s.set_committed(A1, 6)
    assert s.revoke([A0, A1]) == {A0: 5}
    assert s.assignment() == set()


def test_hold_caps_the_commit_point_until_the_next_seek():
    s = SubscriptionState()
    s.assign([A0])
    s.seek(A0, 3)
    s.hold(A0, 4)
    s.advance(A0, s.epoch(A0), 3, 10)
    assert s.uncommitted() == {A0: 4}
    s.seek(A0, 12)
    assert s.uncommitted() == {A0: 12}


def test_paused_partitions_are_not_fetchable():
    s = SubscriptionState()
    s.assign([A0, A1])
    s.seek(A0, 0)
    s.seek(A1, 0)
    s.pause([A0])
    assert [tp for tp, _, _ in s.fetchable()] == [A1]
    assert s.paused() == {A0}
    s.pause([A0], False)
    assert len(s.fetchable()) == 2


def test_a_failed_partition_reports_its_error_until_seeked():
    s = SubscriptionState("error")
    s.assign([A0])
    s.seek(A0, 0)
    err = errors.OffsetOutOfRange("gone", earliest=5, latest=9)
    s.fail(A0, err)
    assert s.first_error() is err
    assert s.fetchable() == []
    s.seek(A0, 5)
    assert s.first_error() is None


def test_bad_reset_policy_topic_name_and_tag_are_refused():
    with pytest.raises(errors.InvalidArgument, match="auto_offset_reset"):
        SubscriptionState("newest")
    s = SubscriptionState()
    with pytest.raises(errors.InvalidName):
        s.set_topics(["../etc"])
    with pytest.raises(errors.InvalidArgument):
        s.set_topics([])
    with pytest.raises(errors.InvalidArgument, match="255"):
        s.set_tags(["x" * 300])
    with pytest.raises(errors.InvalidArgument):
        s.assign([TopicPartition("a", -1)])


def _route(topic, addresses):
    return master_pb2.TopicRoute(topic=topic, partitions=[
        master_pb2.PartitionRoute(partition=i, address=a or "", available=bool(a))
        for i, a in enumerate(addresses)])


def test_routes_group_partitions_by_broker_and_track_unavailable_ones():
    r = RouteCache(master=None)  # fed by update() only: never asks a master
    r.update([_route("a", ["h:1", "h:2", None])])
    grouped, missing = r.by_broker([A0, A1, TopicPartition("a", 2)])
    assert grouped == {"h:1": [A0], "h:2": [A1]}
    assert missing == [TopicPartition("a", 2)]
    assert r.partitions("a") == 3
    v = r.version
    r.update([_route("a", ["h:1", "h:2", None])])
    assert r.version == v
    r.update([_route("a", ["h:3", "h:2", None])])
    assert r.version > v and r.address(A0) == "h:3"


def test_lean_decoder_matches_decode_frames_for_every_kind_of_record():
    recs = [Record(b"v" * 10, timestamp=1), Record(b"k", key=b"key", tag="t1", timestamp=2),
            Record(b"", key=b"", timestamp=3), Record(b"h", headers={"a": b"1"}, timestamp=4),
            Record(b"z" * 100, tag="t2", timestamp=5)]
    frames = b"".join(encode_frame(r) for r in recs)
    offsets = np.arange(100, 105, dtype=np.int64)
    sizes: list[int] = []
    got = decode_records(frames, offsets, 3, "tp", sizes)
    assert got == decode_frames(frames, offsets, 3, "tp")
    assert sum(sizes) == len(frames)


def test_lean_decoder_refuses_a_corrupt_frame_and_a_count_mismatch():
    frames = bytearray(encode_frame(Record(b"abc")) + encode_frame(Record(b"def")))
    with pytest.raises(errors.CorruptRecord):
        decode_records(bytes(frames), np.arange(1, dtype=np.int64), 0, "t")
    frames[-1] ^= 0xFF
    with pytest.raises(errors.CorruptRecord, match="CRC"):
        decode_records(bytes(frames), np.arange(2, dtype=np.int64), 0, "t")
