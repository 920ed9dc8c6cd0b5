"""Store behaviour through its public API, on real files in a temp dir."""
from __future__ import annotations

import threading
import time
from dataclasses import replace

import numpy as np
import pytest

from lib.config import build
from lib.errors import (
    BatchTooLarge,
    ConfigError,
    CorruptRecord,
    InvalidName,
    OffsetOutOfRange,
    RecordTooLarge,
    StoreClosed,
    UnknownPartition,
)
from lib.records import decode_frames
from storage.config import StoreConfig
from storage.recovery import CHECKPOINT
from storage.store import Store
from tests.helpers import batch_of, read_all, values

SMALL = StoreConfig(cache_block_bytes=1 << 16, max_batch_bytes=1 << 15, max_message_bytes=1 << 14,
                    segment_bytes=1 << 16, cache_flush_interval_ms=20, fsync_interval_ms=50)


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path, "orders", 0, [0, 1, 2], SMALL)
    yield s
    s.close()


def test_offsets_are_dense_per_partition(store):
    assert store.append(0, batch_of(values("a", 3))) == (0, 2)
    assert store.append(1, batch_of(values("b", 2))) == (0, 1)
    assert store.append(0, batch_of(values("c", 4))) == (3, 6)
    assert (store.earliest(0), store.latest(0), store.latest(1), store.latest(2)) == (0, 7, 2, 0)


def test_read_returns_records_in_order_from_cache_and_disk(store):
    expected = []
    for i in range(120):  # enough to roll several blocks and segments
        vals = values(f"r{i}", 50)
        store.append(0, batch_of(vals))
        expected += vals
    mid = read_all(store, 0)
    store.flush()
    after = read_all(store, 0)
    assert [r.value for r in mid] == expected == [r.value for r in after]
    assert [r.offset for r in after] == list(range(len(expected)))
    assert store.stats()["segments"] > 1


def test_a_read_from_the_cache_is_a_view_whose_bytes_outlive_later_blocks(store):
    """Frames read from a cache block are not copied (a follower's and a tailing consumer's
    read): the view must keep the bytes it was given while the block is written out and
    later blocks come and go."""
    store.append(0, batch_of(values("first", 20)))
    res = store.read(0, 0)
    assert isinstance(res.frames, memoryview)  # a view of the block: no copy
    given = bytes(res.frames)
    store.append(0, batch_of(values("second", 5)))
    both = store.read(0, 0)  # a chunk header between the batches: two pieces, not joined
    assert [type(p) for p in both.pieces] == [memoryview, memoryview]
    assert both.frames == given + b"".join(both.pieces[1:])
    assert [r.value for r in decode_frames(both.frames)] == values("first", 20) + values(
        "second", 5)
    for i in range(60):  # several blocks written and dropped meanwhile
        store.append(0, batch_of(values(f"later{i}", 50)))
    store.flush()
    assert bytes(res.frames) == given
    assert [r.value for r in decode_frames(res.frames)] == values("first", 20)
    assert bytes(store.read(0, 0).frames)[:len(given)] == given  # now from the files


def test_read_respects_max_bytes_but_returns_at_least_one_frame(store):
    store.append(0, batch_of([b"x" * 1000] * 10))
    res = store.read(0, 0, max_bytes=2500)
    assert len(res) == 2 and res.next_offset == 2
    res = store.read(0, 0, max_bytes=1)
    assert len(res) == 1 and res.next_offset == 1


def test_read_stops_at_a_record_count_or_an_offset_so_callers_never_trim(store):
    store.append(0, batch_of(values("r", 30)))
    store.flush()
    store.append(0, batch_of(values("s", 10)))  # 30..39 still in the cache
    for offset in (0, 32):  # from the files, and from the cache
        res = store.read(0, offset, max_records=5)
        assert list(res.offsets) == list(range(offset, offset + 5))
        assert res.next_offset == offset + 5
        assert [r.value for r in decode_frames(res.frames)] == \
            (values("r", 30) + values("s", 10))[offset:offset + 5]
        res = store.read(0, offset, stop=offset + 3)
        assert list(res.offsets) == list(range(offset, offset + 3))
        assert res.next_offset == offset + 3
    store.append(0, batch_of(values("t", 4), tag="red"))  # 40..43
    res = store.read(0, 35, tags=["red"], max_records=2)
    if not len(res.offsets):  # the flusher wrote 30..39 meanwhile (every 20 ms): a read stops
        assert res.next_offset == 40  # at the files' end, and the reader goes on from there
        res = store.read(0, res.next_offset, tags=["red"], max_records=2)
    assert list(res.offsets) == [40, 41] and res.next_offset == 42


