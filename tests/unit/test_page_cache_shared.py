"""Stores riding one data dir's syncfs share ``page_cache_shared_bytes``: after each syncfs a
store written in its interval keeps at most its share of its synced pages in the page cache,
and the stores that kept pages longest ago drop all of theirs once the kept bytes exceed the
budget (storage/checkpoints.py), so many small stores recycle pages as one big store does, and
what was dropped still reads back."""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from broker.topics import TopicManager, TopicSpec
from storage.checkpoints import CHECKPOINTS, CheckpointFile, entry_key, load
from storage.config import StoreConfig
from storage.datalog import DataLog
from storage.fsutil import syncfs_available
from tests.helpers import batch_of, read_all, wait_until
from tests.page_cache import PAGE, resident

pytestmark = pytest.mark.skipif(sys.platform != "linux" or not syncfs_available(),
                                reason="mincore(2) and syncfs(2) are Linux's")
KiB, MiB = 1 << 10, 1 << 20
RIDES = StoreConfig(cache_flush_interval_ms=10, checkpoint_interval_ms=50, fsync_interval_ms=50)
TOPICS = [f"t{i}" for i in range(8)]
RECORDS = [bytes([i]) * 3000 for i in range(40)]  # 120 KB a store: 29 whole pages and more


@pytest.fixture(autouse=True)
def page_cache_kept(tmp_path):
    """Skip where the filesystem keeps no page cache for written files (nothing to drop)."""
    probe = tmp_path / "probe"
    probe.write_bytes(bytes(64 * KiB))
    if resident(probe, 0, 64 * KiB) == 0:
        pytest.skip("this filesystem keeps no page cache for written files")
    probe.unlink()


def data_file(root: Path, topic: str) -> Path:
    (path,) = (root / "topics" / topic).rglob("*.log")
    return path


def cached_pages(root: Path, topic: str) -> tuple[int, int]:
    """(cached, whole) pages of the topic's data log, short of its last (partly written)
    page."""
    path = data_file(root, topic)
    end = path.stat().st_size // PAGE * PAGE
    return (resident(path, 0, end) if end > 0 else 0), end // PAGE


def on_disk(root: Path, records: int = len(RECORDS), topics: list[str] = TOPICS) -> bool:
    """Whether the checkpoint file names ``records`` of every store of ``topics``: the
    writer wrote it after a syncfs that covered them (and after asking stores to drop
    pages)."""
    entries = load(root / CHECKPOINTS)
    keys = [entry_key(t, TOPICS.index(t) + 1, 0) for t in topics]
    return all(entries.get(k) is not None and entries[k].next_offsets == {0: records}
               for k in keys)


def write_topics(tmp_path: Path, config: StoreConfig,
                 written: list[str] = TOPICS) -> TopicManager:
    tm = TopicManager(tmp_path, config)
    tm.apply({t: TopicSpec(partitions=1, topic_id=i + 1) for i, t in enumerate(TOPICS)},
             [(t, 0) for t in TOPICS])
    for topic in written:
        tm.store_for(topic, 0).append(0, batch_of(RECORDS))
    return tm


