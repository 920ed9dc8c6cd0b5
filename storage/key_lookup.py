"""Lookup by key over one partition: candidates from the key files, checked against the frames.

:meth:`storage.store.Store.find_by_key` takes, under the store's lock, the partition's offsets
and the cache blocks' entries of the offsets not yet in the files; this module does the rest
outside the lock:

1. candidates: the key files' offsets whose key hash is CRC-32(key) (storage/keys.py: sorted
   files of sealed segments by binary search, the active segment's hashes by one numpy
   comparison) and, for offsets still in a cache block, the hashes of those frames computed
   now (at most two blocks: bounded);
2. each candidate, oldest first, is read (index entry, then its frame: up to ``limit`` frames
   asked of the disk together, :meth:`DataLog.read_scattered`) and kept only when it is no
   hole, its timestamp is in [since_ms, until_ms] and its key bytes equal the key: a hash
   collision or a damaged key file never yields a wrong record. This loop is per
   *candidate*, bounded by ``limit`` plus collisions, never per record of the partition.

``next_offset`` says where to continue: past the last record returned when ``limit`` stopped
the search, else the end searched (nothing more there).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from lib.errors import CorruptRecord, InvalidArgument, OffsetOutOfRange
from lib.records.layout import FRAME_HEADER, FRAME_HEADER_SIZE
from storage.cache import CacheBlock, CachePair, read_span
from storage.datalog import DataLog
from storage.index import IndexLog
from storage.keys import KeyLog, hash_keys, key_hash

if TYPE_CHECKING:
    from storage.partition_log import PartitionLog

MAX_KEY_BYTES = 4096  # a lookup key longer than this is refused (keys are ids, not payloads)
DEFAULT_LIMIT = 64
MAX_LIMIT = 1000
MAX_TIMESTAMP = 2**63 - 1


def check_lookup(key: object, since_ms: int | None, until_ms: int | None, limit: int) -> bytes:
    """The key as bytes, or InvalidArgument naming what is wrong with the request."""
    if isinstance(key, str):
        key = key.encode()
    if not isinstance(key, (bytes, bytearray, memoryview)):
        raise InvalidArgument(f"key must be bytes or str, got {type(key).__name__}")
    key = bytes(key)
    if not key:
        raise InvalidArgument("key must not be empty (records without a key cannot be looked "
                              "up by key)")
    if len(key) > MAX_KEY_BYTES:
        raise InvalidArgument(f"key is {len(key)} bytes, the longest a lookup takes is "
                              f"{MAX_KEY_BYTES}", limit=MAX_KEY_BYTES)
    for name, value in (("since_ms", since_ms), ("until_ms", until_ms)):
        if value is not None and (not isinstance(value, (int, np.integer))
                                  or isinstance(value, bool) or not 0 <= value <= MAX_TIMESTAMP):
            raise InvalidArgument(f"{name} must be epoch milliseconds >= 0, got {value!r}")
    if since_ms is not None and until_ms is not None and until_ms < since_ms:
        raise InvalidArgument(f"until ({until_ms}) is before since ({since_ms})")
    if not isinstance(limit, (int, np.integer)) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgument(f"limit must be within 1..{MAX_LIMIT}, got {limit!r}",
                              limit=MAX_LIMIT)
    return key


@dataclass(frozen=True)
class KeyMatches:
    """Frames (back to back) of the records found, their offsets (int64) and sizes (uint32)."""

    frames: bytes
    offsets: np.ndarray
    sizes: np.ndarray
    next_offset: int
    earliest: int
    latest: int

    def __len__(self) -> int:
        return len(self.offsets)


@dataclass(frozen=True)
class Window:
    """What the store's lock saw: search offsets [first, last); below ``flushed`` in the files,
    the rest in ``cached`` (entries of [flushed, last) and the blocks holding their bytes)."""

    first: int
    flushed: int
    last: int
    earliest: int
    latest: int
    cached: tuple[np.ndarray, list[CacheBlock]] | None

    @classmethod
    def of(cls, part: PartitionLog, cache: CachePair, from_offset: int | None,
           stop: int | None) -> Window:
        """Under the store's lock: offsets [from_offset (default earliest), stop (default
        latest)) of ``part``, and the cache blocks' entries of those not in the files."""
        first = part.earliest if from_offset is None else max(from_offset, part.earliest)
        last = part.next if stop is None else min(stop, part.next)
        flushed = part.flushed
        cached = cache.entries(part.partition, flushed, last, last - flushed) \
            if last > flushed else None
        return cls(first, flushed, last, part.earliest, part.next, cached)


