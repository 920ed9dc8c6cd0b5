"""Index reads racing a truncation (storage/index.py): a reader that meets a cut gets
OffsetOutOfRange, never a short or negative read; an index file shorter than its entry count
without a cut is corrupt. The races that tests/unit/test_store_replication.py's readers hit at
random under load, made to happen."""
from __future__ import annotations

import os

import numpy as np
import pytest

from lib.errors import CorruptRecord, OffsetOutOfRange
from storage import index as index_module
from storage.index import ENTRY, INDEX_DTYPE, IndexLog


def _index_with(tmp_path, n: int) -> IndexLog:
    log = IndexLog(tmp_path / "p0", max_entries=1000)
    entries = np.zeros(n, INDEX_DTYPE)
    entries["pos"] = np.arange(n) * 10
    entries["size"] = 10
    log.append(entries)
    return log


def test_an_index_read_cut_short_by_a_truncation_is_out_of_range(tmp_path, monkeypatch):
    """The pread of a reader comes back short because a truncation cut the file under it."""
    log = _index_with(tmp_path, 50)
    real = os.pread

    def cut_first(fd, size, at):
        monkeypatch.setattr(index_module.os, "pread", real)
        log.truncate(5, keep_fds=True)
        return real(fd, size, at)

    monkeypatch.setattr(index_module.os, "pread", cut_first)
    with pytest.raises(OffsetOutOfRange, match="truncated away while being read"):
        log.read(0, 40)
    assert len(log.read(0, 5)) == 5
    log.close()


def test_an_index_read_over_segments_a_truncation_dropped_is_out_of_range(tmp_path,
                                                                          monkeypatch):
    """The reader took the segment list, then a cut shortened the segment it starts in and
    dropped the next ones: it met the next one's base with offsets still below it (a pread
    at a negative position failed with EINVAL, found under load)."""
    log = _index_with(tmp_path, 2500)  # segments at 0, 1000, 2000
    real = index_module.bisect.bisect_right

    def cut_first(bases, first):
        log.truncate(700, keep_fds=True)
        return real(bases, first)

    monkeypatch.setattr(index_module, "bisect", type("B", (), {"bisect_right": cut_first}))
    with pytest.raises(OffsetOutOfRange, match="truncated away while being read"):
        log.read(500, 1500)
    monkeypatch.undo()
    assert len(log.read(500, 700)) == 200 and log.end == 700
    log.close()


def test_an_index_file_shorter_than_its_count_without_a_cut_is_corrupt(tmp_path):
    log = _index_with(tmp_path, 50)
    seg = log._list.segs[-1]
    os.truncate(seg.path, 20 * ENTRY)  # damage behind the store's back
    with pytest.raises(CorruptRecord, match="shorter than its entry count"):
        log.read(0, 40)
    log.close()
