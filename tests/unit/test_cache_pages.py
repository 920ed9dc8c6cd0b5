"""Cache block memory (storage/cache.py): a block of a store taking bursts is a mapping in small
pages, taken at its first append and kept for the next burst once nothing refers to it (or
given back); a busy store's block is a plain allocation (memory the process reuses)."""
from __future__ import annotations

import gc
import sys
from pathlib import Path

import numpy as np
import pytest

from storage import cache
from storage.cache import CachePair

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not Path("/sys/kernel/mm/transparent_hugepage").exists(),
    reason="reads /proc/self/smaps; page advice needs a kernel with transparent huge pages")
MiB = 1 << 20


def vm_flags(buf: np.ndarray) -> set[str] | None:
    """The kernel's VmFlags of the mapping holding ``buf`` (None: no such mapping)."""
    address = buf.ctypes.data
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "VmFlags:":
                return set(line.split()[1:])
    return None


def fill(pair: CachePair, nbytes: int, byte: int = 1) -> None:
    """Append one chunk of ``nbytes`` bytes of ``byte`` to the active block."""
    block = pair.active
    block.add(0, 0, b"", memoryview(bytes([byte]) * nbytes), (block.end_pos, nbytes, 0, 0))


@pytest.fixture(autouse=True)
def no_spares():
    """Each test starts with no spare mappings (other tests' blocks may have left some)."""
    cache._spares.clear()
    yield
    cache._spares.clear()


def test_a_store_taking_bursts_gets_small_pages_and_a_busy_one_reused_memory():
    pair = CachePair(0, 8 * MiB, clock=lambda: 0.0)
    assert pair.active.buf is None  # an idle store holds no buffer
    fill(pair, 1024)
    assert "nh" in vm_flags(pair.active.buf)  # nothing known yet: small pages
    # private: a shared anonymous mapping faults its pages in through shmem, dearer
    assert "sh" not in vm_flags(pair.active.buf)
    fill(pair, 500 * 1024)  # a burst, then the block is written by age
    pair.swap()
    pair.flushed()
    fill(pair, 1024)
    assert "nh" in vm_flags(pair.active.buf)
    fill(pair, 6 * MiB)  # a busy store fills its block
    pair.swap()
    assert "nh" not in (vm_flags(pair.active.buf) or set())


def test_a_written_block_gives_its_memory_back_once_no_reader_holds_it():
    pair = CachePair(0, 8 * MiB, clock=lambda: 0.0)
    fill(pair, 2 * MiB)  # past what is kept for reuse
    view = pair.active.slice(0, 16)  # a reader's zero-copy view keeps the block's bytes
    address = pair.active.buf.ctypes.data
    pair.swap()
    pair.flushed()
    gc.collect()
    assert bytes(view) == b"\x01" * 16
    del view
    gc.collect()
    assert all(not (lo <= address < hi) for lo, hi in mappings())


def mappings() -> list[tuple[int, int]]:
    with open("/proc/self/maps") as f:
        return [tuple(int(x, 16) for x in line.split()[0].split("-")) for line in f]


def test_a_written_bursty_block_lends_its_mapping_to_the_next_burst():
    pair = CachePair(0, 8 * MiB, clock=lambda: 0.0)
    fill(pair, 200 * 1024)
    address = pair.active.buf.ctypes.data
    pair.swap()
    pair.flushed()  # nothing refers to the written block now
    assert cache.spare_mappings() == 1
    fill(pair, 200 * 1024, byte=2)
    assert pair.active.buf.ctypes.data == address  # no mmap, no page faults
    assert cache.spare_mappings() == 0
    assert bytes(pair.active.data()) == b"\x02" * (200 * 1024)


def test_a_readers_view_keeps_its_bytes_while_later_bursts_come():
    pair = CachePair(0, 8 * MiB, clock=lambda: 0.0)
    fill(pair, 4096, byte=7)
    views = [pair.active.slice(0, 16),  # a numpy slice under a memoryview
             memoryview(pair.active.data())[100:200]]  # a slice of a memoryview
    blocks = [pair.active]
    pair.swap()
    pair.flushed()
    held = pair.active  # (the next block)
    del blocks
    assert cache.spare_mappings() == 0  # the views still refer to the written mapping
    for byte in (8, 9, 10):  # more bursts, each block written and dropped
        fill(pair, 4096, byte=byte)
        pair.swap()
        pair.flushed()
    assert bytes(views[0]) == b"\x07" * 16 and bytes(views[1]) == b"\x07" * 100
    assert held is not None


def test_spare_mappings_are_bounded():
    blocks = []
    for _ in range(cache.SPARE_MAPPINGS + 5):
        pair = CachePair(0, 8 * MiB, clock=lambda: 0.0)
        fill(pair, 4096)
        blocks.append(pair)
    del pair
    blocks.clear()  # every block goes at once, none referred to
    assert cache.spare_mappings() == cache.SPARE_MAPPINGS
