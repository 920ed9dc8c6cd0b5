"""A broker's stores share one producer-snapshot file, written with the checkpoint file
(storage/shared_snapshots.py, storage/checkpoints.py), and one syncfs in place of their index
fsyncs: a retry straddling a restart or a crash is still answered with its original offsets,
an older broker's per-store files are still read, a damaged shared file costs a full scan and
never a duplicate."""
from __future__ import annotations

import shutil
import time

import pytest

from broker.topics import TopicManager, TopicSpec
from lib.records import Record, encode_batch
from storage import shared_snapshots
from storage.checkpoints import CHECKPOINTS, CheckpointFile, entry_key, load
from storage.config import StoreConfig
from storage.fsutil import syncfs_available
from storage.index import IndexLog
from storage.producers import SNAPSHOT
from storage.shared_snapshots import SNAPSHOTS
from storage.store import Store

SMALL = StoreConfig(cache_flush_interval_ms=10, checkpoint_interval_ms=10)
TOPICS = {f"t{i}": TopicSpec(partitions=1, topic_id=i + 1) for i in range(3)}
PLACED = [(name, 0) for name in TOPICS]


def batch(seq: int, n: int) -> bytes:
    return encode_batch([Record(b"v%d" % (seq + i), timestamp=1) for i in range(n)],
                        producer_id=7, producer_epoch=0, base_sequence=seq)


def fill(tm: TopicManager) -> None:
    for name in TOPICS:
        store = tm.store_for(name, 0)
        assert store.append(0, batch(0, 2)) == (0, 1)
        assert store.append(0, batch(2, 3)) == (2, 4)


def filled_and_closed(root) -> None:
    tm = TopicManager(root, SMALL)
    tm.apply(TOPICS, PLACED)
    fill(tm)
    tm.close()


def retries_after_reopen(root) -> list[tuple[int, int, bool]]:
    """The last batch sent again to every topic of a broker reopened on ``root``: (base,
    last, appended) each; (2, 4, False) is a retry answered with its original offsets."""
    tm = TopicManager(root, SMALL)
    try:
        tm.apply(TOPICS, PLACED)
        return [tm.store_for(name, 0).append_batch(0, batch(2, 3)) for name in TOPICS]
    finally:
        tm.close()


def wait_until(check, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} not within {timeout} s"
        time.sleep(0.02)


def test_a_brokers_stores_keep_one_snapshot_file_and_answer_retries_after_a_restart(tmp_path):
    filled_and_closed(tmp_path)
    assert not list((tmp_path / "topics").rglob(SNAPSHOT)), "no snapshot file per store"
    snapshots = shared_snapshots.load(tmp_path / SNAPSHOTS)
    assert sorted(snapshots) == sorted(entry_key(n, s.topic_id, 0) for n, s in TOPICS.items())
    assert retries_after_reopen(tmp_path) == [(2, 4, False)] * 3


def test_a_crash_after_the_files_name_the_batches_still_answers_retries(tmp_path):
    """What a killed broker leaves once the writer wrote both files: each checkpoint covers
    the producer batches, and the snapshot on disk remembers them."""
    live = tmp_path / "live"
    tm = TopicManager(live, SMALL)
    tm.apply(TOPICS, PLACED)
    fill(tm)
    for name in TOPICS:
        tm.store_for(name, 0).flush()
    keys = [entry_key(n, s.topic_id, 0) for n, s in TOPICS.items()]
    wait_until(lambda: all(load(live / CHECKPOINTS).get(k) is not None
                           and load(live / CHECKPOINTS)[k].next_offsets == {0: 5} for k in keys)
               and sorted(shared_snapshots.load(live / SNAPSHOTS) or {}) == sorted(keys),
               "both files naming every store's batches")
    crashed = tmp_path / "crashed"
    shutil.copytree(live, crashed)
    tm.close()
    assert retries_after_reopen(crashed) == [(2, 4, False)] * 3


def test_a_damaged_shared_file_costs_a_full_scan_never_a_duplicate(tmp_path, caplog):
    filled_and_closed(tmp_path)
    raw = bytearray((tmp_path / SNAPSHOTS).read_bytes())
    raw[-1] ^= 0xFF
    (tmp_path / SNAPSHOTS).write_bytes(bytes(raw))
    assert shared_snapshots.load(tmp_path / SNAPSHOTS) is None
    assert "store.producer_snapshots_unreadable" in caplog.text
    assert retries_after_reopen(tmp_path) == [(2, 4, False)] * 3


def test_a_store_snapshotted_by_an_older_broker_is_read_from_its_own_file(tmp_path):
    root = tmp_path / "topics"
    with Store(root, "t0", 0, [0], SMALL) as old:
        old.append(0, batch(0, 2))
        old.append(0, batch(2, 3))
    assert (root / "t0" / "0" / SNAPSHOT).exists()
    tm = TopicManager(tmp_path, SMALL)
    try:
        tm.apply({"t0": TOPICS["t0"]}, [("t0", 0)])
        assert tm.store_for("t0", 0).append_batch(0, batch(2, 3)) == (2, 4, False)
    finally:
        tm.close()


def test_snapshot_entries_go_with_their_topic(tmp_path):
    cps = CheckpointFile(tmp_path / CHECKPOINTS, interval_s=0.01)
    for key in ("t#1/0", "t#2/0", "u#1/0"):
        cps.put_snapshot(key, b"snapshot of " + key.encode())
    cps.drop_topic("t", 1)
    cps.drop_store("u", 1, 0)
    cps.close()
    assert shared_snapshots.load(tmp_path / SNAPSHOTS) == {"t#2/0": b"snapshot of t#2/0"}


@pytest.mark.skipif(not syncfs_available(), reason="needs Linux syncfs")
def test_with_syncfs_the_stores_leave_their_index_fsyncs_to_the_writer(tmp_path, monkeypatch):
    synced = []
    real_sync = IndexLog.sync
    monkeypatch.setattr(IndexLog, "sync", lambda self: (synced.append(self), real_sync(self)))
    tm = TopicManager(tmp_path / "shared", SMALL)
    tm.apply(TOPICS, PLACED)
    fill(tm)
    tm.close()
    assert not synced, "index fsyncs at checkpoints are the writer's syncfs"
    assert tm.checkpoints.syncs >= 1
    tm = TopicManager(tmp_path / "own", SMALL)
    tm.checkpoints.close()  # a file without syncfs: each store fsyncs its indexes
    tm.dirs.checkpoints = tm.checkpoints = CheckpointFile(tmp_path / "own" / CHECKPOINTS,
                                                          0.01, sync_fs=False)
    tm.apply(TOPICS, PLACED)
    fill(tm)
    tm.close()
    assert synced and tm.checkpoints.syncs == 0
    assert shared_snapshots.load(tmp_path / "own" / SNAPSHOTS), "snapshots shared all the same"
