"""The per-partition key index (storage/keys.py, storage/key_lookup.py) through the Store API,
on real files: every lookup is compared with a full scan of the partition."""
from __future__ import annotations

import os
import random

import numpy as np
import pytest

from lib.errors import InvalidArgument
from lib.records import Record, decode_frames, encode_batch, parse_batch
from storage.config import StoreConfig
from storage.index import INDEX_DTYPE, IndexLog
from storage.keys import HASH, KS_HEADER, KeyLog, hash_keys, key_hash
from storage.store import Store
from tests.helpers import read_all

# Small segments and blocks: a few thousand records roll many index segments (sealed key
# files), leave some in the active one and some in the cache.
SMALL = StoreConfig(cache_block_bytes=1 << 16, max_batch_bytes=1 << 15, max_message_bytes=1 << 14,
                    segment_bytes=1 << 16, index_segment_entries=256,
                    cache_flush_interval_ms=20, fsync_interval_ms=50)
KEYS = [f"user-{i}".encode() for i in range(37)] + [None, b""]


def fill(store: Store, partition: int, n: int, seed: int = 1, ts0: int = 1_000) -> None:
    rnd = random.Random(seed)
    done = 0
    while done < n:
        count = min(n - done, rnd.randint(1, 40))
        store.append(partition, encode_batch([
            Record(f"v{done + i}".encode(), key=rnd.choice(KEYS), timestamp=ts0 + done + i)
            for i in range(count)]))
        done += count


def scan(store: Store, partition: int, key: bytes, since: int | None = None,
         until: int | None = None) -> list[int]:
    return [r.offset for r in read_all(store, partition) if r.key == key
            and (since is None or r.timestamp >= since) and (until is None or r.timestamp <= until)]


def found(store: Store, partition: int, key: bytes, **kw) -> list[int]:
    got = store.find_by_key(partition, key, limit=1000, **kw)
    records = decode_frames(got.frames)
    assert all(r.key == key for r in records)
    return got.offsets.tolist()


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path, "orders", 0, [0, 1], SMALL)
    yield s
    s.close()


def test_find_by_key_returns_exactly_the_records_a_scan_finds(store):
    fill(store, 0, 3000)
    fill(store, 1, 500, seed=2)
    for key in (b"user-0", b"user-17", b"user-36"):  # cached, active and sealed segments
        assert found(store, 0, key) == scan(store, 0, key) != []
    store.flush()
    assert len(list(store.dir.glob("p0/*.ks"))) > 5
    for key in KEYS[:37]:
        assert found(store, 0, key) == scan(store, 0, key)
        assert found(store, 1, key) == scan(store, 1, key)
    assert found(store, 0, b"nobody") == []


def test_find_by_key_limits_by_time_and_count_and_continues(store):
    fill(store, 0, 2000)
    store.flush()
    assert found(store, 0, b"user-3", since_ms=1_500, until_ms=2_200) == \
        scan(store, 0, b"user-3", 1_500, 2_200)
    every = scan(store, 0, b"user-3")
    first = store.find_by_key(0, b"user-3", limit=5)
    assert first.offsets.tolist() == every[:5] and first.next_offset == every[4] + 1
    rest = store.find_by_key(0, b"user-3", limit=1000, from_offset=first.next_offset)
    assert rest.offsets.tolist() == every[5:] and rest.next_offset == store.latest(0)


def test_key_index_survives_a_restart_and_is_rebuilt_when_its_files_are_lost(tmp_path):
    s = Store(tmp_path, "orders", 0, [0], SMALL)
    fill(s, 0, 2500)
    s.close()
    s = Store(tmp_path, "orders", 0, [0], SMALL)
    want = {k: scan(s, 0, k) for k in KEYS[:37]}
    assert {k: found(s, 0, k) for k in KEYS[:37]} == want
    s.close()
    for path in list(s.dir.glob("p0/*.k*"))[::2]:  # lose some hash and sorted files
        path.unlink()
    sealed = sorted(s.dir.glob("p0/*.ks"))
    with open(sealed[0], "r+b") as f:  # and damage one sorted file
        f.seek(KS_HEADER.size + 8)
        f.write(b"\xff\xff\xff\xff")
    kh = sorted(s.dir.glob("p0/*.kh"))[-1]
    os.truncate(kh, os.path.getsize(kh) - 6)  # a torn tail
    s = Store(tmp_path, "orders", 0, [0], SMALL)
    try:
        assert {k: found(s, 0, k) for k in KEYS[:37]} == want
        fill(s, 0, 300, seed=5, ts0=9_000)
        assert found(s, 0, b"user-5") == scan(s, 0, b"user-5")
    finally:
        s.close()


