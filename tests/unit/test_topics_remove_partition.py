"""TopicManager removes the copies the master no longer places on this broker (reassignment),
on a temp dir: a partition leaving the picture, the store it leaves empty, a copy placed here
again, copies removed while the broker was down; a topic merely missing keeps its data."""
from __future__ import annotations

from pathlib import Path

import pytest

from broker.topics import TopicManager, TopicSpec
from lib.errors import PartitionNotHosted
from storage.checkpoints import entry_key
from storage.config import StoreConfig
from tests.helpers import batch_of, read_all

SMALL = StoreConfig(cache_flush_interval_ms=10)
SPEC = {"t": TopicSpec(partitions=4, stores=2, topic_id=1)}  # store 0: p0, p2; store 1: p1, p3


@pytest.fixture
def tm(tmp_path):
    m = TopicManager(tmp_path, SMALL)
    yield m
    m.close()


def placed(*partitions: int) -> list[tuple[str, int]]:
    return [("t", p) for p in partitions]


def index_dir(root: Path, partition: int) -> Path:
    return root / "topics" / "t" / str(partition % 2) / f"p{partition}"


def fill(tm: TopicManager, partitions: list[int], prefix: bytes = b"v") -> None:
    for p in partitions:
        tm.replica_store("t", p).append(p, batch_of([prefix + b"%d" % p]))


def values(tm: TopicManager, partition: int) -> list[bytes]:
    return [r.value for r in read_all(tm.replica_store("t", partition), partition)]


def test_a_partition_leaving_the_picture_has_its_copy_removed(tm, tmp_path):
    tm.apply(SPEC, placed(0, 1, 2, 3))
    fill(tm, [0, 1, 2, 3])
    assert tm.removed_partitions() == []
    tm.apply(SPEC, placed(0, 1, 3))  # p2 moved to another broker
    assert tm.removed_partitions() == [("t", 2)]
    assert tm.hosted("t") == [0, 1, 3]
    assert not index_dir(tmp_path, 2).exists()
    with pytest.raises(PartitionNotHosted):
        tm.replica_store("t", 2)
    assert tm.replica_store("t", 0).partitions == [0]
    assert [values(tm, p) for p in (0, 1, 3)] == [[b"v0"], [b"v1"], [b"v3"]]
    tm.apply(SPEC, placed(0, 1, 3))
    assert tm.removed_partitions() == []  # removed once


def test_a_store_goes_with_its_last_partition(tm, tmp_path):
    tm.apply(SPEC, placed(0, 1, 3))
    fill(tm, [0, 1, 3])
    store1 = tm.replica_store("t", 1)
    tm.apply(SPEC, placed(0))
    assert sorted(tm.removed_partitions()) == [("t", 1), ("t", 3)]
    assert store1.closed and not (tmp_path / "topics" / "t" / "1").exists()
    assert tm.checkpoints.get(entry_key("t", 1, 1)) is None
    assert values(tm, 0) == [b"v0"]
    tm.apply(SPEC, placed())  # the topic stays in the picture, nothing of it here
    assert not (tmp_path / "topics" / "t" / "0").exists()
    assert tm.hosted("t") == []


@pytest.mark.parametrize("stay", [[0], []], ids=["store_kept", "store_deleted"])
def test_a_partition_placed_here_again_starts_empty(tmp_path, stay):
    tm = TopicManager(tmp_path, SMALL)
    tm.apply(SPEC, placed(*stay, 2))
    fill(tm, [*stay, 2], b"old")
    tm.apply(SPEC, placed(*stay))
    tm.apply(SPEC, placed(*stay, 2))
    assert tm.replica_store("t", 2).latest(2) == 0
    fill(tm, [2], b"new")
    assert values(tm, 2) == [b"new2"]
    tm.close()
    tm = TopicManager(tmp_path, SMALL)  # a restart: recovery brings back no old record
    tm.apply(SPEC, placed(*stay, 2))
    assert values(tm, 2) == [b"new2"]
    assert [values(tm, p) for p in stay] == [[b"old0"] for _ in stay]
    tm.close()


def test_copies_removed_while_the_broker_was_down_are_removed_on_open(tmp_path):
    tm = TopicManager(tmp_path, SMALL)
    tm.apply(SPEC, placed(0, 1, 2, 3))
    fill(tm, [0, 1, 2, 3])
    tm.close()
    tm = TopicManager(tmp_path, SMALL)
    tm.apply(SPEC, placed(0, 1))  # p2 and p3 went elsewhere meanwhile
    assert sorted(tm.removed_partitions()) == [("t", 2), ("t", 3)]
    assert not index_dir(tmp_path, 2).exists() and not index_dir(tmp_path, 3).exists()
    assert [values(tm, p) for p in (0, 1)] == [[b"v0"], [b"v1"]]
    tm.apply(SPEC, placed(0, 1, 2))
    assert tm.replica_store("t", 2).latest(2) == 0
    tm.close()


def test_a_topic_missing_from_the_picture_keeps_every_copy(tmp_path):
    tm = TopicManager(tmp_path, SMALL)
    tm.apply(SPEC, placed(0, 1))
    fill(tm, [0, 1])
    tm.apply({}, [])
    assert tm.removed_partitions() == []
    assert index_dir(tmp_path, 0).exists() and index_dir(tmp_path, 1).exists()
    tm.apply(SPEC, placed(0, 1))
    assert [values(tm, p) for p in (0, 1)] == [[b"v0"], [b"v1"]]
    tm.close()
