"""The storage primitives replication builds on, on real files: leader epochs (in chunk headers
and each partition's cache), appends at the leader's offsets, truncation and reset of one
partition of a shared data log, and the frame sizes a read returns.

A store is reopened three ways (``reopen``): ``clean`` (closed, then opened: the checkpoint
covers everything), ``crash`` (the directory copied while the store is open, after a flush:
the files are written, the checkpoint is the one of the previous close) and ``full_scan``
(closed, checkpoint deleted: recovery rebuilds every index from the whole data log).
"""
from __future__ import annotations

import logging
import shutil
import struct
import threading
import zlib
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from lib.errors import InvalidArgument, OffsetOutOfRange
from lib.records import Record, decode_frames, encode_batch, frame_sizes
from storage.config import StoreConfig
from storage.datalog import CHUNK, CHUNK_MAGIC, DataLog, chunk_header, parse_chunk
from storage.epochs import FILE, LeaderEpochs
from storage.recovery import CHECKPOINT
from storage.store import Store
from tests.helpers import SMALL_STORE, batch_of, read_all, values

KiB = 1 << 10
CFG = SMALL_STORE  # 16 entries per index segment: truncations cross their boundaries
TOPIC, STORE_ID, PARTS = "repl", 0, [0, 1, 2]
MODES = ["clean", "crash", "full_scan"]


def open_store(root: Path, config: StoreConfig = CFG) -> Store:
    return Store(root, TOPIC, STORE_ID, PARTS, config)


def store_dir(root: Path) -> Path:
    return root / TOPIC / str(STORE_ID)


@contextmanager
def reopen(store: Store, root: Path, mode: str, tmp_path: Path):
    """Close (or crash) ``store`` as ``mode`` says (module docstring) and yield it reopened."""
    if mode == "crash":
        store.flush()
        target = tmp_path / "crashed"
        shutil.copytree(root, target)  # what a killed process leaves behind
        store.close()
    else:
        store.close()
        target = root
        if mode == "full_scan":
            (store_dir(root) / CHECKPOINT).unlink()
    with open_store(target) as s:
        yield s


def fill(store: Store, partition: int, prefix: str, batches: int, per_batch: int = 5,
         **kw) -> list[bytes]:
    """Append ``batches`` batches of ``per_batch`` ~100-byte values; returns the values."""
    out = []
    for i in range(batches):
        vals = [v + b"." * 90 for v in values(f"{prefix}{i}", per_batch)]
        store.append(partition, batch_of(vals), **kw)
        out += vals
    return out


def contents(store: Store, partition: int) -> list[bytes]:
    return [r.value for r in read_all(store, partition)]


# ------------------------------------------------------------------ append at an offset


def test_append_at_the_next_offset_lands_there_and_any_other_offset_is_refused(tmp_path):
    with open_store(tmp_path) as s:
        assert s.append(0, batch_of(values("a", 3)), at=0) == (0, 2)
        assert s.append(0, batch_of(values("b", 2))) == (3, 4)  # at=None: unchanged
        for wrong in (0, 4, 6):
            with pytest.raises(InvalidArgument) as err:
                s.append(0, batch_of(values("c", 2)), at=wrong)
            assert f"offset {wrong}" in err.value.message and "5" in err.value.message
            assert (err.value.offset, err.value.latest) == (wrong, 5)
        assert s.latest(0) == 5
        assert s.append(0, batch_of(values("d", 2)), at=5) == (5, 6)
        assert contents(s, 0) == values("a", 3) + values("b", 2) + values("d", 2)


# ------------------------------------------------------------------ the leader-epoch cache


def test_epochs_assign_appends_higher_epochs_and_refuses_going_back(tmp_path):
    epochs = LeaderEpochs(tmp_path)
    assert epochs.latest() is None and epochs.entries() == []
    epochs.assign(1, 0)
    epochs.assign(1, 5)  # the same epoch: no-op, its start stays
    epochs.assign(3, 10)
    with pytest.raises(InvalidArgument, match="epoch 2 at offset 20 goes back"):
        epochs.assign(2, 20)
    with pytest.raises(InvalidArgument, match="epoch 4 at offset 9 goes back"):
        epochs.assign(4, 9)
    with pytest.raises(InvalidArgument):
        epochs.assign(-1, 30)
    assert epochs.entries() == [(1, 0), (3, 10)] and epochs.latest() == (3, 10)
    assert LeaderEpochs(tmp_path).entries() == [(1, 0), (3, 10)]  # written at once


