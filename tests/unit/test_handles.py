"""Open segment files within a cap (storage/handles.py): stores of many topics keep at most
``capacity`` idle descriptors (files used in turn past it still mostly hit), what was evicted
reads and writes back on reopen, a pinned descriptor is never closed under its reader, and a
dropped segment stays readable through its kept descriptor until the graveyard empties."""
from __future__ import annotations

import os

import pytest

from storage import handles as handles_module
from storage.config import StoreConfig
from storage.handles import LEAST, Handles, Segment
from storage.store import Store
from tests.helpers import batch_of, read_all, values

SMALL = StoreConfig(cache_block_bytes=1 << 16, max_batch_bytes=1 << 15, max_message_bytes=1 << 14,
                    segment_bytes=1 << 16, cache_flush_interval_ms=10)


@pytest.fixture
def capped(monkeypatch):
    """The process's handles replaced by a fresh set at the least capacity."""
    h = Handles(LEAST)
    monkeypatch.setattr(handles_module, "_handles", h)
    return h


def fds_open() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs Linux /proc")
def test_four_hundred_topics_stay_within_the_cap_and_lose_nothing(tmp_path, capped):
    before = fds_open()
    stores = [Store(tmp_path, f"t{i:03d}", 0, [0], SMALL) for i in range(400)]
    try:
        for round_ in range(2):  # the second round reopens what the first evicted
            for i, s in enumerate(stores):
                s.append(0, batch_of(values(f"r{round_}-s{i}", 3)))
            for s in stores:
                s.flush()
            assert capped.open <= LEAST, capped.stats()
            assert fds_open() - before <= LEAST + 16
        assert capped.opened > 800, "800 files (a data log and an index each), reopened"
        for i in (0, 199, 399):
            got = [r.value for r in read_all(stores[i], 0)]
            assert got == values(f"r0-s{i}", 3) + values(f"r1-s{i}", 3)
    finally:
        for s in stores:
            s.close()
    assert capped.open == 0, "closing the stores closes every descriptor"
    with Store(tmp_path, "t123", 0, [0], SMALL) as s:  # and the files are whole on disk
        assert [r.value for r in read_all(s, 0)] == values("r0-s123", 3) + values("r1-s123", 3)


def test_files_used_in_turn_past_the_cap_keep_most_of_the_cap_open(tmp_path, capped):
    """Flushers visit the stores of many topics in turn: with the least recently used closed
    first, every use past the cap reopened its file (no hits at all); closing the one just
    used keeps a fixed set open across rounds."""
    segs = []
    for i in range(LEAST * 3 // 2):
        path = tmp_path / f"c{i}"
        path.write_bytes(b"%05d" % i)
        segs.append(Segment(0, path, 5))
    rounds = 4
    for _ in range(rounds):
        for i, seg in enumerate(segs):
            with seg.use() as fd:
                assert os.pread(fd, 5, 0) == b"%05d" % i
    assert capped.open <= LEAST
    reopened = capped.opened - len(segs)  # the first round opens every file
    uses_after = (rounds - 1) * len(segs)
    assert reopened <= uses_after - (rounds - 1) * (LEAST - 2), capped.stats()
    for seg in segs:
        capped.close(seg)
    assert capped.open == 0


def test_a_pinned_descriptor_is_never_closed_under_its_reader(tmp_path, capped):
    paths = []
    for i in range(LEAST + 50):
        path = tmp_path / f"f{i}"
        path.write_bytes(b"x%d" % i)
        paths.append(path)
    segs = [Segment(0, p, 1) for p in paths]
    held = segs[0].pin()
    for seg in segs[1:]:  # every other one used once: the cap evicts idle ones only
        with seg.use() as fd:
            assert os.pread(fd, 1, 0) == b"x"
    assert os.pread(held, 8, 0) == b"x0", "the pinned one is still open, on its own file"
    segs[0].unpin()
    assert capped.open <= LEAST
    for seg in segs:
        capped.close(seg)
    assert capped.open == 0


def test_a_kept_segment_outlives_its_file_and_the_cap(tmp_path, capped):
    path = tmp_path / "doomed"
    path.write_bytes(b"still here")
    seg = Segment(0, path, 10)
    capped.keep(seg)  # as a drop does, before the unlink
    path.unlink()
    others = []
    for i in range(LEAST + 10):  # pressure: a kept descriptor is not idle
        other = tmp_path / f"o{i}"
        other.write_bytes(b"o")
        others.append(Segment(0, other, 1))
        with others[-1].use():
            pass
    with seg.use() as fd:
        assert os.pread(fd, 10, 0) == b"still here"
    for other in [seg, *others]:
        capped.close(other)
    assert capped.open == 0
    with pytest.raises(Exception, match="cannot open segment"):
        seg.pin()
    assert seg.pins == 0 and capped.stats()["open"] == 0, "a failed open undoes its pin"


def test_threads_reopening_past_the_cap_keep_the_count_true(tmp_path, capped):
    """Opens and closes run outside the lock (so a thread waiting for the GIL does not hold
    every other one up): racing threads still never lose a descriptor, never read one
    closed under them, and the count matches the descriptors really open."""
    import threading

    segs = []
    for i in range(LEAST * 2):
        path = tmp_path / f"s{i}"
        path.write_bytes(b"%05d" % i)
        segs.append(Segment(0, path, 5))
    before = fds_open()
    errors: list[str] = []

    def worker(offset: int) -> None:
        for n in range(1000):
            i = (offset + n * 7) % len(segs)
            with segs[i].use() as fd:
                got = os.pread(fd, 5, 0)
                if got != b"%05d" % i:
                    errors.append(f"segment {i} read {got!r}")

    threads = [threading.Thread(target=worker, args=(k * 13,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]
    assert capped.open <= LEAST, capped.stats()
    assert fds_open() - before == capped.open, "every counted descriptor is open, no more"
    for seg in segs:
        capped.close(seg)
    assert capped.open == 0 and fds_open() == before
