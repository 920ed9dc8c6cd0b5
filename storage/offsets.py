"""Committed consumer-group offsets on LMDB: (group, topic, partition) -> offset + metadata.

Lives on the broker that owns the partitions, as in TubeMQ. One LMDB environment per broker;
a commit of many partitions is one write transaction, so it lands whole or not at all. LMDB is
thread-safe for this use (one writer at a time, readers never blocked).

The same environment keeps each exactly-once sink's last committed batch id and the intent of
its commit in progress (broker/sinks.py), under keys that start with ``\x01`` (no group name
can: names are checked).
"""
from __future__ import annotations

import json
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import lmdb

from lib.errors import InvalidArgument, StorageError, StoreClosed
from lib.names import check_name

_VALUE = struct.Struct("<qq")  # offset, commit time (ms); metadata bytes follow
_PART = struct.Struct(">I")  # big-endian so keys sort by partition
_SINK = b"\x01sink\x00"  # + sink id: the last committed batch id (i64)
_INTENT = b"\x01intent\x00"  # + sink id: JSON of the commit being applied (broker/sinks.py)
_BATCH_ID = struct.Struct("<q")
MAX_METADATA_BYTES = 4096


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    metadata: bytes
    commit_time_ms: int


def _prefix(group: str, topic: str | None = None) -> bytes:
    key = check_name(group, "group").encode() + b"\x00"
    return key if topic is None else key + check_name(topic).encode() + b"\x00"


