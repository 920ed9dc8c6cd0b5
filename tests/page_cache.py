"""What the OS page cache holds of a file (mincore(2), Linux): the page cache window tests
check what the stores dropped."""
from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path

PAGE = mmap.PAGESIZE


def resident(path: Path, start: int, end: int) -> int:
    """How many pages of bytes [start, end) of ``path`` the page cache holds (mincore)."""
    start -= start % PAGE  # mmap maps from a page boundary
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype, libc.mmap.argtypes = ctypes.c_void_p, [
        ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
        ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    fd = os.open(path, os.O_RDONLY)
    try:
        length = end - start
        addr = libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, start)
        assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        try:
            vec = ctypes.create_string_buffer((length + PAGE - 1) // PAGE)
            assert libc.mincore(addr, length, vec) == 0, os.strerror(ctypes.get_errno())
            return sum(b & 1 for b in vec.raw)
        finally:
            libc.munmap(addr, length)
    finally:
        os.close(fd)
