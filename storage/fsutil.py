"""Crash-safe file helpers: every metadata file goes temp + fsync + rename + directory fsync."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

from lib.errors import InvalidName, StorageError


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a create/rename/unlink in ``path`` durable (the entry lives in the directory)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _libc_syncfs():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).syncfs
    except (OSError, AttributeError):  # not Linux, or a libc without it
        return None


_SYNCFS = _libc_syncfs()


def syncfs_available() -> bool:
    return _SYNCFS is not None


def syncfs(fd: int) -> None:
    """Flush every dirty page of the filesystem holding ``fd`` (Linux ``syncfs``): one call
    instead of an fsync per file, and since Linux 5.8 it reports a writeback error of any
    file there since the last call through ``fd``. Raises OSError."""
    if _SYNCFS is None:
        raise OSError("syncfs is not available here")
    if _SYNCFS(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so a crash leaves either the old or the new file."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {exc}", path=str(path)) from exc


def inside(root: Path, *parts: str) -> Path:
    """Join ``parts`` under ``root`` and refuse any result that escapes it."""
    base = root.resolve()
    target = base.joinpath(*parts).resolve()
    if target != base and base not in target.parents:
        raise InvalidName(f"path {'/'.join(parts)!r} escapes the data dir {base}")
    return target


def segment_name(base: int, suffix: str) -> str:
    return f"{base:020d}{suffix}"


def list_segments(directory: Path, suffix: str) -> list[tuple[int, Path]]:
    """(base, path) of segment files sorted by base; stray files are ignored."""
    out = []
    for p in directory.glob(f"*{suffix}"):
        stem = p.name[: -len(suffix)]
        if len(stem) == 20 and stem.isdigit():
            out.append((int(stem), p))
    out.sort()
    return out


def quarantine(path: Path) -> Path:
    """Set a segment aside (rename to ``.bad``) instead of crashing on it."""
    bad = path.with_name(path.name + ".bad")
    os.replace(path, bad)
    fsync_dir(path.parent)
    return bad