def test_key_files_go_with_their_index_segments_under_retention(tmp_path):
    cfg = StoreConfig(cache_block_bytes=1 << 16, max_batch_bytes=1 << 15,
                      segment_bytes=1 << 16, index_segment_entries=256, retention_bytes=1 << 17,
                      cache_flush_interval_ms=20, retention_check_interval_ms=3_600_000)
    s = Store(tmp_path, "orders", 0, [0], cfg)
    try:
        fill(s, 0, 6000)
        s.flush()
        assert s.enforce_retention() > 0
        earliest = s.earliest(0)
        assert earliest > 0
        bases = {p.name.split(".")[0] for p in s.dir.glob("p0/*.idx")}
        assert {p.name.split(".")[0] for p in s.dir.glob("p0/*.k*")} <= bases
        for key in KEYS[:37]:
            got = found(s, 0, key)
            assert got == scan(s, 0, key) and all(o >= earliest for o in got)
    finally:
        s.close()
    s = Store(tmp_path, "orders", 0, [0], cfg)
    try:
        assert found(s, 0, b"user-9") == scan(s, 0, b"user-9")
    finally:
        s.close()


def test_truncation_drops_the_cut_records_from_the_key_index(store):
    fill(store, 0, 1500)
    store.flush()
    store.truncate(0, 700)
    assert found(store, 0, b"user-2") == scan(store, 0, b"user-2")
    assert all(o < 700 for o in found(store, 0, b"user-2"))
    fill(store, 0, 800, seed=9)
    store.flush()
    assert found(store, 0, b"user-2") == scan(store, 0, b"user-2")


def test_a_hash_collision_is_never_returned(store):
    # Two different keys with the same CRC-32: the index offers both, the key check keeps one.
    a, b = b"plumless", b"buckeroo"
    assert key_hash(a) == key_hash(b)
    store.append(0, encode_batch([Record(b"1", key=a), Record(b"2", key=b), Record(b"3", key=a)]))
    assert found(store, 0, a) == [0, 2]
    store.flush()
    assert found(store, 0, b) == [1]


def test_key_hashes_are_crc32_of_the_key_bytes_computed_over_whole_arrays():
    view = parse_batch(encode_batch([Record(b"x", key=b"k1", tag="t"), Record(b"y"),
                                     Record(b"z", key=b"")]))
    starts = np.concatenate([[0], np.cumsum(view.sizes[:-1])]).astype(np.int64)
    got = hash_keys(view.frames, starts, view.sizes.astype(np.int64))
    assert got.dtype == HASH and got.tolist() == [key_hash(b"k1"), 0, 0]


def test_a_batch_check_says_whether_any_record_has_a_key():
    many = [Record(b"v%d" % i) for i in range(40)]
    assert parse_batch(encode_batch(many)).keyed is False
    assert parse_batch(encode_batch(many + [Record(b"k", key=b"")])).keyed is False  # hash 0
    assert parse_batch(encode_batch(many + [Record(b"k", key=b"x")])).keyed is True
    assert parse_batch(encode_batch(many[:3])).keyed is True  # a few frames: not looked at