def test_end_offset_for_answers_like_offsets_for_leader_epoch(tmp_path):
    epochs = LeaderEpochs(tmp_path)
    assert epochs.end_offset_for(3, 40) == (-1, -1)  # nothing known
    for epoch, start in [(2, 0), (4, 10), (7, 25)]:
        epochs.assign(epoch, start)
    assert epochs.end_offset_for(1, 40) == (1, 0)  # before the first: ends where it starts
    assert epochs.end_offset_for(2, 40) == (2, 10)
    assert epochs.end_offset_for(3, 40) == (2, 10)  # unknown: the largest known one below
    assert epochs.end_offset_for(4, 40) == (4, 25)
    assert epochs.end_offset_for(6, 40) == (4, 25)
    assert epochs.end_offset_for(7, 40) == (7, 40)  # the latest ends at the log end
    assert epochs.end_offset_for(9, 40) == (-1, -1)  # newer than this log knows


def test_truncate_from_end_drops_the_epochs_starting_at_or_after_the_offset(tmp_path):
    epochs = LeaderEpochs(tmp_path)
    for epoch, start in [(2, 0), (4, 10), (7, 25)]:
        epochs.assign(epoch, start)
    epochs.truncate_from_end(30)
    assert epochs.entries() == [(2, 0), (4, 10), (7, 25)]
    epochs.truncate_from_end(25)
    assert epochs.entries() == [(2, 0), (4, 10)]
    epochs.truncate_from_end(11)
    assert epochs.entries() == [(2, 0), (4, 10)]
    epochs.truncate_from_end(10)
    assert LeaderEpochs(tmp_path).entries() == [(2, 0)]
    epochs.assign(3, 10)  # the truncated log continues under a new epoch
    assert LeaderEpochs(tmp_path).entries() == [(2, 0), (3, 10)]


def test_truncate_from_start_moves_the_covering_epoch_up(tmp_path):
    epochs = LeaderEpochs(tmp_path)
    for epoch, start in [(2, 0), (4, 10), (7, 25)]:
        epochs.assign(epoch, start)
    epochs.truncate_from_start(0)
    assert epochs.entries() == [(2, 0), (4, 10), (7, 25)]
    epochs.truncate_from_start(5)
    assert epochs.entries() == [(2, 5), (4, 10), (7, 25)]
    epochs.truncate_from_start(10)
    assert epochs.entries() == [(4, 10), (7, 25)]
    epochs.truncate_from_start(30)
    assert LeaderEpochs(tmp_path).entries() == [(7, 30)]


def test_a_damaged_epochs_file_reads_as_empty_and_is_logged(tmp_path, caplog):
    epochs = LeaderEpochs(tmp_path)
    epochs.assign(5, 100)
    path = tmp_path / FILE
    raw = bytearray(path.read_bytes())
    raw[raw.index(b"100")] ^= 0x01  # a flipped bit inside the sealed body
    path.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING):
        damaged = LeaderEpochs(tmp_path)
    assert damaged.entries() == [] and damaged.latest() is None
    assert "store.leader_epochs_unreadable" in caplog.text
    damaged.assign(6, 120)  # rebuilt from what the leader sends next
    assert LeaderEpochs(tmp_path).entries() == [(6, 120)]


# ------------------------------------------------------------------ epochs in the store


def test_appends_record_new_leader_epochs_and_they_survive_reopen(tmp_path):
    s = open_store(tmp_path)
    s.append(0, batch_of(values("a", 3)))  # epoch 0: no epoch, nothing recorded
    s.append(0, batch_of(values("b", 3)), leader_epoch=1)
    s.append(0, batch_of(values("c", 3)), leader_epoch=1)
    s.append(0, batch_of(values("d", 3)), leader_epoch=3)
    s.append(0, batch_of(values("e", 3)), leader_epoch=2)  # older: the header only
    s.append(1, batch_of(values("f", 3)))
    with pytest.raises(InvalidArgument):
        s.append(0, batch_of(values("g", 1)), leader_epoch=1 << 32)
    assert s.latest(0) == 15
    assert s.leader_epochs(0) == [(1, 3), (3, 9)]
    assert s.end_offset_for_epoch(0, 0) == (0, 3)  # the unnumbered records before epoch 1
    assert s.end_offset_for_epoch(0, 2) == (1, 9)
    assert s.end_offset_for_epoch(0, 3) == (3, 15)
    with reopen(s, tmp_path, "clean", tmp_path) as s:
        assert s.leader_epochs(0) == [(1, 3), (3, 9)]
        assert s.end_offset_for_epoch(0, 3) == (3, 15)
        assert s.leader_epochs(1) == [] and s.leader_epochs(2) == []
    assert not (store_dir(tmp_path) / "p1" / FILE).exists()  # no file without epochs


