"""Cache block memory (storage/cache.py): a block of a store taking bursts is a mapping of its
own in small pages, given back when the block goes; a busy store's block is a plain allocation
(memory the process reuses)."""
from __future__ import annotations

import gc
import sys
from pathlib import Path

import numpy as np
import pytest

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


def fill(pair: CachePair, nbytes: int) -> None:
    """Put ``nbytes`` into the active block as if appended (the block's own bookkeeping)."""
    block = pair.active
    block.buf[block.fill:block.fill + nbytes] = 1
    block.fill += nbytes


def test_a_store_taking_bursts_gets_small_pages_and_a_busy_one_reused_memory():
    pair = CachePair(0, 8 * MiB, clock=lambda: 0.0)
    assert "nh" in vm_flags(pair.active.buf)  # nothing known yet: small pages
    # private: a shared anonymous mapping faults its pages in through shmem, dearer
    assert "sh" not in vm_flags(pair.active.buf)
    fill(pair, 500 * 1024)  # a burst, then the block is written by age
    pair.swap()
    pair.flushed()
    assert "nh" in vm_flags(pair.active.buf)
    fill(pair, 6 * MiB)  # a busy store fills its block
    pair.swap()
    assert "nh" not in (vm_flags(pair.active.buf) or set())


def test_a_written_block_gives_its_memory_back_once_no_reader_holds_it():
    pair = CachePair(0, 8 * MiB, clock=lambda: 0.0)
    fill(pair, MiB)
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
