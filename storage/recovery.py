"""Opening a store after a crash: checkpoint, tail scan, index repair.

The checkpoint (written after the data and index files it describes were fsynced) says up to
which data position every partition's index is complete. On open only the data log after that
position is scanned; if the checkpoint is missing, unreadable or contradicted by the files
(someone truncated them), the whole data log is scanned instead. Either way the index of each
partition ends up exactly matching the valid chunks of the data log.

Truncations and resets replay from the data log too: the store appends a zero-record marker
chunk whose base offset is where the partition's log now ends (``_place``), so truncated
records never come back, whether the open starts at the checkpoint or scans the whole log.

A partition's chunks below its *origin* (the data position its copy started at) are ignored:
they belong to an earlier copy that was removed from the store (storage/removal.py).

Damage costs only the damaged bytes: a chunk whose frames fail their checks keeps its offsets
as holes (size-0 entries readers skip), a partition whose offsets jump past damaged bytes gets
holes for the jump, and other partitions' chunks after the damage are kept. Every damaged
range is logged (``store.recovery_damage``) with what it cost.
"""
from __future__ import annotations

import json
import logging
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from lib.logs import event
from lib.records import FRAME_HEADER_SIZE
from storage.datalog import Damage, DataLog, ScannedChunk, holes
from storage.fsutil import atomic_write
from storage.index import IndexLog

log = logging.getLogger(__name__)

CHECKPOINT = "checkpoint.json"


@dataclass(frozen=True)
class Checkpoint:
    position: int
    next_offsets: dict[int, int]

    def as_json(self) -> dict:
        return {"position": self.position,
                "next": {str(p): n for p, n in self.next_offsets.items()}}

    @classmethod
    def from_json(cls, data: dict) -> Checkpoint:
        return cls(int(data["position"]), {int(p): int(n) for p, n in data["next"].items()})

    def dump(self) -> bytes:
        return seal(self.as_json())


def seal(obj: object) -> bytes:
    """``obj`` as JSON with a CRC of its text: a torn or flipped file reads as damaged."""
    body = json.dumps(obj, separators=(",", ":"))
    return json.dumps({"crc": zlib.crc32(body.encode()), "body": body}).encode()


def unseal(raw: bytes) -> object:
    """What :func:`seal` sealed; ValueError (or KeyError/TypeError) when it is damaged."""
    outer = json.loads(raw)
    body = outer["body"]
    if zlib.crc32(body.encode()) != outer["crc"]:
        raise ValueError("checksum mismatch")
    return json.loads(body)


def write_checkpoint(store_dir: Path, cp: Checkpoint) -> None:
    atomic_write(store_dir / CHECKPOINT, cp.dump())


def read_checkpoint(store_dir: Path) -> Checkpoint | None:
    try:
        return Checkpoint.from_json(unseal((store_dir / CHECKPOINT).read_bytes()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def recover(store_dir: Path, data: DataLog, indexes: dict[int, IndexLog],
            cp: Checkpoint | None, origins: Mapping[int, int] | None = None,
            scan_from: int | None = None) -> list[ScannedChunk]:
    """Make ``indexes`` agree with the valid chunks of ``data`` (cutting bad tails), scanning
    only after checkpoint ``cp`` when the files agree with it (storage/checkpoints.py), and
    from ``scan_from`` at the latest (the producers' snapshot, storage/producers.py).
    A partition's chunks below its position in ``origins`` (default 0) are not its copy's.
    Returns the chunks placed in the indexes, in log order."""
    origins = origins or {}
    for index in indexes.values():
        index.sanitize_tail(data.end)
    start = _scan_start(cp, data, indexes)
    if scan_from is not None and scan_from < start:
        start = max(scan_from, data.start)
    for p, index in indexes.items():
        if cp is not None and start == cp.position:
            index.truncate(min(index.end, cp.next_offsets.get(p, index.start)))
        else:
            index.truncate(index.first_at_or_after(start))
    chunks, damage = data.scan(start)
    placed = []
    for chunk in chunks:
        index = indexes.get(chunk.partition)
        if index is None or chunk.position < origins.get(chunk.partition, 0):
            continue  # a partition (or a copy of it) no longer here: ages out with retention
        _place(index, chunk, damage, store_dir)
        placed.append(chunk)
    for d in damage:
        event(log, "store.recovery_damage", logging.ERROR, store=str(store_dir),
              position=d.position, bytes=d.length, reason=d.reason, cut=d.cut,
              partition=d.partition, lost_offsets=_lost(d))
    # Entries can still point past the (possibly cut) end of the data log: drop them.
    for index in indexes.values():
        index.truncate(index.first_at_or_after(data.end))
    return placed


def _place(index: IndexLog, chunk: ScannedChunk, damage: list[Damage], store_dir: Path) -> None:
    """Append a scanned chunk's entries where its base offset says.

    A chunk past the index's end either follows damaged bytes that could have held the
    offsets in between (they become holes) or a reset of the partition (the index restarts
    at its base). A marker (no entries: the store truncated or reset the partition,
    storage/datalog.py) takes the same steps, so the index ends at its base offset: entries
    at or past it are dropped (a truncation) or the index restarts there (a reset)."""
    first_pos = chunk.frames_pos
    if chunk.base_offset > index.end:
        if _lost_in_damage(index, chunk.base_offset, first_pos, damage):
            # The offsets in between were in damaged bytes: keep them taken, as holes.
            event(log, "store.recovery_holes", logging.ERROR, store=str(store_dir),
                  partition=chunk.partition, lost_offsets=[index.end, chunk.base_offset - 1])
            index.append(holes(chunk.base_offset - index.end, first_pos))
        else:
            index.reset(chunk.base_offset)  # the offsets before it have no data left
    elif chunk.base_offset < index.end:
        index.truncate(chunk.base_offset)
    index.append(chunk.entries)


def _lost_in_damage(index: IndexLog, base_offset: int, first_pos: int,
                    damage: list[Damage]) -> bool:
    """Whether offsets [index.end, base_offset) may have been records in damaged bytes
    between the index's last entry and ``first_pos``: only if damage lies there and is big
    enough to have held that many frames. A reset can jump far ahead (a follower catching up
    with its leader's earliest offset): holes for it would be wrong, and unbounded."""
    last = index.last_entry()
    if last is None:
        return False
    since = int(last["pos"]) + int(last["size"])
    room = sum(d.length for d in damage if since <= d.position < first_pos)
    return 0 < base_offset - index.end <= room // FRAME_HEADER_SIZE


def _lost(d: Damage) -> list[int] | None:
    return [d.base_offset, d.base_offset + d.count - 1] if d.count else None


def _scan_start(cp: Checkpoint | None, data: DataLog, indexes: dict[int, IndexLog]) -> int:
    if cp is None or not data.start <= cp.position <= data.end:
        return data.start
    for p, index in indexes.items():
        if index.end < cp.next_offsets.get(p, 0):
            return data.start  # an index lost synced entries: rebuild it from the whole log
    return cp.position
