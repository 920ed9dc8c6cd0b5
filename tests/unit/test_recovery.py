"""Torn-tail recovery of a Store, on real files: damage a closed (or crashed) store, reopen it.

Two golden stores are built once per module with a tiny config, so they hold several data
segments and several index segments per partition:

* ``closed``: written and closed cleanly; the checkpoint covers the whole data log.
* ``crashed``: ``closed`` reopened, more batches appended and flushed, then the directory is
  copied while the store is still open (what a process crash leaves: the data and index files
  are written, the checkpoint still describes the earlier, shorter log).

Every case copies a golden store, damages the copy and checks (:func:`check_recovery`) that the
store opens, that each partition reads back exactly the expected prefix of what was written
(dense offsets from 0, every frame passing ``decode_frames``' CRC checks), that a second open
agrees with the first, and that appends continue at latest and read back after another reopen.

Batches are atomic on disk (one chunk per batch, see storage/datalog.py): where the expected
prefix can be computed from the damage it is checked exactly, by parsing the chunk headers of
the golden data log (``_chunks``).
"""
from __future__ import annotations

import json
import os
import random
import shutil
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest

from lib.errors import CorruptRecord
from lib.records import FRAME_HEAD, Record, decode_frames, encode_batch
from storage.datalog import CHUNK, CHUNK_MAGIC
from storage.index import ENTRY
from storage.recovery import CHECKPOINT, Checkpoint
from storage.store import Store
from tests.helpers import SMALL_STORE, read_all

KiB = 1 << 10
CFG = SMALL_STORE
TOPIC, STORE_ID = "t", 0
PARTS = [0, 1, 2, 7]


@dataclass(frozen=True)
class Chunk:
    seg: int  # index of the data segment (sorted by base)
    start: int  # byte offset inside the segment file
    end: int
    partition: int
    base_offset: int
    count: int
    frame_starts: tuple[int, ...]  # byte offsets (in the file) of the chunk's frames


@dataclass
class Golden:
    root: Path
    written: dict[int, list[Record]]  # partition -> every record appended, offset n is item n
    chunks: list[Chunk]
    checkpoint_end: int  # data position the checkpoint covers (logical)


def store_dir(root: Path) -> Path:
    return root / TOPIC / str(STORE_ID)


def data_segments(root: Path) -> list[Path]:
    return sorted((store_dir(root) / "data").glob("*.log"))


def index_segments(root: Path, partition: int) -> list[Path]:
    return sorted((store_dir(root) / f"p{partition}").glob("*.idx"))


def _chunks(root: Path) -> list[Chunk]:
    """Parse the chunk headers (and frame lengths) of every data segment, oldest first."""
    out = []
    for i, path in enumerate(data_segments(root)):
        raw = path.read_bytes()
        at = 0
        while at < len(raw):
            magic, part, count, base, frames_len, _r, crc = CHUNK.unpack_from(raw, at)
            assert magic == CHUNK_MAGIC and zlib.crc32(raw[at:at + CHUNK.size - 4]) == crc
            starts, pos = [], at + CHUNK.size
            for _ in range(count):
                starts.append(pos)
                pos += FRAME_HEAD.unpack_from(raw, pos)[0]
            end = at + CHUNK.size + frames_len
            assert pos == end
            out.append(Chunk(i, at, end, part, base, count, tuple(starts)))
            at = end
    return out


def _record(rng: random.Random, partition: int, n: int, ts: int) -> Record:
    value = f"p{partition}-{n}-".encode() + rng.randbytes(rng.randrange(0, 300))
    tag = rng.choice([None, "red", "blue"])
    return Record(value, key=rng.choice([None, b"k%d" % n]), tag=tag, timestamp=ts,
                  headers={"h": b"%d" % n} if n % 3 == 0 else {})


def _write(store: Store, rng: random.Random, written: dict[int, list[Record]], batches: int,
           ts: int) -> int:
    for _ in range(batches):
        p = rng.choice(PARTS[:-1]) if rng.random() < 0.9 else PARTS[-1]
        recs = [_record(rng, p, len(written[p]) + i, ts + i) for i in range(rng.randint(1, 8))]
        base, last = store.append(p, encode_batch(recs))
        assert (base, last) == (len(written[p]), len(written[p]) + len(recs) - 1)
        written[p] += recs
        ts += len(recs)
    return ts


