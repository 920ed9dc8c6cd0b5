"""Retention of a Store by size and by age, on real files.

Whole oldest data segments go (never the active one); each partition's earliest offset moves up
to its first record left in the data log (latest when none is left); index segments that only
hold offsets below earliest go too. Reading below earliest raises OffsetOutOfRange carrying
earliest and latest. A reopen (with or without the checkpoint) keeps earliest and latest:
offsets never go backwards.

The expected earliest offsets are computed independently, by parsing the chunk headers of the
data log before retention (``_chunks``). Background retention is kept out of the way with a huge
``retention_check_interval_ms`` except in the one test about it.
"""
from __future__ import annotations

import os
import random
import threading
import time
import zlib
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest

from lib.errors import OffsetOutOfRange
from lib.records import Record, decode_frames, encode_batch
from storage.config import StoreConfig
from storage.datalog import CHUNK, CHUNK_MAGIC
from storage.index import ENTRY, IndexLog
from storage.recovery import CHECKPOINT
from storage.retention import segments_to_delete
from storage.store import Store
from tests.helpers import read_all

KiB = 1 << 10
BASE = StoreConfig(
    cache_block_bytes=4 * KiB,
    cache_block_messages=10**6,
    cache_flush_interval_ms=10**6,  # blocks go to the files when full, on flush() or close()
    fsync_interval_ms=10**6,
    checkpoint_interval_ms=10**9,
    segment_bytes=8 * KiB,
    index_segment_entries=16,
    retention_ms=-1,
    retention_bytes=-1,
    retention_check_interval_ms=10**12,  # only enforce_retention() applies retention
    max_message_bytes=1 * KiB,
    max_batch_bytes=4 * KiB,
)
TOPIC, STORE_ID = "t", 0
PARTS = [0, 1, 2, 3]  # partition 3 only gets data early on: retention empties it
EARLY_ONLY = 3


def store_dir(root: Path) -> Path:
    return root / TOPIC / str(STORE_ID)


def data_segments(root: Path) -> list[Path]:
    return sorted((store_dir(root) / "data").glob("*.log"))


def index_segments(root: Path, partition: int) -> list[Path]:
    return sorted((store_dir(root) / f"p{partition}").glob("*.idx"))


def _chunks(root: Path) -> list[tuple[str, int, int, int]]:
    """(segment file name, partition, base offset, count) of every chunk, oldest first."""
    out = []
    for path in data_segments(root):
        raw = path.read_bytes()
        at = 0
        while at < len(raw):
            magic, part, count, base, frames_len, _r, crc = CHUNK.unpack_from(raw, at)
            assert magic == CHUNK_MAGIC and zlib.crc32(raw[at:at + CHUNK.size - 4]) == crc
            out.append((path.name, part, base, count))
            at += CHUNK.size + frames_len
    return out


def expected_earliest(root: Path, kept: set[str], latest: dict[int, int]) -> dict[int, int]:
    """First offset of each partition that lives in a kept segment (latest if none does)."""
    out = dict(latest)
    for name, part, base, _count in reversed(_chunks(root)):
        if name in kept:
            out[part] = base
    return out


def fill(store: Store, written: dict[int, list[bytes]], batches: int, seed: int,
         early: bool = False) -> None:
    rng = random.Random(seed)
    for i in range(batches):
        p = EARLY_ONLY if early and i % 4 == 0 else rng.choice([0, 1, 2])
        vals = [b"%d-%d-" % (p, len(written[p]) + j) + rng.randbytes(rng.randrange(20, 250))
                for j in range(rng.randint(1, 6))]
        ts = 1000 + len(written[p])
        base, _ = store.append(p, encode_batch([Record(v, timestamp=ts) for v in vals]))
        assert base == len(written[p])
        written[p] += vals
    store.flush()


