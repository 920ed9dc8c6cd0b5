"""Idempotent producers' windows kept with the data (storage/producers.py), on real files: a
retry that straddles a reopen, clean or after a crash, is answered with its original offsets
and stored once, whatever the snapshot and the checkpoint say."""
from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path

import pytest

from lib.errors import OutOfOrderSequence, ProducerFenced
from lib.records import Record, encode_batch
from storage.datalog import ProducerFields
from storage.producers import SNAPSHOT
from storage.recovery import CHECKPOINT
from storage.store import Store
from tests.helpers import SMALL_STORE, batch_of, read_all, values

TOPIC, PARTS = "idem", [0, 1]
PID = 42


def open_store(root: Path, **overrides) -> Store:
    return Store(root, TOPIC, 0, PARTS, dataclasses.replace(SMALL_STORE, **overrides))


def store_dir(root: Path) -> Path:
    return root / TOPIC / "0"


def batch(seq: int, n: int, epoch: int = 0, pid: int = PID) -> bytes:
    return encode_batch([Record(b"v%d" % (seq + i) + b"." * 90, timestamp=1) for i in range(n)],
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def crash_copy(store: Store, root: Path, target: Path) -> Path:
    """What a killed process leaves: the files as they are after a flush, no close."""
    store.flush()
    shutil.copytree(root, target)
    store.close()
    return target


def test_a_retry_is_answered_with_the_stored_offsets_and_appends_nothing(tmp_path):
    with open_store(tmp_path) as s:
        assert s.append_batch(0, batch(0, 3)) == (0, 2, True)
        assert s.append_batch(0, batch(3, 2)) == (3, 4, True)
        assert s.append_batch(0, batch(0, 3)) == (0, 2, False)
        assert s.append(0, batch(3, 2)) == (3, 4)
        assert s.latest(0) == 5
        with pytest.raises(OutOfOrderSequence):
            s.append(0, batch(9, 1))
        assert s.append(0, batch(0, 1, epoch=1)) == (5, 5)  # a new session of the id
        with pytest.raises(ProducerFenced):
            s.append(0, batch(5, 1))  # the old session's epoch
        assert s.latest(0) == 6
        plain = batch_of(values("plain", 2))
        assert s.append(1, plain) == (0, 1) and s.append(1, plain) == (2, 3), \
            "a batch without a producer is appended as it comes"


@pytest.mark.parametrize("mode", ["clean", "crash_first", "crash_later", "no_checkpoint"])
def test_retries_across_a_reopen_get_their_original_offsets(tmp_path, mode):
    root = tmp_path / "root"
    s = open_store(root)
    s.append(0, batch(0, 3))
    s.append(1, batch(0, 2, pid=7))
    if mode == "crash_later":  # a clean close first (snapshot and checkpoint), then more
        s.close()
        s = open_store(root)
    s.append(0, batch(3, 4))
    if mode == "clean" or mode == "no_checkpoint":
        s.close()
        if mode == "no_checkpoint":
            (store_dir(root) / CHECKPOINT).unlink()
    else:
        root = crash_copy(s, root, tmp_path / "crashed")
    with open_store(root) as s:
        assert s.append_batch(0, batch(3, 4)) == (3, 6, False)
        assert s.append_batch(0, batch(0, 3)) == (0, 2, False)
        assert s.append_batch(1, batch(0, 2, pid=7)) == (0, 1, False)
        assert s.append_batch(0, batch(7, 1)) == (7, 7, True)
        assert (s.latest(0), s.latest(1)) == (8, 2)


def test_a_snapshot_older_than_the_checkpoint_is_caught_up_from_the_data_log(tmp_path):
    """The checkpoint moves every interval, the snapshot far more rarely: recovery scans from
    the snapshot, or the batches between the two would be appended again."""
    root = tmp_path / "root"
    with open_store(root) as s:
        s.append(0, batch(0, 2))  # the close writes a snapshot and a checkpoint at the end
    snapshot_before = (store_dir(root) / SNAPSHOT).read_bytes()
    s = open_store(root, checkpoint_interval_ms=10, producer_snapshot_interval_ms=10**9)
    s.append(0, batch(2, 3))
    s.flush()
    checkpoint = store_dir(root) / CHECKPOINT
    first = checkpoint.read_bytes()
    deadline = time.monotonic() + 60
    while checkpoint.read_bytes() == first:  # the flusher checkpoints past the new batch
        assert time.monotonic() < deadline, "no checkpoint was written in 60 s"
        s.append(1, batch_of(values("tick", 1)))
        s.flush()
        time.sleep(0.02)
    assert (store_dir(root) / SNAPSHOT).read_bytes() == snapshot_before
    root = crash_copy(s, root, tmp_path / "crashed")
    with open_store(root) as s:
        assert s.append_batch(0, batch(2, 3)) == (2, 4, False)


def test_a_damaged_snapshot_is_rebuilt_from_the_whole_data_log(tmp_path):
    with open_store(tmp_path) as s:
        s.append(0, batch(0, 2))
        s.append(0, batch(2, 2))
    (store_dir(tmp_path) / SNAPSHOT).write_bytes(b"\0" * 7)
    with open_store(tmp_path) as s:
        assert s.append_batch(0, batch(2, 2)) == (2, 3, False)


def test_a_truncation_forgets_the_batches_it_cut_also_after_a_reopen(tmp_path):
    with open_store(tmp_path) as s:
        s.append(0, batch(0, 2))
        s.append(0, batch(2, 2))
        s.truncate(0, 2)
        assert s.append_batch(0, batch(2, 2)) == (2, 3, True), "stored again after the cut"
        s.truncate(0, 2)
    with open_store(tmp_path) as s:
        assert s.latest(0) == 2
        assert s.append_batch(0, batch(2, 2)) == (2, 3, True)


def test_a_copied_batch_keeps_its_producer_in_the_follower_files(tmp_path):
    """A follower appends the leader's batch at its offsets with the producer's fields
    (broker/replica_fetcher.py): its own files rebuild the window after a crash."""
    root = tmp_path / "root"
    s = open_store(root)
    view = s.parse(batch_of(values("copied", 3)))
    s.append(0, view, at=0, leader_epoch=2, producer=ProducerFields(PID, 0, 0))
    root = crash_copy(s, root, tmp_path / "crashed")
    with open_store(root) as s:
        assert [(b.producer_id, b.base_sequence, b.count) for b in
                s.producers.batches(0, -1, 1 << 60)] == [(PID, 0, 3)]
        assert s.append_batch(0, batch(0, 3)) == (0, 2, False)
        assert [r.value for r in read_all(s, 0)] == values("copied", 3)
