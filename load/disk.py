"""What the machine's disk does without tubeq: plain sequential writes and reads in the
directory under test, the ceilings that storage benchmarks are reported against as ratios
(the machine is shared and noisy; absolute figures move 3-5x between days)."""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MB = 1_000_000
MiB = 1 << 20


def rate(count: int, nbytes: int, seconds: float) -> dict[str, float]:
    seconds = max(seconds, 1e-9)
    return {"msgs": count, "bytes": nbytes, "seconds": round(seconds, 4),
            "msgs_per_s": round(count / seconds), "MBps": round(nbytes / seconds / MB, 1)}


@contextmanager
def scratch(root: Path, name: str) -> Iterator[Path]:
    """A fresh directory per case, removed afterwards so cases do not fill the disk."""
    path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def evict(directory: Path) -> None:
    """fsync then drop every file under ``directory`` from the page cache (a cold read)."""
    for path in directory.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def disk_write_ceiling(root: Path, total_bytes: int, sync_every: int | None = MiB
                       ) -> dict[str, float]:
    """Plain sequential 1 MiB os.writes of ``total_bytes``: what the disk does without us.

    The issue's ceiling fsyncs every MiB (``sync_every``); with ``None`` it fsyncs once at the
    end, the most generous ceiling (the store's async mode fsyncs every 10,000 messages or
    16 MiB, so it can beat the per-MiB ceiling).
    """
    chunk = os.urandom(MiB)
    with scratch(root, "disk-write") as path:
        fd = os.open(path / "plain.dat", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            start = time.perf_counter()
            written = 0
            while written < total_bytes:
                written += os.write(fd, chunk[:min(MiB, total_bytes - written)])
                if sync_every and written % sync_every == 0:
                    os.fsync(fd)
            os.fsync(fd)
            seconds = time.perf_counter() - start
        finally:
            os.close(fd)
    return rate(0, written, seconds)


def disk_read_ceiling(root: Path, total_bytes: int) -> dict[str, float]:
    """Plain sequential 1 MiB reads of an evicted file as big as the backlog."""
    chunk = os.urandom(MiB)
    with scratch(root, "disk-read") as path:
        fd = os.open(path / "plain.dat", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for at in range(0, total_bytes, MiB):
                os.write(fd, chunk[:min(MiB, total_bytes - at)])
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.lseek(fd, 0, os.SEEK_SET)
            start = time.perf_counter()
            nbytes = 0
            while block := os.read(fd, MiB):
                nbytes += len(block)
            seconds = time.perf_counter() - start
        finally:
            os.close(fd)
    return rate(0, nbytes, seconds)