def check_partitions(store: Store, written: dict[int, list[bytes]], earliest: dict[int, int],
                     case: str = "") -> None:
    for p in PARTS:
        latest = len(written[p])
        assert (store.earliest(p), store.latest(p)) == (earliest[p], latest), f"{case} p{p}"
        for below in ({0, earliest[p] - 1} if earliest[p] > 0 else ()):
            with pytest.raises(OffsetOutOfRange) as err:
                store.read(p, below)
            assert (err.value.earliest, err.value.latest) == (earliest[p], latest), case
        res = store.read(p, earliest[p], max_bytes=1)  # reading at earliest works
        assert len(res) == (1 if earliest[p] < latest else 0), f"{case} p{p}"
        recs = read_all(store, p, max_bytes=2000)  # from earliest, every frame CRC-checked
        assert [r.offset for r in recs] == list(range(earliest[p], latest)), f"{case} p{p}"
        assert [r.value for r in recs] == written[p][earliest[p]:], f"{case} p{p}"
        assert store.offset_for_time(p, 0) == earliest[p], f"{case} p{p}"


def check_disk_bytes(store: Store, case: str = "") -> None:
    """A partition's disk bytes are its records' frames (as read back) plus its index files."""
    store.flush()
    for p in PARTS:
        frames, offset = 0, store.earliest(p)
        while offset < store.latest(p):
            res = store.read(p, offset, 2000)
            frames, offset = frames + len(res.frames), res.next_offset
        index = sum(f.stat().st_size for f in (store.dir / f"p{p}").glob("*.idx"))
        assert store.disk_bytes(p) == frames + index, f"{case} p{p}"


def check_index_segments(root: Path, before: dict[int, list[str]], earliest: dict[int, int],
                         case: str = "") -> None:
    """Exactly the index segments holding only offsets below earliest are gone."""
    for p, names in before.items():
        bases = [int(n[:20]) for n in names]
        gone = 0
        while gone + 1 < len(bases) and bases[gone + 1] <= earliest[p]:
            gone += 1
        assert [s.name for s in index_segments(root, p)] == names[gone:], f"{case} p{p}"


def reopen_checks(root: Path, cfg: StoreConfig, written: dict[int, list[bytes]],
                  earliest: dict[int, int]) -> None:
    """Reopen with the checkpoint, then without it: same earliest/latest/content; appends
    continue at latest."""
    with Store(root, TOPIC, STORE_ID, PARTS, cfg) as s:
        check_partitions(s, written, earliest, "reopen")
    (store_dir(root) / CHECKPOINT).unlink()
    with Store(root, TOPIC, STORE_ID, PARTS, cfg) as s:
        check_partitions(s, written, earliest, "reopen without checkpoint")
        for p in PARTS:
            vals = [b"again-%d" % p]
            assert s.append(p, encode_batch([Record(v) for v in vals])) == (len(written[p]),) * 2
            written[p] += vals
        check_partitions(s, written, earliest, "append after reopen")
        check_disk_bytes(s, "append after reopen")
    with Store(root, TOPIC, STORE_ID, PARTS, cfg) as s:
        check_partitions(s, written, earliest, "reopen after append")


def _setup(tmp_path: Path, cfg: StoreConfig, batches: int = 110
           ) -> tuple[Store, dict[int, list[bytes]], list[Path], dict[int, list[str]]]:
    written: dict[int, list[bytes]] = {p: [] for p in PARTS}
    s = Store(tmp_path, TOPIC, STORE_ID, PARTS, cfg)
    fill(s, written, 20, seed=1, early=True)
    fill(s, written, batches, seed=2)
    segs = data_segments(tmp_path)
    assert len(segs) >= 4
    idx = {p: [x.name for x in index_segments(tmp_path, p)] for p in PARTS}
    assert all(len(idx[p]) >= 3 for p in (0, 1, 2))
    return s, written, segs, idx


def test_retention_by_size_deletes_oldest_segments_and_moves_earliest_up(tmp_path):
    limit = 20 * KiB
    cfg = replace(BASE, retention_bytes=limit)
    s, written, segs, idx = _setup(tmp_path, cfg)
    sizes = [p.stat().st_size for p in segs]
    total, doomed = sum(sizes), 0
    for size in sizes[:-1]:
        if total <= limit:
            break
        total, doomed = total - size, doomed + 1
    assert doomed >= 2
    latest = {p: len(written[p]) for p in PARTS}
    kept = {p.name for p in segs[doomed:]}
    earliest = expected_earliest(tmp_path, kept, latest)
    assert all(earliest[p] > 0 for p in PARTS)
    assert earliest[EARLY_ONLY] == latest[EARLY_ONLY] > 0  # all its data was in old segments
    check_disk_bytes(s, "before retention")

    assert s.enforce_retention() == doomed
    assert [p.name for p in data_segments(tmp_path)] == [p.name for p in segs[doomed:]]
    assert s.stats()["data_bytes"] == total <= limit
    check_partitions(s, written, earliest, "after retention")
    check_index_segments(tmp_path, idx, earliest, "after retention")
    check_disk_bytes(s, "after retention")
    assert s.enforce_retention() == 0  # nothing more to do
    s.close()
    reopen_checks(tmp_path, cfg, written, earliest)