def test_an_epoch_past_the_recovered_log_is_dropped_on_open(tmp_path):
    s = open_store(tmp_path)
    fill(s, 0, "a", 4, leader_epoch=1)
    s.flush()
    s.append(0, batch_of(values("lost", 2)), leader_epoch=2)  # cached only when we crash
    assert s.leader_epochs(0) == [(1, 0), (2, 20)]
    shutil.copytree(tmp_path, tmp_path.parent / "crashed")  # no flush: the batch is lost
    s.close()
    with open_store(tmp_path.parent / "crashed") as s:
        assert s.latest(0) == 20
        assert s.leader_epochs(0) == [(1, 0)]
        assert s.end_offset_for_epoch(0, 1) == (1, 20)


def test_retention_moving_earliest_moves_the_first_epoch_up(tmp_path):
    cfg = StoreConfig(**{**CFG.__dict__, "retention_bytes": 40 * KiB})
    with Store(tmp_path, TOPIC, STORE_ID, PARTS, cfg) as s:
        fill(s, 0, "a", 40, leader_epoch=1)
        fill(s, 0, "b", 40, leader_epoch=4)
        s.flush()
        assert s.enforce_retention() > 0
        earliest = s.earliest(0)
        assert 0 < earliest < 200
        assert s.leader_epochs(0) == [(1, earliest), (4, 200)]
        fill(s, 0, "c", 100, leader_epoch=4)
        s.flush()
        assert s.enforce_retention() > 0
        earliest = s.earliest(0)
        assert earliest > 200
        assert s.leader_epochs(0) == [(4, earliest)]
    with Store(tmp_path, TOPIC, STORE_ID, PARTS, cfg) as s:
        assert s.leader_epochs(0) == [(4, earliest)]


# ------------------------------------------------------------------ chunk headers


def test_the_leader_epoch_round_trips_through_the_recovery_scan(tmp_path):
    with open_store(tmp_path) as s:
        s.append(0, batch_of(values("a", 2)), leader_epoch=7)
        s.append(1, batch_of(values("b", 2)))
        s.append(0, batch_of(values("c", 2)), leader_epoch=(1 << 32) - 1)
        s.truncate(0, 3)
    data = DataLog(store_dir(tmp_path) / "data", CFG.segment_bytes)
    try:
        chunks, damage = data.scan(0)
    finally:
        data.close()
    assert damage == []
    assert [(c.partition, c.base_offset, len(c.entries), c.leader_epoch) for c in chunks] == [
        (0, 0, 2, 7), (1, 0, 2, 0), (0, 2, 2, (1 << 32) - 1), (0, 3, 0, 0)]


def test_a_header_written_before_epochs_reads_as_epoch_0(tmp_path):
    frames = encode_batch([Record(b"old", timestamp=5)])
    with open_store(tmp_path) as s:
        view = s.parse(frames)
    body = bytes(view.frames)
    # The layout before epochs: the same fields, a reserved u32 always written as 0.
    old = CHUNK.pack(CHUNK_MAGIC, 3, 1, 42, len(body), 0, 0)
    old = old[:-4] + struct.pack("<I", zlib.crc32(old[:-4]))
    assert old == chunk_header(3, 1, 42, len(body))
    chunk, why = parse_chunk(memoryview(old + body), 0, 1000)
    assert why == "" and chunk is not None
    assert (chunk.partition, chunk.base_offset, chunk.leader_epoch) == (3, 42, 0)
    assert chunk.frames_pos == 1000 + CHUNK.size


def test_the_chunk_crc_covers_the_leader_epoch():
    head = bytearray(chunk_header(0, 0, 9, 0, leader_epoch=5))
    assert parse_chunk(memoryview(bytes(head)), 0, 0)[0].leader_epoch == 5
    head[24] ^= 0x02  # the epoch field: 5 -> 7, CRC unchanged
    chunk, why = parse_chunk(memoryview(bytes(head)), 0, 0)
    assert chunk is None and "damaged" in why


# ------------------------------------------------------------------ truncate