@pytest.fixture(scope="module")
def goldens(tmp_path_factory) -> dict[str, Golden]:
    rng = random.Random(1234)
    written: dict[int, list[Record]] = {p: [] for p in PARTS}
    closed = tmp_path_factory.mktemp("closed")
    with Store(closed, TOPIC, STORE_ID, PARTS, CFG) as s:
        ts = _write(s, rng, written, 90, 1_000)
    closed_written = {p: list(r) for p, r in written.items()}
    closed_end = sum(p.stat().st_size for p in data_segments(closed))

    work = tmp_path_factory.mktemp("work")
    crashed = tmp_path_factory.mktemp("crashed") / "root"
    shutil.copytree(closed, work, dirs_exist_ok=True)
    s = Store(work, TOPIC, STORE_ID, PARTS, CFG)
    try:
        _write(s, rng, written, 40, ts)
        s.flush()
        shutil.copytree(work, crashed)  # a crash now: files written, checkpoint is older
    finally:
        s.close()

    out = {"closed": Golden(closed, closed_written, _chunks(closed), closed_end),
           "crashed": Golden(crashed, written, _chunks(crashed), closed_end)}
    for g in out.values():  # the goldens themselves are sane and varied enough
        assert len(data_segments(g.root)) >= 4
        assert all(len(index_segments(g.root, p)) >= 3 for p in PARTS[:-1])
        assert {c.partition for c in g.chunks[-20:]} >= set(PARTS[:-1])
        assert (store_dir(g.root) / CHECKPOINT).exists()
    assert len(out["crashed"].chunks) > len(out["closed"].chunks)
    return out


def copy_of(golden: Golden, tmp_path: Path, name: str) -> Path:
    dest = tmp_path / name
    shutil.copytree(golden.root, dest)
    return dest


def _snapshot(store: Store, max_bytes: int = 1 << 20) -> dict[int, tuple[int, int, list[Record]]]:
    return {p: (store.earliest(p), store.latest(p), read_all(store, p, max_bytes=max_bytes))
            for p in PARTS}


def _same(a: Record, b: Record) -> bool:
    return (a.value, a.key, a.tag, a.timestamp, a.headers) == (
        b.value, b.key, b.tag, b.timestamp, b.headers)


def check_recovery(root: Path, written: dict[int, list[Record]],
                   expect: dict[int, int] | None = None, case: str = "",
                   lost: dict[int, set[int]] | None = None) -> dict[int, int]:
    """Reopen a damaged store and check the prefix / append / reopen contract; returns counts.

    ``expect`` (partition -> number of records that must survive) makes the check exact;
    ``lost`` (partition -> offsets) names offsets kept as holes: readers skip them.
    """
    extra = {p: [Record(b"after-%d-%d" % (p, i), tag="new", timestamp=7) for i in range(3)]
             for p in PARTS}
    lost = lost or {}
    counts = {}
    with Store(root, TOPIC, STORE_ID, PARTS, CFG) as s:
        for p, (earliest, latest, recs) in _snapshot(s, max_bytes=1500).items():
            assert earliest == 0, f"{case}: p{p} earliest {earliest}"
            assert latest <= len(written[p]), f"{case}: p{p} {latest} {len(recs)}"
            assert [r.offset for r in recs] == _kept(latest, lost.get(p)), f"{case}: p{p} offsets"
            bad = [r.offset for r in recs if not _same(r, written[p][r.offset])]
            assert not bad, f"{case}: p{p} differs from what was written at offsets {bad[:5]}"
            counts[p] = latest
        if expect is not None:
            assert counts == expect, f"{case}: recovered {counts}, expected {expect}"
        for p in PARTS:  # appends continue at latest, dense, and read back at once
            assert s.append(p, encode_batch(extra[p])) == (counts[p], counts[p] + 2), case
            got = read_all(s, p, counts[p])
            assert [r.value for r in got] == [r.value for r in extra[p]], case
    with Store(root, TOPIC, STORE_ID, PARTS, CFG) as s:  # a second open agrees with the first
        again = _snapshot(s)
    for p in PARTS:
        earliest, latest, recs = again[p]
        assert (earliest, latest) == (0, counts[p] + 3), f"{case}: p{p} after reopen"
        assert [r.offset for r in recs] == _kept(latest, lost.get(p)), f"{case}: p{p} offsets"
        everything_then = written[p][:counts[p]] + extra[p]
        assert all(_same(r, everything_then[r.offset]) for r in recs), f"{case}: p{p} content"
    return counts