def test_retention_by_age_with_a_future_now_keeps_only_the_active_segment(tmp_path):
    cfg = replace(BASE, retention_ms=60_000)
    s, written, segs, idx = _setup(tmp_path, cfg)
    assert s.enforce_retention() == 0  # nothing is a minute old yet
    assert s.enforce_retention(now=time.time() + 30) == 0
    latest = {p: len(written[p]) for p in PARTS}
    earliest = expected_earliest(tmp_path, {segs[-1].name}, latest)

    assert s.enforce_retention(now=time.time() + 3600) == len(segs) - 1
    assert data_segments(tmp_path) == [segs[-1]]  # the active segment always stays
    check_partitions(s, written, earliest, "after age retention")
    check_index_segments(tmp_path, idx, earliest, "after age retention")
    assert s.enforce_retention(now=time.time() + 10**6) == 0
    s.close()
    reopen_checks(tmp_path, cfg, written, earliest)


def test_retention_by_age_follows_segment_mtimes(tmp_path):
    cfg = replace(BASE, retention_ms=3_600_000)
    s, written, segs, idx = _setup(tmp_path, cfg)
    old = time.time() - 2 * 3600
    for path in segs[:3]:
        os.utime(path, (old, old))
    latest = {p: len(written[p]) for p in PARTS}
    earliest = expected_earliest(tmp_path, {p.name for p in segs[3:]}, latest)

    assert s.enforce_retention() == 3
    assert data_segments(tmp_path) == segs[3:]
    check_partitions(s, written, earliest, "after mtime retention")
    check_index_segments(tmp_path, idx, earliest, "after mtime retention")
    s.close()
    reopen_checks(tmp_path, cfg, written, earliest)


def test_earliest_only_moves_up_over_rounds_of_writes_retention_and_reopens(tmp_path):
    cfg = replace(BASE, retention_bytes=12 * KiB)
    written: dict[int, list[bytes]] = {p: [] for p in PARTS}
    previous = {p: 0 for p in PARTS}
    for round_ in range(4):
        with Store(tmp_path, TOPIC, STORE_ID, PARTS, cfg) as s:
            check_partitions(s, written, previous, f"round {round_} open")
            fill(s, written, 40, seed=10 + round_, early=round_ == 0)
            before = data_segments(tmp_path)
            deleted = s.enforce_retention()
            assert deleted == len(before) - len(data_segments(tmp_path)) > 0
            assert data_segments(tmp_path) == before[deleted:]
            assert s.stats()["data_bytes"] <= 12 * KiB or len(data_segments(tmp_path)) == 1
            now = {p: s.earliest(p) for p in PARTS}
            assert all(now[p] >= previous[p] for p in PARTS), (now, previous)
            latest = {p: len(written[p]) for p in PARTS}
            assert now == expected_earliest(tmp_path, {x.name for x in data_segments(tmp_path)},
                                            latest)
            check_partitions(s, written, now, f"round {round_}")
            previous = now
        if round_ % 2:
            (store_dir(tmp_path) / CHECKPOINT).unlink()
    assert previous[EARLY_ONLY] == len(written[EARLY_ONLY]) > 0


