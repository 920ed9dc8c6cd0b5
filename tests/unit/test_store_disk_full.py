"""A Store on a full disk: refuses appends with DiskFull, loses nothing it acknowledged, resumes.

Most tests run on a real 4 MiB tmpfs (skipped, saying why, where mounting is not permitted);
the ones marked ``seam`` inject the failing write into the store's data log instead, so the
retry logic is covered everywhere.
"""
from __future__ import annotations

import errno
import logging
import threading
import time
from dataclasses import replace

import pytest

from lib.errors import DiskFull, StorageError
from storage import flusher as flusher_mod
from storage.config import StoreConfig
from storage.datalog import DataLog
from storage.store import Store
from tests.helpers import batch_of, read_all, values
from tests.tinyfs import fill, tiny_fs, unfill

KiB, MiB = 1 << 10, 1 << 20
# Blocks stay cached until flushed on purpose, so the fill lands between ack and write.
CFG = StoreConfig(cache_block_bytes=512 * KiB, max_batch_bytes=256 * KiB,
                  max_message_bytes=64 * KiB, segment_bytes=MiB, index_segment_entries=4096,
                  cache_flush_interval_ms=60_000, cache_block_messages=10**6,
                  fsync_interval_ms=60_000, disk_reserve_bytes=0)


@pytest.fixture
def fs(tmp_path):
    with tiny_fs(tmp_path / "fs", 4 * MiB) as path:
        yield path


def append_until_accepted(store: Store, partition: int, batch: bytes, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            return store.append(partition, batch)
        except DiskFull:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_store_on_a_full_disk_refuses_appends_keeps_what_it_acknowledged_and_resumes(fs):
    store = Store(fs, "t", 0, [0, 1], CFG)
    acked = {0: [], 1: []}
    for i in range(40):  # ~240 KiB acknowledged, all still in the cache block
        vals = [v + b"x" * 2000 for v in values(f"a{i}", 3)]
        store.append(i % 2, batch_of(vals))
        acked[i % 2] += vals
    fill(fs, leave_bytes=24 * KiB)  # someone else takes the disk: the write is cut short
    with pytest.raises(DiskFull) as err:
        store.flush()
    assert err.value.retriable and "No space left" in err.value.message
    with pytest.raises(DiskFull):
        store.append(0, batch_of([b"refused"]))
    assert store.stats()["disk_full"] and store.space.status().full
    assert store.latest(0) == len(acked[0])  # the refused append took no offset
    assert [r.value for r in read_all(store, 1)] == acked[1]  # still served from memory

    unfill(fs)
    append_until_accepted(store, 0, batch_of([b"after"]))  # no restart needed
    acked[0].append(b"after")
    store.flush()
    assert not store.stats()["disk_full"] and not store.space.status().full
    store.close()

    with Store(fs, "t", 0, [0, 1], CFG) as again:
        for p in (0, 1):
            assert [r.value for r in read_all(again, p)] == acked[p]


def test_the_guard_refuses_an_append_that_would_go_below_the_reserve(fs):
    store = Store(fs, "t", 0, [0], replace(CFG, disk_reserve_bytes=3 * MiB))
    try:
        store.append(0, batch_of([b"x" * 1000]))
        with pytest.raises(DiskFull, match="reserve 3145728 bytes"):
            for _ in range(50):
                store.append(0, batch_of([b"y" * 60_000] * 4))
        assert store.latest(0) >= 1
        store.flush()  # what was admitted is written: the reserve held it
        assert store.space.status().full
    finally:
        store.close()


def test_close_on_a_full_disk_retries_then_logs_exactly_what_it_could_not_write(
        fs, monkeypatch, caplog):
    monkeypatch.setattr(flusher_mod, "DISK_FULL_CLOSE_S", 0.6)
    store = Store(fs, "t", 0, [0, 1], CFG)
    store.append(0, batch_of(values("a", 5)))
    store.flush()  # offsets 0..4 of p0 are in the files
    store.append(0, batch_of(values("b", 3)))
    store.append(1, batch_of(values("c", 2)))
    fill(fs)
    started = time.monotonic()
    with caplog.at_level(logging.ERROR, logger="storage.flusher"):
        store.close()
    assert time.monotonic() - started < 5
    lost = [r for r in caplog.records if r.getMessage() == "store.unwritten_lost"]
    assert len(lost) == 1 and lost[0].fields["offsets"] == {0: [5, 7], 1: [0, 1]}
    unfill(fs)
    with Store(fs, "t", 0, [0, 1], CFG) as again:  # a prefix survives, no hole, no bad frame
        assert [r.value for r in read_all(again, 0)][:5] == values("a", 5)


class FailingWrites:
    """Seam: writes to ``store``'s data log raise ``err`` while ``failing`` is set
    (``DataLog.write`` is patched for the log in the store's ``data`` dir)."""

    def __init__(self, store: Store, err: int, monkeypatch: pytest.MonkeyPatch) -> None:
        self.data_dir, self.real, self.err = store.dir / "data", DataLog.write, err
        self.failing = threading.Event()
        self.calls = 0
        seam = self
        monkeypatch.setattr(DataLog, "write", lambda log, data: seam(log, data))

    def __call__(self, log: DataLog, data) -> None:
        if log.dir == self.data_dir and self.failing.is_set():
            self.calls += 1
            try:
                raise OSError(self.err, errno.errorcode[self.err])
            except OSError as exc:
                raise StorageError(f"data write failed: {exc}") from exc
        self.real(log, data)


@pytest.mark.parametrize("durability", ["async", "sync"])
def test_seam_enospc_is_a_condition_that_clears_when_the_write_succeeds(tmp_path, durability,
                                                                         monkeypatch):
    store = Store(tmp_path, "t", 0, [0], replace(CFG, durability=durability))
    seam = FailingWrites(store, errno.ENOSPC, monkeypatch)
    seam.failing.set()
    outcome: list[object] = []

    def first_append():
        try:
            outcome.append(store.append(0, batch_of(values("a", 4))))
        except DiskFull as exc:
            outcome.append(exc)

    t = threading.Thread(target=first_append)
    t.start()
    if durability == "async":
        t.join()
        assert outcome == [(0, 3)]  # acknowledged from the cache
        with pytest.raises(DiskFull):
            store.flush()
    else:
        t.join(5)
        assert isinstance(outcome[0], DiskFull)  # waiting sync append is told, not left hanging
    with pytest.raises(DiskFull):
        store.append(0, batch_of([b"no"]))
    seam.failing.clear()
    append_until_accepted(store, 0, batch_of(values("b", 2)))
    store.flush()
    assert seam.calls >= 1 and not store.stats()["disk_full"]
    # The cached batch was written once, not twice, whatever the ack said.
    assert [r.value for r in read_all(store, 0)] == values("a", 4) + values("b", 2)
    store.close()


def test_seam_other_io_errors_still_stop_the_store_for_good(tmp_path, monkeypatch):
    store = Store(tmp_path, "t", 0, [0], CFG)
    seam = FailingWrites(store, errno.EIO, monkeypatch)
    seam.failing.set()
    store.append(0, batch_of([b"a"]))
    with pytest.raises(StorageError) as err:
        store.flush()
    assert not isinstance(err.value, DiskFull)
    seam.failing.clear()
    with pytest.raises(StorageError):
        store.append(0, batch_of([b"b"]))
    store.close()