def test_tag_filter_returns_only_matching_frames_and_fewer_bytes(store):
    for i in range(10):
        store.append(1, batch_of(values(f"a{i}", 20), tag="alpha"))
        store.append(1, batch_of(values(f"b{i}", 20), tag="beta"))
    store.flush()
    store.append(1, batch_of(values("tail", 5), tag="alpha"))  # still in the cache
    everything = store.read(1, 0, 1 << 20)
    got = read_all(store, 1, tags=["alpha"])
    assert len(got) == 205 and {r.tag for r in got} == {"alpha"}
    assert len(store.read(1, 0, 1 << 20, tags=["alpha"]).frames) < len(everything.frames) * 0.6
    assert read_all(store, 1, tags=["gamma"]) == []


def test_out_of_range_offsets_carry_earliest_and_latest(store):
    store.append(2, batch_of(values("z", 5)))
    for bad in (-1, 6, 10**12):
        with pytest.raises(OffsetOutOfRange) as err:
            store.read(2, bad)
        assert (err.value.earliest, err.value.latest) == (0, 5)
    assert len(store.read(2, 5)) == 0  # reading at latest is fine: nothing yet


def test_offset_for_time_finds_first_record_at_or_after(store):
    for ts in (100, 200, 300):
        store.append(0, batch_of(values(str(ts), 10), timestamp=ts))
        if ts == 200:
            store.flush()
    assert store.offset_for_time(0, 0) == 0
    assert store.offset_for_time(0, 150) == 10
    assert store.offset_for_time(0, 300) == 20
    assert store.offset_for_time(0, 301) == 30


def test_limits_give_clear_errors(store):
    with pytest.raises(RecordTooLarge, match=str(SMALL.max_message_bytes)):
        store.append(0, batch_of([b"x" * (SMALL.max_message_bytes + 1)]))
    with pytest.raises(BatchTooLarge, match=str(SMALL.max_batch_bytes)):
        store.append(0, batch_of([b"x" * 10_000] * 4))
    with pytest.raises(CorruptRecord):
        store.append(0, b"garbage")
    with pytest.raises(UnknownPartition, match="hosts"):
        store.append(9, batch_of([b"x"]))
    assert store.latest(0) == 0  # nothing half-written


@pytest.mark.parametrize("name", ["../evil", "..", ".", "a/b", "", "x" * 250, "-x", "a\x00b"])
def test_bad_topic_names_are_refused(tmp_path, name):
    with pytest.raises(InvalidName):
        Store(tmp_path, name, 0, [0], SMALL)


def test_closed_store_refuses_calls(tmp_path):
    s = Store(tmp_path, "t", 0, [0], SMALL)
    s.close()
    with pytest.raises(StoreClosed):
        s.append(0, batch_of([b"x"]))
    with pytest.raises(StoreClosed):
        s.read(0, 0)


def test_reopen_keeps_everything_after_close(tmp_path):
    with Store(tmp_path, "t", 3, [0, 5], SMALL) as s:
        s.append(0, batch_of(values("a", 100)))
        s.append(5, batch_of(values("b", 7), tag="q"))
    with Store(tmp_path, "t", 3, [0, 5], SMALL) as s:
        assert [r.value for r in read_all(s, 0)] == values("a", 100)
        assert [r.tag for r in read_all(s, 5)] == ["q"] * 7
        assert s.append(5, batch_of([b"more"])) == (7, 7)


def test_an_append_that_may_not_wait_changes_nothing_where_it_would_wait(tmp_path):
    cfg = build(StoreConfig, {"durability": "sync"})
    with Store(tmp_path, "s", 0, [0], cfg) as s:
        assert s.append(0, batch_of([b"a"]), wait=False) is None  # a sync append waits
        assert s.latest(0) == 0
        assert s.append(0, batch_of([b"a"])) == (0, 0)
    with Store(tmp_path, "a", 0, [0]) as s:  # async, room in the cache: appended at once
        assert s.append(0, batch_of([b"b"]), wait=False) == (0, 0)


