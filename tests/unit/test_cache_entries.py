"""A cache block's index entries (storage/cache.py): one-record appends (send_sync) add a row
from a tuple, batches add an array; both kinds mixed, past the initial capacity, read back in
order."""
from __future__ import annotations

import numpy as np

from storage.cache import CacheBlock
from storage.index import INDEX_DTYPE, index_entries


def test_single_entries_and_batches_mix_and_grow_past_the_first_capacity():
    block = CacheBlock(0, 1 << 20, 0.0)
    want = []
    for i in range(1500):
        if i % 100 == 99:  # now and then a batch of three
            batch = np.array([(10 * i + k, 30 + k, k, 1000 + i) for k in range(3)], INDEX_DTYPE)
            block.add(0, 0, b"", memoryview(b""), batch)
            want += [tuple(int(v) for v in row) for row in batch]
        else:
            block.add(0, 0, b"", memoryview(b""), (10 * i, 30, 7, 1000 + i))
            want.append((10 * i, 30, 7, 1000 + i))
    first, entries = block.entries(0)
    assert first == 0 and block.messages == len(want) == len(entries)
    assert [tuple(int(v) for v in row) for row in entries] == want


def test_a_one_record_batch_gives_the_same_entry_as_the_array_path():
    class View:  # a checked batch's columns, as parse_batch gives them
        count = 1
        sizes = np.array([54], np.uint32)
        tag_hashes = np.array([9], np.uint32)
        timestamps = np.array([1_700_000_000_000], np.int64)

    block = CacheBlock(0, 1 << 16, 0.0)
    block.add(0, 5, b"", memoryview(b""), index_entries(View, 4096))
    _, entries = block.entries(0)
    assert entries.dtype == INDEX_DTYPE
    assert [tuple(int(v) for v in row) for row in entries] == [(4096, 54, 9, 1_700_000_000_000)]
