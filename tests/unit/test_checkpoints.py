"""The shared checkpoint file of a broker's stores (storage/checkpoints.py) and its use by
TopicManager: coalesced writes, incarnations kept apart, damaged files, old per-store files."""
from __future__ import annotations

import json
import logging
import zlib

from broker.topics import TopicManager, TopicSpec
from storage.checkpoints import CHECKPOINTS, CheckpointFile, entry_key, load
from storage.config import StoreConfig
from storage.recovery import CHECKPOINT, Checkpoint
from storage.store import Store
from tests.helpers import batch_of, read_all

SMALL = StoreConfig(cache_flush_interval_ms=10, checkpoint_interval_ms=10)


def test_many_puts_in_one_interval_make_at_most_two_writes_and_reload_whole(tmp_path):
    path = tmp_path / CHECKPOINTS
    cps = CheckpointFile(path, interval_s=30.0)
    for i in range(50):
        cps.put(entry_key("t", 1, i % 5), Checkpoint(i * 100, {i % 5: i}))
    cps.close()
    assert 1 <= cps.writes <= 2  # the first put's write, then everything else at close
    again = load(path)
    assert again == {entry_key("t", 1, s): Checkpoint((45 + s) * 100, {s: 45 + s})
                     for s in range(5)}


def test_an_idle_file_is_never_written(tmp_path):
    cps = CheckpointFile(tmp_path / CHECKPOINTS, interval_s=0.01)
    cps.close()
    assert cps.writes == 0 and not (tmp_path / CHECKPOINTS).exists()


def test_dropping_a_topic_forgets_only_that_incarnation(tmp_path):
    cps = CheckpointFile(tmp_path / CHECKPOINTS, interval_s=0.01)
    for key in ("t#1/0", "t#1/1", "t#2/0", "tt#1/0"):
        cps.put(key, Checkpoint(1, {0: 1}))
    cps.drop_topic("t", 1)
    cps.close()
    assert sorted(load(tmp_path / CHECKPOINTS)) == ["t#2/0", "tt#1/0"]


def test_a_damaged_or_foreign_file_counts_as_no_checkpoints(tmp_path, caplog):
    path = tmp_path / CHECKPOINTS
    cps = CheckpointFile(path, interval_s=0.01)
    cps.put("t#1/0", Checkpoint(7, {0: 3}))
    cps.close()
    good = path.read_bytes()
    assert load(path) == {"t#1/0": Checkpoint(7, {0: 3})}
    path.write_bytes(good.replace(b'"position":7', b'"position":8'))
    with caplog.at_level(logging.WARNING):
        assert load(path) == {}
    assert "store.checkpoints_unreadable" in caplog.text
    body = good.split(b"\n", 1)[1].replace(b'"version":2', b'"version":99')
    path.write_bytes(b"%08x\n" % zlib.crc32(body) + body)
    assert load(path) == {}
    # a version 1 file (a sealed JSON string), as an older broker wrote it, is still read
    old = json.dumps({"version": 1, "stores": {"t#1/0": {"position": 7, "next": {"0": 3}}}})
    path.write_text(json.dumps({"crc": zlib.crc32(old.encode()), "body": old}))
    assert load(path) == {"t#1/0": Checkpoint(7, {0: 3})}
    path.write_bytes(b"\x00" * 10)
    assert load(path) == {}


def test_a_broker_keeps_one_checkpoint_file_and_no_file_per_store(tmp_path):
    tm = TopicManager(tmp_path, SMALL)
    tm.apply({f"t{i}": TopicSpec(partitions=2, stores=2, topic_id=i) for i in range(3)},
             [(f"t{i}", p) for i in range(3) for p in range(2)])
    for i in range(3):
        tm.store_for(f"t{i}", 1).append(1, batch_of([b"a", b"b"]))
    tm.close()
    entries = load(tmp_path / CHECKPOINTS)
    assert entries[entry_key("t2", 2, 1)].next_offsets == {1: 2}
    assert entries[entry_key("t2", 2, 0)].next_offsets == {0: 0}
    assert len(entries) == 6
    assert not list((tmp_path / "topics").rglob(CHECKPOINT))
    tm = TopicManager(tmp_path, SMALL)
    try:
        tm.apply({"t2": TopicSpec(partitions=2, stores=2, topic_id=2)}, [("t2", 1)])
        assert [r.value for r in read_all(tm.store_for("t2", 1), 1)] == [b"a", b"b"]
    finally:
        tm.close()


def test_a_recreated_topic_never_meets_its_predecessors_checkpoint(tmp_path):
    tm = TopicManager(tmp_path, SMALL)
    try:
        tm.apply({"t": TopicSpec(partitions=1, topic_id=1)}, [("t", 0)])
        tm.store_for("t", 0).append(0, batch_of([b"old"] * 5))
        tm.apply({"t": TopicSpec(partitions=1, topic_id=2)}, [("t", 0)])  # re-created
        assert tm.checkpoints.get(entry_key("t", 1, 0)) is None
        store = tm.store_for("t", 0)
        assert store.latest(0) == 0
        store.append(0, batch_of([b"new"]))
    finally:
        tm.close()
    entries = load(tmp_path / CHECKPOINTS)
    assert list(entries) == [entry_key("t", 2, 0)]
    assert entries[entry_key("t", 2, 0)].next_offsets == {0: 1}


def test_a_store_checkpointed_by_an_older_broker_is_recovered_from_its_own_file(tmp_path):
    """Upgrade: stores written with a checkpoint.json each are read through it until the shared
    file has their entry."""
    root = tmp_path / "topics"
    old = Store(root, "t", 0, [0], SMALL)
    old.append(0, batch_of([b"x", b"y"]))
    old.close()
    own = root / "t" / "0" / CHECKPOINT
    assert own.exists()
    tm = TopicManager(tmp_path, SMALL)
    try:
        slot = tm.checkpoints.slot("t", 1, 0, root / "t" / "0")
        assert slot.read() is not None and slot.read().next_offsets == {0: 2}
        tm.apply({"t": TopicSpec(partitions=1, topic_id=1)}, [("t", 0)])
        assert [r.value for r in read_all(tm.store_for("t", 0), 0)] == [b"x", b"y"]
    finally:
        tm.close()
