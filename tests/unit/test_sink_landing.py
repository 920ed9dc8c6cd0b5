"""broker/sink_landing.py: finding an interrupted sink commit's batches in a real store."""
from __future__ import annotations

import pytest

from broker.sink_landing import BatchMark, landed_records
from lib.records import drop_records, encode_batch
from lib.records.layout import Record
from storage.offsets import OffsetStore, SinkMark
from storage.store import Store


def batch(store: Store, prefix: str, n: int, tag: str | None = None):
    return store.parse(encode_batch([Record(value=f"{prefix}{i}".encode(), tag=tag)
                                     for i in range(n)]))


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path, "t", 0, [0, 1]) as s:
        yield s


def test_batches_are_found_in_order_between_other_producers_appends(store):
    store.append(0, batch(store, "old", 30))
    start = store.latest(0)
    pieces = [batch(store, "a", 40), batch(store, "b", 7, tag="x"), batch(store, "c", 5)]
    marks = [BatchMark.of(p) for p in pieces]
    store.append(0, batch(store, "other", 300))  # another producer, between the commit's appends
    store.append(0, pieces[0])
    store.append(1, batch(store, "b", 7, tag="x"))  # same bytes, other partition: not it
    store.append(0, batch(store, "other", 2))
    store.append(0, pieces[1])
    # pieces[2] never made it (the broker died)
    assert landed_records(store, 0, start, store.latest(0), marks) == 47
    assert landed_records(store, 0, start, store.latest(0), marks[:1]) == 40
    assert landed_records(store, 1, 0, store.latest(1), marks) == 0  # the first is missing
    # Only what was stored before ``end`` counts (a restarted broker's earlier process).
    assert landed_records(store, 0, start, start + 300, marks) == 0


def test_an_equal_first_record_is_not_taken_for_the_batch(store):
    start = store.latest(0)
    mark = BatchMark.of(batch(store, "a", 10))
    store.append(0, batch(store, "a", 3))  # same first frame, different batch
    assert landed_records(store, 0, start, store.latest(0), [mark]) == 0
    store.append(0, batch(store, "a", 10))
    assert landed_records(store, 0, start, store.latest(0), [mark]) == 10


def test_drop_records_leaves_the_tail_of_a_batch_zero_copy(store):
    view = batch(store, "v", 10, tag="t")
    tail = drop_records(view, 4)
    assert tail.count == 6 and list(tail.sizes) == list(view.sizes[4:])
    assert tail.frames.obj is view.frames.obj  # a slice, not a copy
    store.append(0, tail)
    assert [r for r in store.read(0, 0).offsets] == list(range(6))
    assert drop_records(view, 10).count == 0
    with pytest.raises(ValueError, match="cannot drop 11 of 10"):
        drop_records(view, 11)


def test_a_sink_commit_record_replaces_its_intents_in_one_transaction(tmp_path):
    offsets = OffsetStore(tmp_path / "lmdb", map_size=1 << 24)
    intent = {"batch": 3, "landed": 0, "from": 7, "marks": [[1, 2, 3, 4]]}
    offsets.put_sink_intents("q", {("t", 0): intent, ("t", 1): intent})
    assert offsets.sink_intents("t", 0) == {"q": intent}
    assert offsets.groups() == [] and offsets.group_topics() == set()  # not groups
    offsets.commit_sink("q", 3, {("t", 0): SinkMark(3, 9, 1)})
    assert offsets.sink_intents("t", 0) == {} and offsets.sink_committed("q") == 3
    assert offsets.sink_marks("t", 0) == {"q": SinkMark(3, 9, 1)}
    assert offsets.sink_intents("t", 1) == {"q": intent}, "another partition's stays"
    offsets.close()


def test_a_follower_drops_an_intent_only_for_the_mark_that_covers_it(tmp_path):
    offsets = OffsetStore(tmp_path / "lmdb", map_size=1 << 24)
    intent = {"batch": 5, "landed": 0, "from": 7, "marks": []}
    offsets.put_sink_copies("t", 0, {"q": SinkMark(4, 7, 1)}, {"q": intent})
    assert offsets.sink_intents("t", 0) == {"q": intent}, "mark 4 does not cover batch 5"
    offsets.put_sink_copies("t", 0, {"q": SinkMark(5, 12, 1), "r": SinkMark(1, 3, 1)}, {})
    assert offsets.sink_intents("t", 0) == {}
    offsets.put_sink_copies("t", 0, {}, {}, drop_from=10)  # truncated at 10
    assert offsets.sink_marks("t", 0) == {"r": SinkMark(1, 3, 1)}
    offsets.drop_sink_marks("t")
    assert offsets.sink_marks("t", 0) == {} == offsets.sink_intents("t", 0)
    offsets.close()