class OffsetStore:
    """Consumer offsets of every group on this broker."""

    def __init__(self, path: str | Path, map_size: int = 1 << 30, sync: bool = True) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        try:
            self._env = lmdb.open(str(path), map_size=map_size, sync=sync, subdir=True,
                                  max_dbs=0, lock=True)
        except lmdb.Error as exc:
            raise StorageError(f"cannot open offset store at {path}: {exc}") from exc
        self._closed = False

    def commit(self, group: str, topic: str,
               offsets: Mapping[int, int | tuple[int, bytes]]) -> None:
        """Store offsets for several partitions atomically (one transaction)."""
        prefix = _prefix(group, topic)
        now = int(time.time() * 1000)
        rows = []
        for partition, value in offsets.items():
            offset, metadata = value if isinstance(value, tuple) else (value, b"")
            _check(partition, offset, metadata)
            rows.append((prefix + _PART.pack(partition), _VALUE.pack(offset, now) + metadata))
        with self._write() as txn:
            for key, val in rows:
                txn.put(key, val)

    def store_copies(self, topic: str, partition: int,
                     offsets: Mapping[str, CommittedOffset]) -> None:
        """Store groups' offsets of one partition as its leader committed them (commit times
        kept), atomically: a follower's copy (broker/replica_fetcher.py)."""
        rows = []
        for group, c in offsets.items():
            _check(partition, c.offset, c.metadata)
            rows.append((_prefix(group, topic) + _PART.pack(partition),
                         _VALUE.pack(c.offset, c.commit_time_ms) + c.metadata))
        with self._write() as txn:
            for key, val in rows:
                txn.put(key, val)

    def partition_offsets(self, topic: str, partition: int) -> dict[str, CommittedOffset]:
        """Every group's committed offset of one partition (a scan of every key: for the
        rare whole copy a new follower takes)."""
        suffix = b"\x00" + check_name(topic).encode() + b"\x00" + _PART.pack(partition)
        out: dict[str, CommittedOffset] = {}
        with self._read() as txn:
            for key, raw in txn.cursor():
                if not key.startswith(b"\x01") and key.endswith(suffix):
                    out[key[:-len(suffix)].decode()] = _decode(raw)
        return out

    def fetch(self, group: str, topic: str,
              partitions: list[int] | None = None) -> dict[int, CommittedOffset]:
        """Committed offsets of ``group`` on ``topic`` (all partitions, or the listed ones)."""
        prefix = _prefix(group, topic)
        out: dict[int, CommittedOffset] = {}
        with self._read() as txn:
            if partitions is not None:
                for p in partitions:
                    raw = txn.get(prefix + _PART.pack(p))
                    if raw is not None:
                        out[p] = _decode(raw)
                return out
            cursor = txn.cursor()
            if cursor.set_range(prefix):
                for key, raw in cursor:
                    if not key.startswith(prefix):
                        break
                    out[_PART.unpack(key[len(prefix):])[0]] = _decode(raw)
        return out

    def groups(self) -> list[str]:
        """Every group that has committed something here."""
        names: set[str] = set()
        with self._read() as txn:
            for key in txn.cursor().iternext(keys=True, values=False):
                if key.startswith(b"\x01"):  # sink records, not groups
                    continue
                names.add(key.split(b"\x00", 1)[0].decode())
        return sorted(names)

    def group_topics(self) -> set[tuple[str, str]]:
        """Every (group, topic) with a committed offset here."""
        pairs: set[tuple[str, str]] = set()
        with self._read() as txn:
            for key in txn.cursor().iternext(keys=True, values=False):
                if not key.startswith(b"\x01"):
                    group, topic, _ = key.split(b"\x00", 2)
                    pairs.add((group.decode(), topic.decode()))
        return pairs

    def delete(self, group: str, topic: str | None = None) -> int:
        """Forget a group's offsets (for one topic or all); returns how many were removed."""
        prefix = _prefix(group, topic)
        removed = 0
        with self._write() as txn:
            cursor = txn.cursor()
            if cursor.set_range(prefix):
                while cursor.key().startswith(prefix):  # delete() moves to the next key
                    cursor.delete()
                    removed += 1
        return removed

    def sink_committed(self, sink: str) -> int:
        """The last batch id committed by ``sink`` on this broker (-1: none yet)."""
        with self._read() as txn:
            raw = txn.get(_SINK + check_name(sink, "sink").encode())
        return -1 if raw is None else _BATCH_ID.unpack(raw)[0]

    def commit_sink(self, sink: str, batch_id: int) -> None:
        """Record ``batch_id`` as ``sink``'s last committed batch and forget its intent, in one
        transaction (durable once this returns: the environment syncs on commit)."""
        name = check_name(sink, "sink").encode()
        with self._write() as txn:
            txn.put(_SINK + name, _BATCH_ID.pack(batch_id))
            txn.delete(_INTENT + name)

    def sink_intent(self, sink: str) -> dict | None:
        """The intent ``put_sink_intent`` left for ``sink`` (None: no commit in progress)."""
        with self._read() as txn:
            raw = txn.get(_INTENT + check_name(sink, "sink").encode())
        return None if raw is None else json.loads(raw)

    def put_sink_intent(self, sink: str, intent: dict) -> None:
        """Durably note what a sink commit is about to append, before it appends anything."""
        with self._write() as txn:
            txn.put(_INTENT + check_name(sink, "sink").encode(),
                    json.dumps(intent, separators=(",", ":")).encode())

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._env.close()

    def _write(self) -> lmdb.Transaction:
        self._check_open()
        return self._env.begin(write=True)

    def _read(self) -> lmdb.Transaction:
        self._check_open()
        return self._env.begin()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed("offset store is closed")


def _check(partition: object, offset: object, metadata: object) -> None:
    if not isinstance(partition, int) or isinstance(partition, bool) or not 0 <= partition < 2**32:
        raise InvalidArgument(f"partition must be an int in [0, 2**32), got {partition!r}")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise InvalidArgument(f"committed offset must be an int >= 0, got {offset!r}")
    if not isinstance(metadata, bytes) or len(metadata) > MAX_METADATA_BYTES:
        raise InvalidArgument(f"offset metadata must be bytes of at most {MAX_METADATA_BYTES}")


def _decode(raw: bytes) -> CommittedOffset:
    offset, when = _VALUE.unpack_from(raw)
    return CommittedOffset(offset, bytes(raw[_VALUE.size:]), when)
