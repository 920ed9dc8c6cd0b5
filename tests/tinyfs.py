"""A small real filesystem for full-disk tests: a tmpfs mounted on a test's directory.

Mounting needs root (or CAP_SYS_ADMIN); where it is not permitted the test is skipped and says
why. The mount is made with the libc call (no child process) and always unmounted again.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

MNT_DETACH = 2


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


@contextlib.contextmanager
def tiny_fs(path: Path, size_bytes: int) -> Iterator[Path]:
    """Mount a tmpfs of ``size_bytes`` on ``path`` (created) for the ``with`` block."""
    path.mkdir(parents=True, exist_ok=True)
    libc = _libc()
    opts = f"size={size_bytes},mode=0755".encode()
    if libc.mount(b"tmpfs", str(path).encode(), b"tmpfs", 0, opts) != 0:
        err = ctypes.get_errno()
        pytest.skip(f"cannot mount a {size_bytes}-byte tmpfs on {path}: {os.strerror(err)} "
                    "(needs root or CAP_SYS_ADMIN)")
    try:
        yield path
    finally:
        if libc.umount2(str(path).encode(), MNT_DETACH) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"cannot unmount the test tmpfs {path}: {os.strerror(err)}")


def fill(path: Path, leave_bytes: int = 0) -> int:
    """Write a filler file into ``path`` until at most ``leave_bytes`` are free; returns its size.

    With ``leave_bytes=0`` it writes until the filesystem says ENOSPC.
    """
    chunk = b"\0" * (1 << 16)
    written = 0
    with open(path / "filler", "ab", buffering=0) as f:
        while True:
            st = os.statvfs(path)
            room = st.f_bavail * st.f_frsize - leave_bytes
            if room <= 0:
                break
            try:
                written += f.write(chunk[: min(len(chunk), room)])
            except OSError:
                break
    return written


def unfill(path: Path) -> None:
    (path / "filler").unlink(missing_ok=True)
