"""Opening a store after a crash: checkpoint, tail scan, index repair.

The checkpoint (written after the data and index files it describes were fsynced) says up to
which data position every partition's index is complete. On open only the data log after that
position is scanned; if the checkpoint is missing, unreadable or contradicted by the files
(someone truncated them), the whole data log is scanned instead. Either way the index of each
partition ends up exactly matching the valid chunks of the data log.
"""
from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from pathlib import Path

from storage.datalog import DataLog
from storage.fsutil import atomic_write
from storage.index import IndexLog

CHECKPOINT = "checkpoint.json"


@dataclass(frozen=True)
class Checkpoint:
    position: int
    next_offsets: dict[int, int]

    def dump(self) -> bytes:
        body = json.dumps({"position": self.position,
                           "next": {str(p): n for p, n in self.next_offsets.items()}})
        return json.dumps({"crc": zlib.crc32(body.encode()), "body": body}).encode()


def write_checkpoint(store_dir: Path, cp: Checkpoint) -> None:
    atomic_write(store_dir / CHECKPOINT, cp.dump())


def read_checkpoint(store_dir: Path) -> Checkpoint | None:
    try:
        outer = json.loads((store_dir / CHECKPOINT).read_bytes())
        body = outer["body"]
        if zlib.crc32(body.encode()) != outer["crc"]:
            return None
        data = json.loads(body)
        return Checkpoint(int(data["position"]), {int(p): int(n) for p, n in data["next"].items()})
    except (OSError, ValueError, KeyError, TypeError):
        return None


def recover(store_dir: Path, data: DataLog, indexes: dict[int, IndexLog]) -> None:
    """Make ``indexes`` agree with the valid chunks of ``data`` (cutting bad tails)."""
    cp = read_checkpoint(store_dir)
    for index in indexes.values():
        index.sanitize_tail(data.end)
    start = _scan_start(cp, data, indexes)
    for p, index in indexes.items():
        if cp is not None and start == cp.position:
            index.truncate(min(index.end, cp.next_offsets.get(p, index.start)))
        else:
            index.truncate(index.first_at_or_after(start))
    for chunk in data.scan(start):
        index = indexes.get(chunk.partition)
        if index is None:
            continue  # a partition no longer placed here; its bytes age out with retention
        if chunk.base_offset > index.end:
            index.reset(chunk.base_offset)  # the offsets before it have no data left
        elif chunk.base_offset < index.end:
            index.truncate(chunk.base_offset)
        index.append(chunk.entries)
    # Entries can still point past the (possibly cut) end of the data log: drop them.
    for index in indexes.values():
        index.truncate(index.first_at_or_after(data.end))


def _scan_start(cp: Checkpoint | None, data: DataLog, indexes: dict[int, IndexLog]) -> int:
    if cp is None or not data.start <= cp.position <= data.end:
        return data.start
    for p, index in indexes.items():
        if index.end < cp.next_offsets.get(p, 0):
            return data.start  # an index lost synced entries: rebuild it from the whole log
    return cp.position