def test_truncate_drops_the_tail_and_appends_continue_there(tmp_path):
    with open_store(tmp_path) as s:
        old = fill(s, 0, "a", 6, leader_epoch=1) + fill(s, 0, "b", 4, leader_epoch=2)
        other = fill(s, 1, "o", 5)
        s.flush()
        fill(s, 0, "c", 2, leader_epoch=2)  # 50..59: in the cache when truncate starts
        s.truncate(0, 27)
        assert (s.earliest(0), s.latest(0)) == (0, 27)
        assert contents(s, 0) == old[:27]
        with pytest.raises(OffsetOutOfRange) as err:
            s.read(0, 28)
        assert (err.value.earliest, err.value.latest) == (0, 27)
        assert s.leader_epochs(0) == [(1, 0)]
        assert s.end_offset_for_epoch(0, 1) == (1, 27)
        assert s.append(0, batch_of(values("new", 4)), leader_epoch=3, at=27) == (27, 30)
        assert s.leader_epochs(0) == [(1, 0), (3, 27)]
        assert contents(s, 0) == old[:27] + values("new", 4)  # from the cache
        s.flush()
        assert contents(s, 0) == old[:27] + values("new", 4)  # from the files
        assert contents(s, 1) == other


@pytest.mark.parametrize("extra", [0, 3, 40])
@pytest.mark.parametrize("mode", MODES)
def test_truncated_records_stay_gone_after_reopen(tmp_path, mode, extra):
    """``extra`` new records after the cut: none (a crash right after the truncation), fewer
    than were cut, and more (so the index ends past the old checkpoint's offset)."""
    root = tmp_path / "root"
    s = open_store(root)
    old = {p: fill(s, p, f"p{p}-", 7) for p in PARTS}  # 35 records each, interleaved
    s.close()  # the checkpoint now says 35 for every partition
    s = open_store(root)
    more = fill(s, 1, "late", 2)
    s.truncate(0, 12)
    new = fill(s, 0, "new", extra, per_batch=1, leader_epoch=2)
    with reopen(s, root, mode, tmp_path) as s:
        assert contents(s, 0) == old[0][:12] + new, mode
        assert contents(s, 1) == old[1] + more
        assert contents(s, 2) == old[2]
        assert s.leader_epochs(0) == ([(2, 12)] if extra else [])
        assert s.append(0, batch_of([b"after"])) == (12 + extra, 12 + extra)
    with open_store(root if mode != "crash" else tmp_path / "crashed") as s:
        assert contents(s, 0) == old[0][:12] + new + [b"after"]
        assert s.latest(1) == 45 and s.latest(2) == 35


def test_readers_racing_truncations_get_records_or_offset_out_of_range(tmp_path):
    """A reader may see the old records while a truncation runs (documented), but never an
    I/O error or a damaged frame: an offset cut away is OffsetOutOfRange."""
    errors: list[BaseException] = []
    stop = threading.Event()
    with open_store(tmp_path) as s:
        fill(s, 0, "a", 20)
        s.flush()

        def reader() -> None:
            while not stop.is_set():
                try:
                    for offset in (0, 40, 90):
                        res = s.read(0, offset, max_bytes=4 * KiB)
                        decode_frames(res.frames, res.offsets)  # checks every frame's CRC
                except OffsetOutOfRange:
                    pass
                except BaseException as exc:  # noqa: BLE001 - the test reports it
                    errors.append(exc)
                    return

        threads = [threading.Thread(target=reader) for _ in range(3)]
        for t in threads:
            t.start()
        try:
            for _ in range(15):
                s.truncate(0, 10)
                fill(s, 0, "b", 18)  # back past 90, across index segments
                s.flush()
        finally:
            stop.set()
            for t in threads:
                t.join()
    assert errors == []


@pytest.mark.parametrize("mode", MODES)
def test_truncate_to_earliest_empties_the_partition(tmp_path, mode):
    root = tmp_path / "root"
    s = open_store(root)
    fill(s, 0, "a", 8)
    others = fill(s, 2, "b", 3)
    s.truncate(0, 0)
    assert (s.earliest(0), s.latest(0)) == (0, 0)
    assert len(s.read(0, 0)) == 0
    with reopen(s, root, mode, tmp_path) as s:
        assert (s.earliest(0), s.latest(0)) == (0, 0)
        assert contents(s, 2) == others
        assert s.append(0, batch_of(values("z", 2))) == (0, 1)
        assert contents(s, 0) == values("z", 2)


def test_truncate_outside_earliest_and_latest_is_refused(tmp_path):
    with open_store(tmp_path) as s:
        written = fill(s, 0, "a", 2)
        for bad in (-1, 11):
            with pytest.raises(OffsetOutOfRange) as err:
                s.truncate(0, bad)
            assert (err.value.earliest, err.value.latest) == (0, 10)
        s.truncate(0, 10)  # at latest: nothing to drop
        assert contents(s, 0) == written


# ------------------------------------------------------------------ reset


