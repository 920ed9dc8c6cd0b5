"""The data log drops its synced pages from the OS page cache behind a window
(StoreConfig.page_cache_window_bytes), so that new writes reuse pages instead of filling fresh
ones; what is dropped still reads back from disk."""
from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from lib.config import ConfigError, build
from storage.config import StoreConfig
from storage.datalog import DataLog
from storage.direct import pread_direct
from storage.store import Store
from tests.helpers import batch_of, read_all
from tests.page_cache import PAGE, resident

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="mincore(2) is Linux's")
KiB, MiB = 1 << 10, 1 << 20


def written_log(tmp_path: Path) -> tuple[DataLog, Path]:
    log = DataLog(tmp_path / "data", segment_bytes=4 * MiB)
    for _ in range(8):  # two segments of 4 MiB
        log.write(memoryview(os.urandom(MiB)))
    log.sync()
    (first, second) = sorted((tmp_path / "data").iterdir())
    if resident(first, 0, 4 * MiB) == 0:
        pytest.skip("this filesystem keeps no page cache for written files")
    return log, first


def direct_read_works(log: DataLog) -> bool:
    with log._list.segs[0].use() as fd:
        return pread_direct(fd, 1, 0) is not None


def test_drop_cached_lets_go_of_pages_below_the_mark_only(tmp_path):
    log, first = written_log(tmp_path)
    second = sorted((tmp_path / "data").iterdir())[1]
    try:
        log.drop_cached(6 * MiB)  # the first segment whole, half of the second
        assert resident(first, 0, 4 * MiB) == 0
        assert resident(second, 0, 2 * MiB) == 0
        assert resident(second, 2 * MiB, 4 * MiB) == 2 * MiB // PAGE
        # What is dropped reads back from disk, around the page cache (storage/direct.py):
        # the read leaves none of it cached (where the filesystem allows O_DIRECT).
        got = log.read(5, 64 * KiB)
        assert resident(first, 0, 64 * KiB) == 0 or not direct_read_works(log)
        with open(first, "rb") as f:
            assert got == f.read(64 * KiB + 5)[5:]
    finally:
        log.close()


def test_a_store_keeps_only_its_window_cached_and_reads_everything_back(tmp_path):
    cfg = StoreConfig(cache_block_bytes=MiB, max_batch_bytes=512 * KiB, segment_bytes=64 * MiB,
                      fsync_every_bytes=MiB, page_cache_window_bytes=2 * MiB)
    store = Store(tmp_path, "t", 0, [0], cfg)
    try:
        values = [os.urandom(KiB) for _ in range(8 * KiB)]  # 8 MiB of values
        for i in range(0, len(values), 256):
            store.append(0, batch_of(values[i:i + 256]))
        store.flush()
        store.append(0, batch_of([b"last"]))  # one more fsync: the window moves past 6 MiB
        store.flush()
        (segment,) = (tmp_path / "t" / "0" / "data").glob("*.log")
        end = segment.stat().st_size
        assert resident(segment, 0, 4 * MiB) == 0, "synced bytes behind the window stay cached"
        assert resident(segment, end - MiB, end) > 0, "the window itself was dropped"
        assert [r.value for r in read_all(store, 0)] == values + [b"last"]
    finally:
        store.close()


def test_zero_turns_the_window_off_and_a_negative_one_is_refused(tmp_path):
    assert build(StoreConfig, {"page_cache_window_bytes": 0}).page_cache_window_bytes == 0
    with pytest.raises(ConfigError, match="page_cache_window_bytes"):
        build(StoreConfig, {"page_cache_window_bytes": -1})
    cfg = replace(StoreConfig(), page_cache_window_bytes=0)
    store = Store(tmp_path, "t", 0, [0], replace(cfg, fsync_every_bytes=MiB))
    try:
        for _ in range(4):
            store.append(0, batch_of([os.urandom(KiB) for _ in range(512)]))
        store.flush()
        (segment,) = (tmp_path / "t" / "0" / "data").glob("*.log")
        if resident(segment, 0, MiB) == 0:
            pytest.skip("this filesystem keeps no page cache for written files")
        assert resident(segment, 0, MiB) == MiB // PAGE
    finally:
        store.close()