def _kept(latest: int, lost: set[int] | None) -> list[int]:
    return [o for o in range(latest) if not lost or o not in lost]


def surviving(golden: Golden, keep) -> dict[int, int]:
    """Records per partition in the chunks for which ``keep(chunk)`` is true (a prefix of them)."""
    counts = {p: 0 for p in PARTS}
    alive = True
    for c in golden.chunks:
        alive = alive and keep(c)
        if alive:
            assert c.base_offset == counts[c.partition]
            counts[c.partition] += c.count
    return counts


def everything(golden: Golden) -> dict[int, int]:
    return {p: len(r) for p, r in golden.written.items()}


# ----------------------------------------------------------------------- data log tails


def _cut_points(golden: Golden, rng: random.Random) -> list[int]:
    """Byte positions in the last data segment: chunk and frame boundaries, inside chunk
    headers and frames, plus seeded random ones."""
    last = len(data_segments(golden.root)) - 1
    chunks = [c for c in golden.chunks if c.seg == last]
    size = chunks[-1].end
    points = {0, 1, size - 1, size}
    for c in chunks[-4:]:
        points |= {c.start, c.start + 1, c.start + CHUNK.size - 1, c.start + CHUNK.size, c.end - 1}
    for f in chunks[-1].frame_starts[-2:] + chunks[-2].frame_starts[:2]:
        points |= {f, f + 3, f + 31}  # a frame boundary inside a chunk, in a frame header
    points |= {rng.randrange(size + 1) for _ in range(12)}
    return sorted(p for p in points if 0 <= p <= size)


@pytest.mark.parametrize("name", ["closed", "crashed"])
def test_truncated_last_data_segment_recovers_to_the_last_whole_chunk(goldens, tmp_path, name):
    golden = goldens[name]
    last = len(data_segments(golden.root)) - 1
    points = _cut_points(golden, random.Random(7))
    assert len(points) > 25
    for i, cut in enumerate(points):
        root = copy_of(golden, tmp_path, f"c{i}")
        os.truncate(data_segments(root)[last], cut)
        expect = surviving(golden, lambda c, cut=cut: c.seg < last or c.end <= cut)
        check_recovery(root, golden.written, expect, f"{name} cut at {cut}")
        shutil.rmtree(root)


def test_cut_at_a_chunk_boundary_loses_nothing_before_it(goldens, tmp_path):
    golden = goldens["crashed"]
    last = len(data_segments(golden.root)) - 1
    tail = [c for c in golden.chunks if c.seg == last]
    for i, c in enumerate(tail[-3:]):
        root = copy_of(golden, tmp_path, f"b{i}")
        os.truncate(data_segments(root)[last], c.start)
        before = surviving(golden, lambda x, c=c: (x.seg, x.start) < (c.seg, c.start))
        got = check_recovery(root, golden.written, before, f"boundary {c.start}")
        assert sum(got.values()) == sum(before.values()) > 0
        shutil.rmtree(root)


def test_truncating_the_whole_tail_segment_keeps_older_segments(goldens, tmp_path):
    golden = goldens["crashed"]
    root = copy_of(golden, tmp_path, "r")
    last = data_segments(root)[-1]
    os.truncate(last, 0)
    n = len(data_segments(root)) - 1
    check_recovery(root, golden.written, surviving(golden, lambda c: c.seg < n), "empty tail")