def test_catch_up_writes_zeros_for_unkeyed_offsets_without_reading_them(tmp_path):
    # 300 keyed records, then 600 without keys, across index segments of 256 entries.
    records = [Record(b"v", key=KEYS[i % 37]) for i in range(300)] + [Record(b"w")] * 600
    view = parse_batch(encode_batch(records))
    starts = np.concatenate([[0], np.cumsum(view.sizes[:-1])]).astype(np.int64)
    index = IndexLog(tmp_path / "p0", max_entries=256)
    entries = np.zeros(len(records), INDEX_DTYPE)
    entries["pos"], entries["size"] = starts, view.sizes
    index.append(entries)
    fetched = []

    def fetch(pos: int, n: int) -> memoryview:
        fetched.append((pos, pos + n))
        return view.frames[pos:pos + n]

    keys = KeyLog(index)
    keys.catch_up(index, fetch, 0, unkeyed=(300, 900))
    assert fetched and max(end for _, end in fetched) <= starts[300]  # never read past 300
    got = np.concatenate([np.fromfile(p, HASH) for p in sorted((tmp_path / "p0").glob("*.kh"))])
    assert got.tolist() == [key_hash(r.key or b"") for r in records]
    assert len(list((tmp_path / "p0").glob("*.ks"))) == 3  # 0, 256 and 512 sealed
    assert keys.candidates(key_hash(b"user-4"), 0, 900, None, None).tolist() == \
        [i for i in range(300) if i % 37 == 4]
    keys.close()
    index.close()


def test_unkeyed_batches_among_keyed_ones_keep_the_key_index_exact(tmp_path):
    s = Store(tmp_path, "orders", 0, [0], SMALL)
    try:
        for round_ in range(30):  # blocks of keyed, unkeyed and mixed partitions' chunks
            s.append(0, encode_batch([Record(b"u%d" % i) for i in range(50)]))
            if round_ % 3:
                fill(s, 0, 40, seed=round_, ts0=round_ * 100)
        assert found(s, 0, b"user-7") == scan(s, 0, b"user-7") != []
        s.flush()
        hashes = np.concatenate([np.fromfile(p, HASH) for p in sorted(s.dir.glob("p0/*.kh"))])
        assert hashes.tolist() == [key_hash(r.key or b"") for r in read_all(s, 0)]
    finally:
        s.close()
    s = Store(tmp_path, "orders", 0, [0], SMALL)
    try:
        assert {k: found(s, 0, k) for k in KEYS[:37]} == {k: scan(s, 0, k) for k in KEYS[:37]}
    finally:
        s.close()


@pytest.mark.parametrize(("kw", "words"), [
    ({"key": b""}, "empty"), ({"key": b"x" * 5000}, "4096"),
    ({"key": b"k", "since_ms": 10, "until_ms": 5}, "before since"),
    ({"key": b"k", "limit": 0}, "limit"), ({"key": 5}, "bytes or str"),
])
def test_bad_lookups_are_refused_naming_the_problem(store, kw, words):
    with pytest.raises(InvalidArgument, match=words):
        store.find_by_key(0, **kw)


def key_file_descriptors(directory) -> int:
    """Descriptors of this process open on ``.kh`` files under ``directory``."""
    root, count = str(directory), 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        count += target.startswith(root) and target.endswith(".kh")
    return count


def test_a_store_without_keys_holds_no_descriptor_on_its_key_files(tmp_path):
    """At 10,000 topics the descriptors are capped (storage/handles.py): key files of
    records without keys are extended as holes, never opened."""
    s = Store(tmp_path, "plain", 0, [0], SMALL)
    try:
        for _ in range(20):  # rolls index segments of 256 entries: sealed key files too
            s.append(0, encode_batch([Record(b"p%d" % j) for j in range(40)]))
        s.flush()
        assert key_file_descriptors(tmp_path) == 0
        hashes = np.concatenate([np.fromfile(p, HASH) for p in sorted(s.dir.glob("p0/*.kh"))])
        assert hashes.tolist() == [0] * 800
        s.append(0, encode_batch([Record(b"k", key=b"user-1")]))  # a key: written, opened
        s.flush()
        assert found(s, 0, b"user-1") == [800]
        assert key_file_descriptors(tmp_path) == 1
    finally:
        s.close()
    s = Store(tmp_path, "plain", 0, [0], SMALL)  # the holes read back as zeros after a restart
    try:
        assert found(s, 0, b"user-1") == [800]
        assert s.find_by_key(0, b"p1", limit=10).offsets.tolist() == []
    finally:
        s.close()