def test_emptied_partition_keeps_its_latest_across_reopens_and_a_torn_tail(tmp_path):
    cfg = replace(BASE, retention_ms=60_000)
    s, written, segs, _idx = _setup(tmp_path, cfg, batches=60)
    s.enforce_retention(now=time.time() + 3600)
    latest = len(written[EARLY_ONLY])
    assert (s.earliest(EARLY_ONLY), s.latest(EARLY_ONLY)) == (latest, latest)
    assert len(s.read(EARLY_ONLY, latest)) == 0
    with pytest.raises(OffsetOutOfRange) as err:
        s.read(EARLY_ONLY, latest - 1)
    assert (err.value.earliest, err.value.latest) == (latest, latest)
    s.close()

    # A crash-like reopen: no checkpoint, and the tail of the active segment torn away.
    (store_dir(tmp_path) / CHECKPOINT).unlink()
    os.truncate(data_segments(tmp_path)[-1], 0)
    for p in (0, 1, 2):
        tail = index_segments(tmp_path, p)[-1]
        os.truncate(tail, max(0, tail.stat().st_size - 3 * ENTRY - 5))
    with Store(tmp_path, TOPIC, STORE_ID, PARTS, cfg) as s:
        assert (s.earliest(EARLY_ONLY), s.latest(EARLY_ONLY)) == (latest, latest)
        for p in (0, 1, 2):  # the other partitions lost their data too, not their offsets
            assert s.earliest(p) == s.latest(p) > 0
        assert s.append(EARLY_ONLY, encode_batch([Record(b"back")])) == (latest, latest)
    with Store(tmp_path, TOPIC, STORE_ID, PARTS, cfg) as s:
        assert (s.earliest(EARLY_ONLY), s.latest(EARLY_ONLY)) == (latest, latest + 1)
        assert [r.value for r in read_all(s, EARLY_ONLY)] == [b"back"]


def test_background_retention_runs_in_the_flusher(tmp_path):
    cfg = replace(BASE, retention_bytes=16 * KiB, retention_check_interval_ms=20,
                  cache_flush_interval_ms=10, fsync_interval_ms=20)
    written: dict[int, list[bytes]] = {p: [] for p in PARTS}
    with Store(tmp_path, TOPIC, STORE_ID, PARTS, cfg) as s:
        fill(s, written, 80, seed=3)
        deadline = time.monotonic() + 5
        while s.stats()["data_bytes"] > 16 * KiB and time.monotonic() < deadline:
            time.sleep(0.01)
        assert s.stats()["data_bytes"] <= 16 * KiB
        earliest = {p: s.earliest(p) for p in PARTS}
        assert max(earliest.values()) > 0
        check_partitions(s, written, earliest, "background")


def test_reads_racing_retention_get_valid_frames_or_out_of_range(tmp_path):
    cfg = replace(BASE, retention_bytes=10 * KiB)
    written: dict[int, list[bytes]] = {p: [] for p in PARTS}
    s = Store(tmp_path, TOPIC, STORE_ID, PARTS, cfg)
    fill(s, written, 30, seed=4)
    stop, errors, reads = threading.Event(), [], [0]

    def reader() -> None:
        offset = 0
        try:
            while not stop.is_set():
                try:
                    res = s.read(0, offset, max_bytes=600)
                except OffsetOutOfRange as err:
                    assert err.earliest > offset and err.latest >= err.earliest
                    offset = err.earliest
                    continue
                recs = decode_frames(res.frames, res.offsets, 0)
                assert [r.offset for r in recs] == list(range(offset, offset + len(recs)))
                assert all(r.value.startswith(b"0-%d-" % r.offset) for r in recs)
                reads[0] += 1
                offset = res.next_offset if res.next_offset < s.latest(0) else s.earliest(0)
                time.sleep(0.0005)  # leave the GIL to the writer and the flusher
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(6):
            fill(s, written, 15, seed=100 + i)
            s.enforce_retention()
    finally:
        stop.set()
        t.join()
        s.close()
    assert not errors, errors
    assert reads[0] > 0


@pytest.mark.parametrize("when", ["before the index read", "before the data read"])
def test_retention_between_range_check_and_file_reads_gives_out_of_range(tmp_path, monkeypatch,
                                                                          when):
    """Deterministic version of the race above: retention runs inside one read's window."""
    cfg = replace(BASE, retention_bytes=10 * KiB)
    written: dict[int, list[bytes]] = {p: [] for p in PARTS}
    s = Store(tmp_path, TOPIC, STORE_ID, PARTS, cfg)
    fill(s, written, 60, seed=5)
    p0 = s.dir / "p0"  # white box: partition 0's index read is where retention runs
    real_read, fired = IndexLog.read, []

    def read_with_retention(index: IndexLog, first: int, last: int):
        if fired or index.dir != p0:  # retention itself reads the index: only the first
            return real_read(index, first, last)  # call is hooked
        fired.append(True)
        if when == "before the index read":
            s.enforce_retention()
            return real_read(index, first, last)
        entries = real_read(index, first, last)
        s.enforce_retention()
        return entries

    monkeypatch.setattr(IndexLog, "read", read_with_retention)
    try:
        with pytest.raises(OffsetOutOfRange) as err:
            s.read(0, 0)
        assert fired and err.value.earliest == s.earliest(0) > 0
        assert err.value.latest == s.latest(0) == len(written[0])
        monkeypatch.undo()
        check_partitions(s, written, {p: s.earliest(p) for p in PARTS}, when)
    finally:
        s.close()