@pytest.mark.parametrize("name", ["closed", "crashed"])
def test_garbage_after_the_data_log_is_cut(goldens, tmp_path, name):
    golden = goldens[name]
    rng = random.Random(11)
    for i in range(8):
        root = copy_of(golden, tmp_path, f"g{i}")
        junk = rng.randbytes(rng.randint(1, 400))
        if i == 0:  # garbage that starts like a chunk header but fails its crc
            junk = CHUNK.pack(CHUNK_MAGIC, 0, 1, 10**6, 100, 0, 12345) + junk
        with open(data_segments(root)[-1], "ab") as f:
            f.write(junk)
        check_recovery(root, golden.written, everything(golden), f"{name} garbage {i}")
        shutil.rmtree(root)


def test_chunk_with_a_forged_header_crc_but_torn_frames_is_cut(goldens, tmp_path):
    golden = goldens["closed"]
    root = copy_of(golden, tmp_path, "f")
    frame = b"\x00" * 40  # frame length 0: impossible
    head = CHUNK.pack(CHUNK_MAGIC, 1, 1, len(golden.written[1]), len(frame), 0, 0)[:-4]
    with open(data_segments(root)[-1], "ab") as f:
        f.write(head + struct.pack("<I", zlib.crc32(head)) + frame)
    check_recovery(root, golden.written, everything(golden), "forged header")


def _after_checkpoint(golden: Golden, name: str) -> list[Chunk]:
    """The chunks recovery scans: after the checkpoint, or all of them without one."""
    sizes = [s.stat().st_size for s in data_segments(golden.root)]
    since = golden.checkpoint_end if name == "crashed" else 0
    return [c for c in golden.chunks if sum(sizes[:c.seg]) + c.start >= since]


def _flip(root: Path, golden: Golden, name: str, c: Chunk, at: int, bit: int) -> None:
    if name != "crashed":
        (store_dir(root) / CHECKPOINT).unlink()
    path = data_segments(root)[c.seg]
    raw = bytearray(path.read_bytes())
    raw[at] ^= 1 << bit
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("name", ["crashed", "closed-no-checkpoint"])
def test_flipped_bytes_in_the_last_chunk_cut_it(goldens, tmp_path, name):
    golden = goldens[name.split("-")[0]]
    rng = random.Random(5)
    c = _after_checkpoint(golden, name)[-1]
    for i in range(6):
        root = copy_of(golden, tmp_path, f"x{i}")
        at = c.start + 2 if i == 0 else c.frame_starts[-1] + 1 if i == 1 else \
            rng.randrange(c.start, c.end)
        _flip(root, golden, name, c, at, rng.randrange(8))
        expect = surviving(golden, lambda x: (x.seg, x.start) < (c.seg, c.start))
        check_recovery(root, golden.written, expect, f"{name} flip at {c.seg}:{at}")
        shutil.rmtree(root)


