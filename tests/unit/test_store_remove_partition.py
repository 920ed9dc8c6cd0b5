"""Store.remove_partition and the origin of a partition's copy, on real files.

A broker that stops holding a copy of a partition (reassignment) removes it from the store;
placed there again later, the partition must start empty, although the old copy's chunks are
still in the data log the store's partitions share (storage/removal.py).

A store is reopened three ways (``reopened``): ``clean`` (closed, then opened), ``crash`` (the
directory copied while the store is open, after a flush: the checkpoint is whatever the last
close or removal saved) and ``full_scan`` (closed, checkpoint deleted: recovery rebuilds
every index from the whole data log).
"""
from __future__ import annotations

import shutil
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest

from lib.errors import StoreClosed, UnknownPartition
from storage.recovery import CHECKPOINT, read_checkpoint
from storage.removal import ORIGIN, read_origin
from storage.store import Store
from tests.helpers import SMALL_STORE, batch_of, read_all, values

CFG = SMALL_STORE  # 4 KiB cache blocks, 8 KiB data segments, 16 entries per index segment
TOPIC, STORE_ID, PARTS = "moves", 0, [0, 1, 2]
MODES = ["clean", "crash", "full_scan"]


def open_store(root: Path, parts: list[int] = PARTS) -> Store:
    return Store(root, TOPIC, STORE_ID, parts, CFG)


def store_dir(root: Path) -> Path:
    return root / TOPIC / str(STORE_ID)


def fill(store: Store, partition: int, prefix: str, batches: int) -> list[bytes]:
    """Append ``batches`` batches of five ~100-byte values; returns the values."""
    out = []
    for i in range(batches):
        vals = [v + b"." * 90 for v in values(f"{prefix}{i}", 5)]
        store.append(partition, batch_of(vals))
        out += vals
    return out


def contents(store: Store, partition: int) -> list[bytes]:
    return [r.value for r in read_all(store, partition)]


@pytest.fixture
def root(tmp_path) -> Path:
    return tmp_path / "root"


def leftovers(root: Path, partition: int) -> list[str]:
    """Every entry of the store dir named after the partition's index dir."""
    return sorted(d.name for d in store_dir(root).glob(f"p{partition}*"))


@contextmanager
def reopened(store: Store, root: Path, mode: str, parts: list[int] = PARTS):
    """Close (or crash) ``store`` as ``mode`` says (module docstring), yield it reopened."""
    target = root
    if mode == "crash":
        store.flush()
        target = root.with_name("crashed")
        shutil.copytree(root, target)  # what a killed process leaves behind
    store.close()
    if mode == "full_scan":
        (store_dir(root) / CHECKPOINT).unlink()
    with open_store(target, parts) as s:
        yield s


def test_a_removed_partition_is_unknown_and_its_dir_is_gone(root):
    s = open_store(root)
    fill(s, 1, "old", 20)  # several blocks in the files, the last one still cached
    assert s.stats()["partitions"][1]["flushed"] < s.latest(1)
    s.remove_partition(1)
    assert s.partitions == [0, 2]
    assert leftovers(root, 1) == []
    calls = [lambda: s.append(1, batch_of([b"x"])), lambda: s.read(1, 0),
             lambda: s.latest(1), lambda: s.earliest(1), lambda: s.truncate(1, 0),
             lambda: s.reset(1, 500), lambda: s.leader_epochs(1), lambda: s.disk_bytes(1)]
    for call in calls:
        with pytest.raises(UnknownPartition, match=r"partition 1 of moves is not in store 0 "
                                                   r"\(hosts \[0, 2\]\)"):
            call()
    s.close()


def test_the_flusher_writes_blocks_that_held_a_removed_partitions_records(root):
    """The removed partition's index entries leave the cache blocks, its bytes stay in them:
    the flusher writes them and never touches the deleted index (no failure, no KeyError)."""
    s = open_store(root)
    fill(s, 1, "old", 3)  # cached only
    kept = {p: fill(s, p, f"k{p}", 3) for p in (0, 2)}
    s.remove_partition(1)
    kept[0] += fill(s, 0, "more", 20)  # fills blocks: the flusher writes several
    s.flush()  # raises the flusher's failure, if it had one
    assert contents(s, 0) == kept[0] and contents(s, 2) == kept[2]
    s.close()
    with open_store(root, [0, 2]) as r:
        assert contents(r, 0) == kept[0] and contents(r, 2) == kept[2]


def test_removing_a_partition_not_hosted_changes_nothing(root):
    s = open_store(root)
    data = fill(s, 0, "a", 3)
    s.remove_partition(1)
    s.remove_partition(1)  # again: done already
    s.remove_partition(9)  # never hosted
    assert s.partitions == [0, 2] and contents(s, 0) == data
    s.close()
    with pytest.raises(StoreClosed):
        s.remove_partition(0)


def test_the_checkpoint_forgets_a_removed_partition(root):
    s = open_store(root)
    for p in PARTS:
        fill(s, p, "a", 2)
    s.close()
    s = open_store(root)
    assert set(read_checkpoint(store_dir(root)).next_offsets) == {0, 1, 2}
    s.remove_partition(1)
    assert set(read_checkpoint(store_dir(root)).next_offsets) == {0, 2}
    s.close()
    assert set(read_checkpoint(store_dir(root)).next_offsets) == {0, 2}