def test_retention_decision_deletes_oldest_segments_past_age_or_size_never_the_active_one():
    rows = [(0, 100, 10.0), (100, 100, 20.0), (200, 100, 30.0), (300, 50, 40.0)]
    decide = partial(segments_to_delete, rows)
    assert decide(retention_ms=-1, retention_bytes=-1, now=1e9) == 0
    assert decide(retention_ms=15_000, retention_bytes=-1, now=30.0) == 1  # only 10.0 is >15 s
    assert decide(retention_ms=1, retention_bytes=-1, now=1e9) == 3  # the active one stays
    assert decide(retention_ms=-1, retention_bytes=200, now=0.0) == 2  # 350 -> 150 bytes
    assert decide(retention_ms=-1, retention_bytes=350, now=0.0) == 0
    assert segments_to_delete(rows[:1], retention_ms=1, retention_bytes=1, now=1e9) == 0


def test_disk_bytes_survives_retention_dropping_the_segments_it_is_summing(tmp_path, monkeypatch):
    """disk_bytes sums index segments outside the store's lock (a heartbeat asks for every
    partition); retention dropping those segments meanwhile must not fail the heartbeat."""
    import storage.index
    cfg = replace(BASE, retention_bytes=20 * KiB)
    s, _written, _segs, idx = _setup(tmp_path, cfg)
    s.close()  # reopened, it has summed nothing yet (appends sum what they write): it reads
    s = Store(tmp_path, TOPIC, STORE_ID, PARTS, cfg)
    real_read, dropped = storage.index._read_segment, []

    def read_then_retain(seg, first, stop):
        if not dropped:
            dropped.append(0)  # retention reads the index too: retain once, not recursively
            dropped[0] = s.enforce_retention()
        return real_read(seg, first, stop)

    monkeypatch.setattr(storage.index, "_read_segment", read_then_retain)
    before = s.disk_bytes(0)  # counted from the segments it started with
    monkeypatch.undo()
    assert dropped[0] >= 2 and len(index_segments(tmp_path, 0)) < len(idx[0])
    assert before > s.disk_bytes(0) > 0
    check_disk_bytes(s, "after retention during a sum")
    s.close()


def test_disk_bytes_reads_no_index_file_for_what_this_store_appended(tmp_path, monkeypatch):
    """A heartbeat asks every partition's disk_bytes each second: the sums of what was
    appended are kept as it is written, so at 10,000 partitions it reads no file."""
    import storage.index
    s, written, _segs, _idx = _setup(tmp_path, BASE)
    real_read, reads = storage.index._read_segment, []
    for more in (0, 10):
        fill(s, written, more, seed=3)
        s.flush()
        reads.clear()
        monkeypatch.setattr(storage.index, "_read_segment",
                            lambda seg, first, stop: reads.append(seg) or
                            real_read(seg, first, stop))
        sums = [s.disk_bytes(p) for p in PARTS]
        monkeypatch.undo()
        assert reads == [], f"after {more} more batches"
        check_disk_bytes(s, f"after {more} more batches")
        assert sums == [s.disk_bytes(p) for p in PARTS]
    s.close()


def test_the_active_segment_is_never_stat_for_retention(tmp_path, monkeypatch):
    """Its mtime cannot matter (it is never deleted), and each stat lets the GIL go."""
    s, _written, segs, _idx = _setup(tmp_path, replace(BASE, retention_ms=3_600_000))
    stats = []
    real = Path.stat
    monkeypatch.setattr(Path, "stat", lambda self, **kw: stats.append(self) or real(self, **kw))
    assert s.enforce_retention() == 0  # nothing is an hour old
    mine = [path for path in stats if path in segs]  # not what another thread may stat
    assert segs[-1] not in mine and set(mine) == set(segs[:-1])
    s.close()