def test_stores_written_together_drop_what_a_syncfs_covered_beyond_their_share(tmp_path):
    tm = write_topics(tmp_path, replace(RIDES, page_cache_shared_bytes=8 * KiB))  # 1-8 KiB each
    try:
        wait_until(lambda: on_disk(tmp_path), "a syncfs that covered every store's records")
        first = {t: data_file(tmp_path, t).stat().st_size // PAGE * PAGE for t in TOPICS}
        # The kernel keeps a folio that the dropped range ends inside: the next range, which
        # starts at the 2 MiB unit the last one ended in, takes it.
        for topic in TOPICS:
            tm.store_for(topic, 0).append(0, batch_of(RECORDS))
        wait_until(lambda: on_disk(tmp_path, 2 * len(RECORDS)), "the second records synced")
        wait_until(lambda: all(resident(data_file(tmp_path, t), 0, first[t]) == 0
                               for t in TOPICS),
                   "the first records' pages dropped by the syncfs after the second")
        for topic in TOPICS:  # read back from disk (storage/direct.py)
            assert [r.value for r in read_all(tm.store_for(topic, 0), 0)] == RECORDS * 2
    finally:
        tm.close()


def test_stores_that_kept_pages_longest_drop_them_all_when_newer_ones_fill_the_budget(
        tmp_path):
    older, newer = TOPICS[:4], TOPICS[4:]  # 4 x 120 KB fit 512 KiB, 8 do not
    tm = write_topics(tmp_path, replace(RIDES, page_cache_shared_bytes=512 * KiB), older)
    try:
        wait_until(lambda: on_disk(tmp_path, topics=older), "the older stores synced")
        assert all(cached == whole > 0 for cached, whole in
                   (cached_pages(tmp_path, t) for t in older)), "within their shares"
        for topic in newer:
            tm.store_for(topic, 0).append(0, batch_of(RECORDS))
        wait_until(lambda: on_disk(tmp_path, topics=newer), "the newer stores synced")
        wait_until(lambda: all(cached_pages(tmp_path, t)[0] == 0 for t in older),
                   "every page of the stores not written since dropped")
        pages = [cached_pages(tmp_path, t) for t in newer]
        assert all(cached == whole > 0 for cached, whole in pages), pages
        for topic in older:  # read back from disk (storage/direct.py)
            assert [r.value for r in read_all(tm.store_for(topic, 0), 0)] == RECORDS
    finally:
        tm.close()


class Holding:
    """A rider keeping ``size`` bytes of its own until told to keep less (what
    CheckpointFile sees of a store's flusher)."""

    def __init__(self, size: int) -> None:
        self.size, self.told = size, []

    def wake(self) -> None:
        pass

    def synced(self, generation: int, keep_bytes: int) -> int:
        self.told.append(keep_bytes)
        self.size = min(self.size, keep_bytes)
        return self.size


def test_the_budget_drops_the_least_recently_synced_first_and_forgets_closed_stores(
        tmp_path):
    cps = CheckpointFile(tmp_path / CHECKPOINTS, interval_s=0.01,
                         page_cache_shared_bytes=300)
    try:
        def ride(rider: Holding) -> None:
            generation = cps.ride(rider)
            wait_until(lambda: cps.synced(generation) and rider.told, "its syncfs")
        old, closed, young, newest = Holding(100), Holding(100), Holding(100), Holding(150)
        for rider in (old, closed, young):
            ride(rider)
        cps.leave(closed)  # its store closed: never counted, never told again
        ride(newest)  # 350 with old, 250 without
        assert old.told[-1] == 0 and old.size == 0, "kept its pages longest ago"
        assert young.told == [300] and young.size == 100, "still within the budget"
        assert closed.told == [300] and newest.size == 150
    finally:
        cps.close()


@pytest.mark.parametrize("shared", [256 * MiB, 0], ids=["a 32 MiB share each", "off"])
def test_a_share_larger_than_what_was_written_or_none_keeps_every_page(tmp_path, shared):
    tm = write_topics(tmp_path, replace(RIDES, page_cache_shared_bytes=shared))
    try:
        wait_until(lambda: on_disk(tmp_path), "a checkpoint file written after the syncfs "
                   "that covered every store's records (the drops come before it)")
        pages = [cached_pages(tmp_path, t) for t in TOPICS]
        assert all(cached == whole > 0 for cached, whole in pages), pages
    finally:
        tm.close()


def test_dropping_whole_pages_keeps_the_newest_bytes_and_a_later_range_the_rest(tmp_path):
    log = DataLog(tmp_path / "data", segment_bytes=64 * MiB)
    log.write(memoryview(bytes(3 * MiB + 100)))
    log.sync()
    (path,) = (tmp_path / "data").iterdir()
    log.drop_cached(log.end - 10 * KiB, whole=False)
    # Below the 2 MiB unit the range ended in, every page went (a folio never crosses one);
    # inside it the kernel may keep a large folio the range ends in.
    assert resident(path, 0, 2 * MiB) == 0
    newest = (log.end - 10 * KiB) // PAGE * PAGE + PAGE
    assert resident(path, newest, 3 * MiB) == (3 * MiB - newest) // PAGE, "the newest stay"
    log.write(memoryview(bytes(MiB)))
    log.sync()
    log.drop_cached(log.end, whole=False)  # starts again at 2 MiB: takes what was kept
    assert resident(path, 0, 4 * MiB) == 0
    log.close()
