"""Async stores' time-based fsync rides the broker's syncfs (storage/checkpoints.py): the
writer syncs the data dir within its interval even when no checkpoint changed, a store's
written data counts as synced once a later syncfs ended (and its checkpoint may name it), a
failing syncfs sends every rider back to its own fdatasync, and a store whose fsync interval
is shorter than the writer's never rides."""
from __future__ import annotations

import os
import time

import pytest

from broker.topics import TopicManager, TopicSpec
from storage import checkpoints as checkpoints_module
from storage.checkpoints import CHECKPOINTS, CheckpointFile, entry_key, load
from storage.config import StoreConfig
from storage.fsutil import syncfs_available
from tests.helpers import batch_of, read_all, values, wait_until

pytestmark = pytest.mark.skipif(not syncfs_available(), reason="needs Linux syncfs")
RIDES = StoreConfig(cache_flush_interval_ms=10, checkpoint_interval_ms=50, fsync_interval_ms=50)


class Woken:
    def __init__(self) -> None:
        self.times = 0

    def wake(self) -> None:
        self.times += 1


@pytest.fixture
def data_fsyncs(monkeypatch) -> list[str]:
    """The data-log segments (``.log``) fdatasynced from now on, by path."""
    seen: list[str] = []
    real = os.fdatasync

    def counting(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path.endswith(".log"):
            seen.append(path)
        real(fd)
    monkeypatch.setattr(os, "fdatasync", counting)
    return seen


def test_a_ride_gets_a_syncfs_within_the_interval_and_no_file_write(tmp_path):
    cps = CheckpointFile(tmp_path / CHECKPOINTS, interval_s=0.05)
    try:
        rider = Woken()
        generation = cps.ride(rider)
        assert not cps.synced(generation)
        wait_until(lambda: cps.synced(generation), "a syncfs after the ride")
        assert cps.syncs >= 1 and cps.writes == 0, "a sync only: no checkpoint changed"
        assert rider.times == 0 and not cps.sync_failing
        assert not cps.synced(cps.ride(rider)), "a later write needs a later syncfs"
    finally:
        cps.close()


def test_an_async_store_leaves_its_timed_fsync_to_the_syncfs(tmp_path, data_fsyncs):
    tm = TopicManager(tmp_path, RIDES)
    try:
        tm.apply({"t": TopicSpec(partitions=1, topic_id=1)}, [("t", 0)])
        store = tm.store_for("t", 0)
        store.append(0, batch_of(values("r", 5)))
        syncs = tm.checkpoints.syncs
        key = entry_key("t", 1, 0)

        def named() -> bool:
            cp = tm.checkpoints.get(key)
            return cp is not None and cp.next_offsets == {0: 5}
        wait_until(named, "a checkpoint naming the written records")
        wait_until(lambda: tm.checkpoints.syncs > syncs, "the writer's syncfs")
        time.sleep(0.3)  # several fsync intervals: a store of its own would have fsynced
        assert data_fsyncs == [], "the data log's timed fsync is the writer's syncfs"
        assert load(tmp_path / CHECKPOINTS)[key].next_offsets == {0: 5}
        store.flush()  # a waiter still gets its own fsync (or finds the bytes covered)
        assert [r.value for r in read_all(store, 0)] == values("r", 5)
    finally:
        tm.close()


def test_a_failing_syncfs_sends_the_riders_back_to_their_own_fsync(tmp_path, monkeypatch,
                                                                  data_fsyncs):
    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(checkpoints_module, "syncfs", broken)
    tm = TopicManager(tmp_path, RIDES)
    try:
        tm.apply({"t": TopicSpec(partitions=1, topic_id=1)}, [("t", 0)])
        tm.store_for("t", 0).append(0, batch_of(values("f", 3)))
        wait_until(lambda: tm.checkpoints.sync_failing, "the syncfs failing")
        wait_until(lambda: data_fsyncs, "the store's own fdatasync")
        wait_until(lambda: tm.checkpoints.get(entry_key("t", 1, 0)) is not None,
                   what="the checkpoint handed over")
        assert not (tmp_path / CHECKPOINTS).exists(), "no file claims unsynced data"
    finally:
        tm.close()


def test_a_shorter_fsync_interval_than_the_writers_never_rides(tmp_path, data_fsyncs):
    tight = StoreConfig(cache_flush_interval_ms=10, checkpoint_interval_ms=500,
                        fsync_interval_ms=20)
    tm = TopicManager(tmp_path, tight)
    try:
        tm.apply({"t": TopicSpec(partitions=1, topic_id=1)}, [("t", 0)])
        tm.store_for("t", 0).append(0, batch_of(values("s", 2)))
        wait_until(lambda: data_fsyncs, "the store's own timed fdatasync", 5)
    finally:
        tm.close()