def search(take: Callable[[], tuple[PartitionLog, Window]], data: DataLog, key: bytes,
           since_ms: int | None, until_ms: int | None, limit: int) -> KeyMatches:
    """:func:`find` in the window ``take()`` gives (under the store's lock); once more in a
    new window when retention or a cut raced the first try (a second failure is real)."""
    for retry in (False, True):
        part, window = take()
        try:
            return find(part.index, part.keys, data, window, key, since_ms, until_ms, limit)
        except (CorruptRecord, OffsetOutOfRange):
            if retry:
                raise
    raise AssertionError("unreachable")


def find(index: IndexLog, keys: KeyLog, data: DataLog, w: Window, key: bytes,
         since_ms: int | None, until_ms: int | None, limit: int) -> KeyMatches:
    """Outside the store's lock: the records of ``w`` whose key is ``key`` (module docstring)."""
    h = key_hash(key)
    frames: list[bytes] = []
    offsets: list[int] = []
    sizes: list[int] = []
    on_disk = keys.candidates(h, w.first, min(w.flushed, w.last), since_ms, until_ms).tolist()
    while on_disk:
        batch, on_disk = on_disk[:limit - len(offsets)], on_disk[limit - len(offsets):]
        chosen = [(o, e) for o in batch
                  if _in_window(e := index.read(o, o + 1)[0], since_ms, until_ms)]
        raws = data.read_scattered([(int(e["pos"]), int(e["size"])) for _, e in chosen])
        for (o, _e), frame in zip(chosen, raws, strict=True):
            if _has_key(frame, key):
                frames.append(frame), offsets.append(o), sizes.append(len(frame))
                if len(offsets) == limit:
                    return _matches(frames, offsets, sizes, o + 1, w)
    if w.cached is not None:
        entries, blocks = w.cached
        for i in _cached_candidates(entries, blocks, h, w).tolist():
            frame = _match(entries[i], key, since_ms, until_ms,
                           lambda p, n: read_span(blocks, p, n))
            if frame is not None:
                o = w.flushed + i
                frames.append(frame), offsets.append(o), sizes.append(len(frame))
                if len(offsets) == limit:
                    return _matches(frames, offsets, sizes, o + 1, w)
    return _matches(frames, offsets, sizes, w.last, w)


def _cached_candidates(entries: np.ndarray, blocks: list[CacheBlock], h: int,
                       w: Window) -> np.ndarray:
    """Entry numbers (into ``entries``) of cached records at or past ``w.first`` whose key
    hashes to ``h``: hashed now, one block at a time (a frame never spans two blocks)."""
    hashes = np.zeros(len(entries), np.uint32)
    pos = entries["pos"].astype(np.int64)
    for block in blocks:
        inside = np.flatnonzero((pos >= block.base_pos) & (pos < block.end_pos))
        if len(inside):
            hashes[inside] = hash_keys(block.data(), pos[inside] - block.base_pos,
                                       entries["size"][inside].astype(np.int64))
    found = np.flatnonzero(hashes == h)
    return found[found + w.flushed >= w.first]


def _in_window(entry: np.void, since_ms: int | None, until_ms: int | None) -> bool:
    """A record (no hole) whose timestamp is in [since_ms, until_ms]."""
    ts = int(entry["ts"])
    return int(entry["size"]) >= FRAME_HEADER_SIZE and (since_ms is None or ts >= since_ms) \
        and (until_ms is None or ts <= until_ms)


def _has_key(frame: bytes, key: bytes) -> bool:
    tag_len, key_len = FRAME_HEADER.unpack_from(frame)[5:7]
    start = FRAME_HEADER_SIZE + tag_len
    return key_len == len(key) and frame[start:start + key_len] == key


def _match(entry: np.void, key: bytes, since_ms: int | None, until_ms: int | None,
           fetch: Callable[[int, int], bytes | memoryview]) -> bytes | None:
    """The frame of ``entry`` if it is a record with ``key`` in the time window, else None."""
    if not _in_window(entry, since_ms, until_ms):
        return None
    frame = bytes(fetch(int(entry["pos"]), int(entry["size"])))
    return frame if _has_key(frame, key) else None


def _matches(frames: list[bytes], offsets: list[int], sizes: list[int], next_offset: int,
             w: Window) -> KeyMatches:
    return KeyMatches(b"".join(frames), np.array(offsets, np.int64),
                      np.array(sizes, np.uint32), next_offset, w.earliest, w.latest)
