"""Consumer offsets on LMDB: atomic commits, lookups, deletion, limits, persistence."""
from __future__ import annotations

import pytest

from lib.errors import InvalidArgument, InvalidName, StoreClosed
from storage.offsets import MAX_METADATA_BYTES, OffsetStore


@pytest.fixture
def offsets(tmp_path):
    store = OffsetStore(tmp_path / "offsets", map_size=1 << 24)
    yield store
    store.close()


def test_committed_offsets_are_read_back_per_group_and_topic(offsets):
    offsets.commit("g1", "orders", {0: 10, 1: (20, b"meta"), 7: 3})
    offsets.commit("g2", "orders", {0: 99})
    offsets.commit("g1", "orders-archive", {0: 5})  # a topic whose name extends another
    got = offsets.fetch("g1", "orders")
    assert {p: c.offset for p, c in got.items()} == {0: 10, 1: 20, 7: 3}
    assert got[1].metadata == b"meta" and got[0].commit_time_ms > 0
    assert offsets.fetch("g1", "orders", [1, 2]).keys() == {1}
    assert offsets.fetch("g2", "orders")[0].offset == 99
    assert offsets.groups() == ["g1", "g2"]


def test_later_commit_overwrites(offsets):
    offsets.commit("g", "t", {0: 1})
    offsets.commit("g", "t", {0: 5})
    assert offsets.fetch("g", "t")[0].offset == 5


def test_delete_group_removes_only_that_group(offsets):
    offsets.commit("g", "t", {0: 1, 1: 2})
    offsets.commit("g", "u", {0: 1})
    offsets.commit("h", "t", {0: 1})
    assert offsets.delete("g", "t") == 2
    assert offsets.fetch("g", "t") == {} and offsets.fetch("g", "u")
    assert offsets.delete("g") == 1
    assert offsets.groups() == ["h"]


TOO_MUCH_METADATA = b"x" * (MAX_METADATA_BYTES + 1)


@pytest.mark.parametrize("bad", [{0: -1}, {-1: 0}, {0: "3"}, {0: (1, TOO_MUCH_METADATA)}])
def test_bad_commits_are_refused_whole(offsets, bad):
    with pytest.raises(InvalidArgument):
        offsets.commit("g", "t", {5: 1, **bad})
    assert offsets.fetch("g", "t") == {}


def test_bad_names_are_refused(offsets):
    with pytest.raises(InvalidName):
        offsets.commit("../g", "t", {0: 1})
    with pytest.raises(InvalidName):
        offsets.fetch("g", "a\x00b")


def test_offsets_survive_reopen_and_closed_store_refuses(tmp_path):
    store = OffsetStore(tmp_path / "o", map_size=1 << 24)
    store.commit("g", "t", {3: 42})
    store.close()
    with pytest.raises(StoreClosed):
        store.fetch("g", "t")
    again = OffsetStore(tmp_path / "o", map_size=1 << 24)
    assert again.fetch("g", "t")[3].offset == 42
    again.close()


def test_by_partition_lists_every_groups_offsets_and_no_sink_records(offsets):
    offsets.commit("g1", "t", {0: 5, 1: (7, b"m")})
    offsets.commit("g2", "t", {0: 3})
    offsets.commit("g2", "u", {2: 9})
    offsets.commit_sink("sink", 4, {})
    got = {where: {g: c.offset for g, c in groups.items()}
           for where, groups in offsets.by_partition().items()}
    assert got == {("t", 0): {"g1": 5, "g2": 3}, ("t", 1): {"g1": 7}, ("u", 2): {"g2": 9}}
    assert offsets.by_partition()[("t", 1)]["g1"].metadata == b"m"