def test_sync_appends_from_many_threads_are_all_durable(tmp_path):
    cfg = build(StoreConfig, {"durability": "sync"}, cache_flush_interval_ms=1000)
    s = Store(tmp_path, "t", 0, [0, 1], cfg)
    results = []

    def worker(i: int) -> None:
        for j in range(10):
            results.append((i % 2, s.append(i % 2, batch_of(values(f"{i}-{j}", 10)))))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for p in (0, 1):
        bases = sorted(base for q, (base, _last) in results if q == p)
        assert bases == list(range(0, 400, 10))  # dense, no two appends share offsets
    assert len(read_all(s, 0)) + len(read_all(s, 1)) == 800
    s.close()


def test_config_rejects_unknown_keys_and_bad_combinations():
    with pytest.raises(ConfigError, match="unknown"):
        build(StoreConfig, {"no_such_key": 1})
    with pytest.raises(ConfigError, match="cache_block_bytes"):
        build(StoreConfig, {"max_batch_bytes": 1 << 30})
    with pytest.raises(ConfigError, match="durability"):
        build(StoreConfig, {"durability": "sometimes"})
    assert np.int64(build(StoreConfig).max_message_bytes) == 1 << 20


def _wakeups(store: Store) -> int:
    """Times a flusher pool thread ran the store's flusher."""
    return store._flusher.steps


def test_an_idle_store_neither_wakes_nor_rewrites_its_checkpoint(tmp_path):
    """A broker holds thousands of stores: one that nobody writes must cost no wake-ups and
    no fsyncs (it used to wake every 100 ms and rewrite its checkpoint every second)."""
    cfg = replace(SMALL, checkpoint_interval_ms=20, retention_check_interval_ms=60_000)
    with Store(tmp_path, "idle", 0, [0], cfg) as s:
        s.append(0, batch_of(values("a", 5)))
        s.flush()
        checkpoint = tmp_path / "idle" / "0" / CHECKPOINT
        wait_until(lambda: checkpoint.exists(), "the first checkpoint")
        time.sleep(0.2)  # the flusher settles after its last checkpoint
        before, stat = _wakeups(s), checkpoint.stat()
        time.sleep(1.0)
        assert _wakeups(s) - before <= 2
        again = checkpoint.stat()
        assert (again.st_ino, again.st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns)
        s.append(0, batch_of(values("b", 5)))  # a write wakes it: a block due, a checkpoint
        wait_until(lambda: s.stats()["partitions"][0]["flushed"] == 10,
                   "the block written after its flush interval (20 ms)", timeout=1.0)
        wait_until(lambda: checkpoint.stat().st_ino != stat.st_ino, "a checkpoint after a write")
        assert s.read(0, 5).offsets.tolist()[:5] == [5, 6, 7, 8, 9]


def wait_until(cond, what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_a_new_store_has_its_files_before_its_first_append(tmp_path):
    """Files are made when a store opens, not by its first flush: creating them (inodes,
    directory fsyncs) was most of the cost of a first small burst into a new topic."""
    s = Store(tmp_path, "fresh", 0, [0, 1], StoreConfig(cache_flush_interval_ms=10))
    try:
        names = sorted(p.name for p in (tmp_path / "fresh" / "0").rglob("*") if p.is_file())
        assert [n for n in names if n.endswith((".log", ".idx", ".kh"))] == \
            ["00000000000000000000.idx", "00000000000000000000.idx",
             "00000000000000000000.kh", "00000000000000000000.kh", "00000000000000000000.log"]
        s.append(1, batch_of([b"a", b"b"]))
        s.flush()
        assert [r.value for r in read_all(s, 1)] == [b"a", b"b"]
    finally:
        s.close()
    reopened = Store(tmp_path, "fresh", 0, [0, 1], StoreConfig(cache_flush_interval_ms=10))
    try:
        assert [r.value for r in read_all(reopened, 1)] == [b"a", b"b"]
        assert reopened.latest(0) == 0
    finally:
        reopened.close()
