"""Committed consumer-group offsets on LMDB: (group, topic, partition) -> offset + metadata.

Lives on the broker that owns the partitions, as in TubeMQ. One LMDB environment per broker;
a commit of many partitions is one write transaction, so it lands whole or not at all. LMDB is
thread-safe for this use (one writer at a time, readers never blocked).

The same environment keeps each exactly-once sink's last committed batch id and, per
partition, each sink's *mark* (its last batch committed there, where the log ended then, under
which leader epoch) and the *intent* of its commit in progress there (broker/sinks.py), both
replicated with the partition, under keys that start with ``\x01`` (no group name can: names
are checked).
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
from lib.names import INSTANCE_SEP, check_name, check_owner

_VALUE = struct.Struct("<qq")  # offset, commit time (ms); metadata bytes follow
_PART = struct.Struct(">I")  # big-endian so keys sort by partition
_SINK = b"\x01sink\x00"  # + sink id: the last committed batch id (i64)
_INTENT = b"\x01intent\x00"  # + sink id: an older version's intent, dropped at commit
_INTENTS = b"\x01pintent\x00"  # + topic + \x00 + partition + sink id: JSON (broker/sinks.py)
_BATCH_ID = struct.Struct("<q")
_MARKS = b"\x01mark\x00"  # + topic + \x00 + partition + sink id: a SinkMark
_MARK = struct.Struct("<qqq")  # batch id, end offset, leader epoch
MAX_METADATA_BYTES = 4096
MAX_KEY_BYTES = 511  # LMDB's default key limit


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    metadata: bytes
    commit_time_ms: int


@dataclass(frozen=True)
class SinkMark:
    """A sink's last batch committed on one partition: the log ended at ``end_offset`` once
    its records were appended, under leader epoch ``leader_epoch``."""

    batch_id: int
    end_offset: int
    leader_epoch: int


def _marks_prefix(topic: str, partition: int, kind: bytes = _MARKS) -> bytes:
    return kind + check_name(topic).encode() + b"\x00" + _PART.pack(partition)


def _prefix(group: str, topic: str | None = None) -> bytes:
    """Key prefix of an owner's offsets: ``group`` or, for a broadcast instance,
    ``group@instance`` (lib.names.offsets_owner)."""
    key = check_owner(group).encode() + b"\x00"
    if topic is None:
        return key
    key += check_name(topic).encode() + b"\x00"
    if len(key) + _PART.size > MAX_KEY_BYTES:
        raise InvalidArgument(
            f"the offsets of {group!r} on topic {topic!r} need a key of {len(key) + _PART.size} "
            f"bytes, more than the offset store's {MAX_KEY_BYTES}: use a shorter group, "
            "instance id or topic name")
    return key


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

    def instance_offsets(self, group: str, topic: str, partitions: list[int] | None = None
                         ) -> dict[str, dict[int, CommittedOffset]]:
        """Every broadcast instance's committed offsets of ``group`` on ``topic`` (instance
        id -> partition -> offset): a scan of the keys under ``group@``."""
        start = check_name(group, "group").encode() + INSTANCE_SEP.encode()
        suffix = b"\x00" + check_name(topic).encode() + b"\x00"
        wanted = None if partitions is None else set(partitions)
        out: dict[str, dict[int, CommittedOffset]] = {}
        with self._read() as txn:
            cursor = txn.cursor()
            if not cursor.set_range(start):
                return out
            for key, raw in cursor:
                if not key.startswith(start):
                    break
                owner, rest = bytes(key[len(start):]).split(b"\x00", 1)
                if b"\x00" + rest[:-_PART.size] != suffix:
                    continue
                p = _PART.unpack(rest[-_PART.size:])[0]
                if wanted is None or p in wanted:
                    out.setdefault(owner.decode(), {})[p] = _decode(raw)
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

    def by_partition(self) -> dict[tuple[str, int], dict[str, CommittedOffset]]:
        """Every committed offset here, by (topic, partition) then group: one scan, for the
        check of a broker's recovered stores against them (broker/offsets.py)."""
        out: dict[tuple[str, int], dict[str, CommittedOffset]] = {}
        with self._read() as txn:
            for key, raw in txn.cursor():
                if not key.startswith(b"\x01"):
                    group, topic, part = bytes(key).split(b"\x00", 2)
                    where = (topic.decode(), _PART.unpack(part)[0])
                    out.setdefault(where, {})[group.decode()] = _decode(raw)
        return out

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

    def commit_sink(self, sink: str, batch_id: int,
                    marks: Mapping[tuple[str, int], SinkMark] | None = None) -> None:
        """Record ``batch_id`` as ``sink``'s last committed batch and its ``marks`` per
        (topic, partition), and forget its intents there, in one transaction (durable once
        this returns: the environment syncs on commit)."""
        name = check_name(sink, "sink").encode()
        with self._write() as txn:
            txn.put(_SINK + name, _BATCH_ID.pack(batch_id))
            txn.delete(_INTENT + name)
            for (topic, partition), mark in (marks or {}).items():
                txn.put(_marks_prefix(topic, partition) + name, _pack_mark(mark))
                txn.delete(_marks_prefix(topic, partition, _INTENTS) + name)

    def sink_marks(self, topic: str, partition: int) -> dict[str, SinkMark]:
        """Every sink's mark on a partition (sink id -> mark)."""
        return {sink: SinkMark(*_MARK.unpack(raw))
                for sink, raw in self._scan(_marks_prefix(topic, partition))}

    def sink_intents(self, topic: str, partition: int) -> dict[str, dict]:
        """Every sink's intent on a partition (sink id -> what its commit in progress is
        about to append there, broker/sinks.py)."""
        return {sink: json.loads(raw)
                for sink, raw in self._scan(_marks_prefix(topic, partition, _INTENTS))}

    def put_sink_intents(self, sink: str, intents: Mapping[tuple[str, int], dict]) -> None:
        """Durably note what a sink commit is about to append per partition, before it
        appends anything."""
        name = check_name(sink, "sink").encode()
        with self._write() as txn:
            for (topic, partition), intent in intents.items():
                txn.put(_marks_prefix(topic, partition, _INTENTS) + name,
                        json.dumps(intent, separators=(",", ":")).encode())

    def put_sink_copies(self, topic: str, partition: int, marks: Mapping[str, SinkMark],
                        intents: Mapping[str, dict], drop_from: int | None = None) -> None:
        """A follower: store the marks and intents its leader sent. A mark replaces the
        sink's intent when it covers it; with ``drop_from``, marks ending past that offset go
        first (the log was truncated there)."""
        prefix, iprefix = _marks_prefix(topic, partition), _marks_prefix(topic, partition,
                                                                           _INTENTS)
        with self._write() as txn:
            if drop_from is not None:
                for sink, raw in self._scan(prefix, txn):
                    if _MARK.unpack(raw)[1] > drop_from:
                        txn.delete(prefix + sink.encode())
            for sink, intent in intents.items():
                txn.put(iprefix + check_name(sink, "sink").encode(),
                        json.dumps(intent, separators=(",", ":")).encode())
            for sink, mark in marks.items():
                name = check_name(sink, "sink").encode()
                txn.put(prefix + name, _pack_mark(mark))
                raw = txn.get(iprefix + name)
                if raw is not None and json.loads(raw)["batch"] <= mark.batch_id:
                    txn.delete(iprefix + name)

    def drop_sink_marks(self, topic: str) -> None:
        """Forget every sink mark and intent of a topic (deleted)."""
        for kind in (_MARKS, _INTENTS):
            prefix = kind + check_name(topic).encode() + b"\x00"
            with self._write() as txn:
                cursor = txn.cursor()
                if cursor.set_range(prefix):
                    while cursor.key().startswith(prefix):
                        cursor.delete()

    def _scan(self, prefix: bytes, txn: lmdb.Transaction | None = None) -> list[tuple[str, bytes]]:
        """(key suffix, value) of every key under ``prefix``."""
        if txn is None:
            with self._read() as own:
                return self._scan(prefix, own)
        out = []
        cursor = txn.cursor()
        if cursor.set_range(prefix):
            for key, raw in cursor:
                if not key.startswith(prefix):
                    break
                out.append((bytes(key[len(prefix):]).decode(), bytes(raw)))
        return out

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


def _pack_mark(mark: SinkMark) -> bytes:
    return _MARK.pack(mark.batch_id, mark.end_offset, mark.leader_epoch)


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
