"""The producers' snapshots of every store of a data dir in one file.

A store keeps its idempotent producers' windows in a snapshot (storage/producers.py). On its
own it writes ``producers.snap`` in its directory; a broker's stores hand theirs to the
data dir's :class:`~storage.checkpoints.CheckpointFile`, which writes them all into this file
just before the checkpoint file, at most once per interval. A file per store cost each store a
rewrite (temp file, fsync, rename, directory fsync) at its first idempotent batch: at 10,000
topics of idempotent producers, one of the five syncs of every store's burst.

The file: a head (magic ``TQPM``, version, entry count, CRC-32 of the rest), then per store its
key (as in the checkpoint file), and its snapshot exactly as ``encode_snapshot`` made it (with
its own CRC). A damaged file counts as none, and so do the checkpoints beside it (a checkpoint
may cover producer batches only a lost snapshot remembers): every store scans its whole data
log and rebuilds its windows from it, slow but exact.
"""
from __future__ import annotations

import logging
import struct
import zlib
from collections.abc import Iterable
from pathlib import Path

from lib.logs import event

log = logging.getLogger(__name__)
SNAPSHOTS = "producer-snapshots.bin"
HEAD = struct.Struct("<4sIII")  # magic, version, entries, crc of the rest
ENTRY = struct.Struct("<HI")  # key bytes, snapshot bytes
MAGIC, VERSION = b"TQPM", 1


def dump(snapshots: Iterable[tuple[str, bytes]]) -> bytes:
    """The file, from (store key, snapshot) pairs."""
    parts, count = [], 0
    for key, snapshot in snapshots:
        raw = key.encode()
        parts += (ENTRY.pack(len(raw), len(snapshot)), raw, snapshot)
        count += 1
    body = b"".join(parts)
    return HEAD.pack(MAGIC, VERSION, count, zlib.crc32(body)) + body


def parse(raw: bytes) -> dict[str, bytes]:
    """The snapshots by store key; ValueError when the file is damaged."""
    if len(raw) < HEAD.size:
        raise ValueError("shorter than its head")
    magic, version, count, crc = HEAD.unpack_from(raw)
    body = memoryview(raw)[HEAD.size:]
    if magic != MAGIC or version != VERSION:
        raise ValueError(f"magic {magic!r} version {version}")
    if zlib.crc32(body) != crc:
        raise ValueError("checksum mismatch")
    out, pos = {}, 0
    for _ in range(count):
        if pos + ENTRY.size > len(body):
            raise ValueError("an entry runs past the end")
        key_len, snap_len = ENTRY.unpack_from(body, pos)
        pos += ENTRY.size
        if pos + key_len + snap_len > len(body):
            raise ValueError("an entry runs past the end")
        key = bytes(body[pos:pos + key_len]).decode()
        out[key] = bytes(body[pos + key_len:pos + key_len + snap_len])
        pos += key_len + snap_len
    if pos != len(body):
        raise ValueError("bytes after the last entry")
    return out


def load(path: Path) -> dict[str, bytes] | None:
    """The snapshots of ``path``: none when it is missing, None when it is damaged
    (logged)."""
    try:
        return parse(path.read_bytes())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        event(log, "store.producer_snapshots_unreadable", logging.WARNING, path=str(path),
              error=repr(exc))
        return None