@pytest.mark.parametrize("mode", MODES)
def test_reset_beyond_latest_empties_the_partition_and_survives_reopen(tmp_path, mode):
    root = tmp_path / "root"
    s = open_store(root)
    fill(s, 0, "a", 6, leader_epoch=1)
    others = fill(s, 1, "b", 6)
    s.reset(0, 1000)
    assert (s.earliest(0), s.latest(0)) == (1000, 1000)
    assert s.leader_epochs(0) == []
    with pytest.raises(OffsetOutOfRange):
        s.read(0, 5)
    with reopen(s, root, mode, tmp_path) as s:
        assert (s.earliest(0), s.latest(0)) == (1000, 1000)
        assert len(s.read(0, 1000)) == 0 and contents(s, 1) == others
        assert s.append(0, batch_of(values("n", 2)), at=1000, leader_epoch=4) == (1000, 1001)
    with open_store(root if mode != "crash" else tmp_path / "crashed") as s:
        assert (s.earliest(0), s.latest(0)) == (1000, 1002)
        assert contents(s, 0) == values("n", 2)
        assert s.leader_epochs(0) == [(4, 1000)]


def test_a_reset_partition_keeps_its_offset_after_retention_deleted_the_marker(tmp_path):
    cfg = StoreConfig(**{**CFG.__dict__, "retention_bytes": 20 * KiB})
    with Store(tmp_path, TOPIC, STORE_ID, PARTS, cfg) as s:
        fill(s, 0, "a", 4)
        s.reset(0, 500)
        fill(s, 1, "b", 100)  # rolls many segments past the one holding the marker
        s.flush()
        assert s.enforce_retention() > 0 and s.earliest(1) > 0
    (store_dir(tmp_path) / CHECKPOINT).unlink()  # a full scan finds no marker any more
    with Store(tmp_path, TOPIC, STORE_ID, PARTS, cfg) as s:
        assert (s.earliest(0), s.latest(0)) == (500, 500)
        assert s.append(0, batch_of([b"x"])) == (500, 500)


def test_a_reset_after_damaged_bytes_restarts_the_partition_instead_of_holes(tmp_path):
    """Damage between a partition's last record and its reset marker could not have held
    the million offsets in between: recovery restarts the index there, no holes."""
    with open_store(tmp_path) as s:
        fill(s, 0, "a", 2)
        s.flush()
        fill(s, 1, "b", 1)  # the chunk that gets damaged
        s.flush()
        s.reset(0, 1_000_000)
        s.append(0, batch_of([b"x"]))
    seg = sorted((store_dir(tmp_path) / "data").glob("*.log"))[-1]
    raw = bytearray(seg.read_bytes())
    at = raw.rindex(chunk_header(1, 5, 0, 0)[:12])  # p1's chunk: magic, partition, count
    raw[at + 14] ^= 0xFF  # inside its base offset: the header CRC fails
    seg.write_bytes(bytes(raw))
    (store_dir(tmp_path) / CHECKPOINT).unlink()
    with open_store(tmp_path) as s:
        assert (s.earliest(0), s.latest(0)) == (1_000_000, 1_000_001)
        assert contents(s, 0) == [b"x"] and s.latest(1) == 0


def test_reset_below_latest_is_refused(tmp_path):
    with open_store(tmp_path) as s:
        fill(s, 0, "a", 2)
        with pytest.raises(OffsetOutOfRange) as err:
            s.reset(0, 9)
        assert (err.value.earliest, err.value.latest) == (0, 10)
        s.reset(0, 10)  # at latest: empty from there
        assert (s.earliest(0), s.latest(0)) == (10, 10)


# ------------------------------------------------------------------ ReadResult.sizes


@pytest.mark.parametrize("tags", [None, ["red"]])
@pytest.mark.parametrize("where", ["cache", "disk"])
def test_read_sizes_are_the_frames_real_sizes(tmp_path, where, tags):
    recs = [Record(b"v" * (i * 7 % 50), key=b"k" * (i % 3), tag=["red", "blue", None][i % 3],
                   timestamp=i) for i in range(60)]
    with open_store(tmp_path) as s:
        for i in range(0, 60, 6):
            s.append(0, encode_batch(recs[i:i + 6]))
        if where == "disk":
            s.flush()
        res = s.read(0, 0, tags=tags)
        assert len(res) == (20 if tags else 60)
        assert res.sizes.dtype == np.uint32 and len(res.sizes) == len(res.offsets)
        assert list(res.sizes) == list(frame_sizes(memoryview(res.frames)))
        assert int(res.sizes.sum()) == len(res.frames)
        assert len(set(res.sizes.tolist())) > 5  # sizes vary: a wrong take would show
        empty = s.read(0, 60)
        assert empty.sizes.dtype == np.uint32 and len(empty.sizes) == 0