@pytest.mark.parametrize("mode", MODES)
def test_a_removed_partition_stays_gone_after_reopen_and_the_others_are_intact(root, mode):
    s = open_store(root)
    written = {p: fill(s, p, f"p{p}-", 12) for p in PARTS}
    s.remove_partition(1)
    written[2] += fill(s, 2, "after", 3)
    with reopened(s, root, mode, [0, 2]) as r:
        assert r.partitions == [0, 2]
        assert contents(r, 0) == written[0] and contents(r, 2) == written[2]
    target = root.with_name("crashed") if mode == "crash" else root
    (store_dir(target) / CHECKPOINT).unlink()  # a full scan meets every chunk of the old copy
    with open_store(target) as r:
        assert (r.earliest(1), r.latest(1)) == (0, 0)  # opened with it: a new, empty copy
        assert contents(r, 0) == written[0] and contents(r, 2) == written[2]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("restart", "batches"), [(0, 4), (1000, 4), (0, 0)],
                         ids=["from_0", "reset_to_1000", "no_records_yet"])
@pytest.mark.parametrize("old_batches", [30, 2], ids=["old_in_files", "old_in_cache"])
def test_a_partition_added_again_holds_only_its_new_records(root, mode, restart, batches,
                                                           old_batches):
    """Reassignment away and back: the new copy starts at offset 0 (or where a follower
    resets it, the leader's log starting later), and neither a reopen from the checkpoint
    nor a full scan of the data log brings back a record of the old copy, also while the
    new copy has none yet (no chunk of it follows the old ones in the log)."""
    s = open_store(root)
    written = {p: fill(s, p, f"p{p}-", 6) for p in (0, 2)}
    fill(s, 1, "old", old_batches)  # in files over several segments, or only cached
    s.remove_partition(1)
    s.add_partition(1)
    assert (s.earliest(1), s.latest(1), contents(s, 1)) == (0, 0, [])
    if restart:
        s.reset(1, restart)
    new = fill(s, 1, "new", batches)
    assert [r.offset for r in read_all(s, 1)] == list(range(restart, restart + len(new)))
    written[0] += fill(s, 0, "late", 2)
    with reopened(s, root, mode) as r:
        assert (r.earliest(1), r.latest(1)) == (restart, restart + len(new))
        assert contents(r, 1) == new
        assert contents(r, 0) == written[0] and contents(r, 2) == written[2]


def test_removal_races_appends_to_another_partition_and_reads_of_its_own(root):
    """Appends to another partition go on throughout; a reader of the removed partition gets
    its whole old contents or UnknownPartition, never a failure or another file's data."""
    s = open_store(root)
    old = fill(s, 1, "old", 20)
    stop, started = threading.Event(), threading.Barrier(3)
    appended: list[bytes] = []
    seen: list[object] = []

    def append_to_0() -> None:
        started.wait()
        i = 0
        while not stop.is_set() or i < 200:
            s.append(0, batch_of([b"w%d" % i + b"." * 200]))
            appended.append(b"w%d" % i + b"." * 200)
            i += 1

    def read_1() -> None:
        started.wait()
        while True:
            try:
                got = contents(s, 1)
            except UnknownPartition:
                return
            except Exception as exc:  # noqa: BLE001 - the type is the assertion
                seen.append(exc)
                return
            if got != old:
                seen.append(got[:3])

    threads = [threading.Thread(target=f) for f in (append_to_0, read_1)]
    for t in threads:
        t.start()
    started.wait()
    s.remove_partition(1)
    stop.set()
    for t in threads:
        t.join()
    assert seen == []
    s.flush()
    assert contents(s, 0) == appended
    s.close()
    with open_store(root, [0, 2]) as r:
        assert contents(r, 0) == appended


def test_a_dir_left_by_a_crash_mid_removal_is_harmless_or_swept(root):
    s = open_store(root)
    data = fill(s, 0, "a", 3)
    fill(s, 1, "b", 3)
    s.close()
    d = store_dir(root)
    (d / "p1.removed.x7").mkdir()  # set aside, not deleted yet
    (d / "p1.removed.x7" / ORIGIN).write_bytes(b"0\n")
    (d / "p5.new").mkdir()  # created half
    with open_store(root, [0, 2]) as r:  # p1 itself not removed yet: a dangling dir
        assert contents(r, 0) == data
    assert leftovers(root, 1) == ["p1"] and not (d / "p5.new").exists()


def test_a_copy_added_in_a_cache_tail_a_crash_lost_keeps_its_later_records(root):
    """add_partition puts the origin at the cache's end; a crash that loses the cached tail
    leaves it past the data log's end, and the reopen moves it back there: the appends that
    follow land at the end and a full scan must still find them."""
    s = Store(root, TOPIC, STORE_ID, [0], CFG)
    fill(s, 0, "synced", 2)
    s.flush()
    fill(s, 0, "cached", 2)  # lost in the crash
    s.add_partition(1)
    crashed = root.with_name("crashed")
    shutil.copytree(root, crashed)
    s.close()
    data_end = sum(f.stat().st_size for f in (store_dir(crashed) / "data").glob("*.log"))
    assert read_origin(store_dir(crashed) / "p1") > data_end
    with open_store(crashed, [0, 1]) as r:
        new = fill(r, 1, "new", 3)
    (store_dir(crashed) / CHECKPOINT).unlink()
    with open_store(crashed, [0, 1]) as r:
        assert contents(r, 1) == new


def test_an_index_dir_without_an_origin_file_keeps_its_records(root):
    """Dirs written before origins existed have none: origin 0, nothing is ignored."""
    s = open_store(root)
    written = {p: fill(s, p, f"p{p}", 5) for p in PARTS}
    s.close()
    for p in PARTS:
        (store_dir(root) / f"p{p}" / ORIGIN).unlink()
    (store_dir(root) / CHECKPOINT).unlink()
    with open_store(root) as r:
        assert {p: contents(r, p) for p in PARTS} == written