@pytest.mark.parametrize("name", ["crashed", "closed-no-checkpoint"])
def test_a_damaged_chunk_before_the_tail_costs_only_its_own_records(goldens, tmp_path, name):
    """Regression: a bad chunk used to cut the data log with every later chunk of every
    partition (acknowledged records of other producers lost, their offsets reused)."""
    golden = goldens[name.split("-")[0]]
    rng = random.Random(9)
    scanned = _after_checkpoint(golden, name)
    targets = [scanned[-2], scanned[-5], scanned[0], scanned[len(scanned) // 2]]
    for i, c in enumerate(targets * 2):
        root = copy_of(golden, tmp_path, f"m{i}")
        at = c.start + 2 if i == 0 else c.frame_starts[-1] + 1 if i == 1 else \
            rng.randrange(c.start, c.end)
        _flip(root, golden, name, c, at, rng.randrange(8))
        expect = everything(golden)
        later_of_same = any(x.partition == c.partition and x.base_offset > c.base_offset
                            for x in golden.chunks)
        if at < c.start + CHUNK.size and not later_of_same:
            expect[c.partition] = c.base_offset  # nothing says how many offsets it held
            lost = {}
        else:
            lost = {c.partition: set(range(c.base_offset, c.base_offset + c.count))}
        check_recovery(root, golden.written, expect, f"{name} flip at {c.seg}:{at}", lost)
        shutil.rmtree(root)


@pytest.mark.xfail(strict=True, raises=CorruptRecord,
                   reason="recovery scans only after the checkpoint and reads do not re-check "
                   "frame CRCs: a flip inside checkpointed data is served")
def test_flipped_byte_inside_checkpointed_data_is_not_served(goldens, tmp_path):
    golden = goldens["closed"]
    root = copy_of(golden, tmp_path, "rot")
    c = golden.chunks[-1]
    path = data_segments(root)[c.seg]
    raw = bytearray(path.read_bytes())
    raw[c.frame_starts[-1] + 12] ^= 0x10
    path.write_bytes(bytes(raw))
    with Store(root, TOPIC, STORE_ID, PARTS, CFG) as s:
        read_all(s, c.partition)  # decode_frames raises CorruptRecord on the bad frame


# ------------------------------------------------------------------------------ indexes


@pytest.mark.parametrize("name", ["closed", "crashed"])
def test_truncated_index_files_are_rebuilt_from_the_data_log(goldens, tmp_path, name):
    golden = goldens[name]
    rng = random.Random(3)
    for i in range(20):
        root = copy_of(golden, tmp_path, f"i{i}")
        damaged = []
        for p in rng.sample(PARTS, rng.randint(1, len(PARTS))):
            segs = index_segments(root, p)
            # mostly the last segment (a torn write), sometimes an older one (external damage)
            seg = segs[-1] if rng.random() < 0.6 else rng.choice(segs)
            size = seg.stat().st_size
            cut = rng.choice([0, size - 1, size - ENTRY, (size // ENTRY // 2) * ENTRY + 5,
                              rng.randrange(size + 1)])
            os.truncate(seg, max(0, cut))
            damaged.append(f"{seg.parent.name}/{seg.name}@{cut}")
        check_recovery(root, golden.written, everything(golden), f"{name} {damaged}")
        shutil.rmtree(root)


@pytest.mark.parametrize("name", ["closed", "crashed"])
def test_garbage_after_index_files_is_dropped(goldens, tmp_path, name):
    golden = goldens[name]
    rng = random.Random(4)
    for i in range(12):
        root = copy_of(golden, tmp_path, f"j{i}")
        for p in rng.sample(PARTS, 2):
            seg = index_segments(root, p)[-1]
            if i % 3 == 0:  # plausible entries: ordered positions inside the data log
                junk = seg.read_bytes()[-ENTRY:] * 3
            else:
                junk = rng.randbytes(rng.choice([ENTRY, 3 * ENTRY, rng.randint(1, 200)]))
            with open(seg, "ab") as f:
                f.write(junk)
        if i % 2:
            with open(data_segments(root)[-1], "ab") as f:
                f.write(rng.randbytes(rng.randint(1, 100)))
        check_recovery(root, golden.written, everything(golden), f"{name} index garbage {i}")
        shutil.rmtree(root)


def test_garbage_after_an_older_index_segment_is_dropped(goldens, tmp_path):
    golden = goldens["closed"]
    root = copy_of(golden, tmp_path, "old")
    seg = index_segments(root, 0)[1]
    with open(seg, "ab") as f:
        f.write(seg.read_bytes()[:2 * ENTRY] + b"\x01\x02\x03")
    check_recovery(root, golden.written, everything(golden), "garbage in an older index")


def test_deleted_index_files_are_rebuilt(goldens, tmp_path):
    golden = goldens["crashed"]
    for i, which in enumerate([-1, 1, -2]):
        root = copy_of(golden, tmp_path, f"d{i}")
        for p in PARTS[:-1]:
            index_segments(root, p)[which].unlink()
        check_recovery(root, golden.written, everything(golden), f"deleted idx {which}")
        shutil.rmtree(root)
    root = copy_of(golden, tmp_path, "all")
    shutil.rmtree(store_dir(root) / "p1")
    check_recovery(root, golden.written, everything(golden), "deleted p1 dir")


# --------------------------------------------------------------------------- checkpoint


@pytest.mark.parametrize("name", ["closed", "crashed"])
def test_missing_or_corrupt_checkpoint_means_a_full_scan(goldens, tmp_path, name):
    golden = goldens[name]
    cp_path = store_dir(golden.root) / CHECKPOINT
    good = json.loads(cp_path.read_bytes())
    body = json.loads(good["body"])
    lying = Checkpoint(10**9, {int(p): n for p, n in body["next"].items()}).dump()
    too_far = Checkpoint(body["position"], {p: 10**6 for p in PARTS}).dump()
    variants = {
        "deleted": None,
        "empty": b"",
        "truncated": cp_path.read_bytes()[:25],
        "random": random.Random(9).randbytes(64),
        "bad crc": json.dumps({"crc": good["crc"] ^ 1, "body": good["body"]}).encode(),
        "not an object": b"[1, 2, 3]",
        "wrong types": json.dumps({"crc": zlib.crc32(b'{"position": "x", "next": 3}'),
                                   "body": '{"position": "x", "next": 3}'}).encode(),
        "position past the end": lying,
        "offsets past the index": too_far,
    }
    for i, (label, content) in enumerate(variants.items()):
        root = copy_of(golden, tmp_path, f"k{i}")
        path = store_dir(root) / CHECKPOINT
        if content is None:
            path.unlink()
        else:
            path.write_bytes(content)
        check_recovery(root, golden.written, everything(golden), f"{name} checkpoint {label}")
        shutil.rmtree(root)


def test_no_checkpoint_and_torn_data_and_index_tails_together(goldens, tmp_path):
    golden = goldens["crashed"]
    rng = random.Random(21)
    last = len(data_segments(golden.root)) - 1
    size = data_segments(golden.root)[-1].stat().st_size
    for i in range(12):
        root = copy_of(golden, tmp_path, f"m{i}")
        cut = rng.randrange(size + 1)
        os.truncate(data_segments(root)[-1], cut)
        for p in rng.sample(PARTS, 2):
            seg = index_segments(root, p)[-1]
            os.truncate(seg, rng.randrange(seg.stat().st_size + 1))
        if i % 2:
            (store_dir(root) / CHECKPOINT).unlink()
        if i % 3 == 0:
            with open(data_segments(root)[-1], "ab") as f:
                f.write(rng.randbytes(50))
        expect = surviving(golden, lambda c, cut=cut: c.seg < last or c.end <= cut)
        check_recovery(root, golden.written, expect, f"combo {i} cut {cut}")
        shutil.rmtree(root)


# ------------------------------------------------------------------- missing data segments


@pytest.mark.parametrize("name", ["closed", "crashed"])
def test_missing_middle_data_segment_does_not_crash_the_open(goldens, tmp_path, name):
    golden = goldens[name]
    n = len(data_segments(golden.root))
    for gone in range(1, n - 1):
        root = copy_of(golden, tmp_path, f"q{gone}")
        data_segments(root)[gone].unlink()
        # Everything after the gap is set aside (renamed *.bad), the rest is a clean prefix.
        expect = surviving(golden, lambda c, gone=gone: c.seg < gone)
        check_recovery(root, golden.written, expect, f"{name} without segment {gone}")
        assert len(list((store_dir(root) / "data").glob("*.log.bad"))) == n - 1 - gone
        shutil.rmtree(root)


def test_garbage_after_a_middle_data_segment_sets_the_rest_aside(goldens, tmp_path):
    golden = goldens["closed"]
    root = copy_of(golden, tmp_path, "mid")
    with open(data_segments(root)[1], "ab") as f:
        f.write(b"\x00" * 100)
    check_recovery(root, golden.written, surviving(golden, lambda c: c.seg <= 1), "mid garbage")


def test_missing_first_data_segment_moves_earliest_up(goldens, tmp_path):
    golden = goldens["crashed"]
    root = copy_of(golden, tmp_path, "first")
    data_segments(root)[0].unlink()
    gone = surviving(golden, lambda c: c.seg < 1)
    with Store(root, TOPIC, STORE_ID, PARTS, CFG) as s:
        for p in PARTS:
            assert (s.earliest(p), s.latest(p)) == (gone[p], len(golden.written[p]))
            recs = read_all(s, p)
            assert [r.value for r in recs] == [r.value for r in golden.written[p][gone[p]:]]
        decode_frames(s.read(0, s.earliest(0)).frames)
