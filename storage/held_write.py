"""``pwrite`` that keeps the GIL, for the small writes of a flusher.

``os.pwrite`` releases the GIL for the system call and must take it back after. When another
thread runs Python meanwhile (the broker's event loop, busy with produce calls), the writer
waits for that thread's switch interval (5 ms) to get it back: a convoy. A store's flush is
up to three writes (data, index, key log); at 10,000 topics taking a burst each, the two
flushers spent 62 % of their time "in" ``pwrite`` (py-spy), a 3 KiB index write costing a
third of a 200 KiB data write, and produce calls waited for them (docs/benchmarks-history.md,
many topics on 2026-12-02). A write into the page cache of a few KiB takes microseconds:
holding the GIL for it costs the other threads less than the hand-over does. Larger writes
(a store's data block: 200 KiB a burst at 10,000 topics, megabytes for a busy store) still go
through ``os.pwrite`` and let the others run meanwhile: with 64 KiB as the limit 10,000 topics
ran at 200k and 213k msgs/s against 165k and 194k with 256 KiB (data blocks held too), in
2 pairs alternating.

``ctypes.PyDLL`` is what keeps the GIL (``CDLL`` releases it); the buffer's address comes
from numpy, which takes read-only buffers as well.
"""
from __future__ import annotations

import ctypes
import errno
import os

import numpy as np

DEFAULT_HELD_WRITE_BYTES = 64 << 10
# Writes up to this keep the GIL; 0: none does (a broker's ``held_write_bytes``: configure).
held_write_max_bytes = DEFAULT_HELD_WRITE_BYTES

try:
    _libc_pwrite = ctypes.PyDLL(None, use_errno=True).pwrite64  # a 64-bit offset everywhere
    _libc_pwrite.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64]
    _libc_pwrite.restype = ctypes.c_ssize_t
except (OSError, AttributeError):  # pragma: no cover - no libc symbol: os.pwrite only
    _libc_pwrite = None


def configure(max_bytes: int) -> None:
    """Set the process's limit (the broker does, from its config, at start)."""
    global held_write_max_bytes
    held_write_max_bytes = max_bytes


def pwrite(fd: int, data: memoryview, at: int) -> int:
    """``os.pwrite(fd, data, at)``: the bytes written (maybe fewer than asked), OSError on
    failure; small writes keep the GIL (module docstring)."""
    n = len(data)
    if _libc_pwrite is None or n > held_write_max_bytes or n == 0:
        return os.pwrite(fd, data, at)
    address = np.frombuffer(data, np.uint8).ctypes.data
    while True:
        written = _libc_pwrite(fd, address, n, at)
        if written >= 0:
            return written
        code = ctypes.get_errno()
        if code != errno.EINTR:  # os.pwrite retries EINTR as well (PEP 475)
            raise OSError(code, os.strerror(code))
