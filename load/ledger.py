"""Loss accounting of a load run: what was acknowledged, what arrived, what the log holds.

Every message a load producer sends starts with a *stamp*: a magic, the producer's id (16
random bytes, one per producer object) and its sequence number (0, 1, ... per producer). Each
Locust process keeps a :class:`Ledger` of what its producers got acknowledged (topic, partition,
offset, producer, sequence) and what its consumers received, in compact arrays (8 bytes a
field, no object per message), and saves it into the run folder when the test stops (one file
per process, so distributed workers need no channel back).

:func:`verify` merges every ledger of a run, reads each topic back from the brokers and
counts, per partition:

- **lost**: acknowledged, but the log does not hold that stamp at the acknowledged offset;
- **duplicated**: a stamp stored more than once (a retry stored twice);
- **out of order**: a producer's first copies of its messages whose sequence goes backwards as
  offsets grow (each producer writes a partition in order);
- per consumer group and topic: **consumed** / **redelivered** / **unconsumed**: distinct
  stamps its consumers received, receipts beyond the first (at-least-once consumers redeliver
  after a rebalance; not a fault) and acknowledged ones it never received.
"""
from __future__ import annotations

import os
import struct
import threading
import time
import uuid
from array import array
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

MAGIC = b"TQLD"
STAMP = struct.Struct(">4s16sQ")  # magic, producer id, sequence
STAMP_BYTES = STAMP.size  # 28: the smallest message a load producer sends
FIELDS = ("topic", "partition", "offset", "producer", "seq")


def stamp(producer: bytes, seq: int, size: int, filler: bytes) -> bytes:
    """A message of ``size`` bytes (>= STAMP_BYTES) carrying ``producer`` and ``seq``."""
    return STAMP.pack(MAGIC, producer, seq) + filler[:size - STAMP_BYTES]


def read_stamp(value: bytes) -> tuple[bytes, int] | None:
    """(producer, seq) of a stamped message; None for any other message."""
    if len(value) < STAMP_BYTES or value[:4] != MAGIC:
        return None
    _, producer, seq = STAMP.unpack_from(value)
    return producer, seq


class _Table:
    """Columns of int64 that grow by appending (``array``: 8 bytes a value)."""

    def __init__(self) -> None:
        self.cols = {f: array("q") for f in FIELDS}

    def add(self, *values: int) -> None:
        for col, v in zip(self.cols.values(), values, strict=True):
            col.append(v)

    def arrays(self) -> dict[str, np.ndarray]:
        return {f: np.frombuffer(c, np.int64) if len(c) else np.empty(0, np.int64)
                for f, c in self.cols.items()}


class Ledger:
    """One process's record of acknowledged and received messages (module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.topics: list[str] = []  # of acknowledged messages
        self.streams: list[str] = []  # "group/topic" of received messages
        self.producers: list[bytes] = []
        self._topic_ix: dict[str, int] = {}
        self._stream_ix: dict[str, int] = {}
        self._producer_ix: dict[bytes, int] = {}
        self.acked = _Table()
        self.received = _Table()
        self.sent = 0
        self.failed = 0

    def new_producer(self) -> bytes:
        producer = uuid.uuid4().bytes
        with self._lock:
            self._producer_ix[producer] = len(self.producers)
            self.producers.append(producer)
        return producer

    def add_sent(self, count: int) -> None:
        with self._lock:
            self.sent += count

    def add_failed(self, count: int) -> None:
        with self._lock:
            self.failed += count

    def add_acked(self, topic: str, partition: int, offset: int, producer: bytes,
                  seq: int) -> None:
        with self._lock:
            self.acked.add(_index(self.topics, self._topic_ix, topic), partition, offset,
                           self._producer_ix[producer], seq)

    def add_received(self, group: str, topic: str, partition: int, offset: int,
                     value: bytes) -> bool:
        """Note a message ``group`` consumed; False when it carries no stamp."""
        found = read_stamp(value)
        if found is None:
            return False
        producer, seq = found
        with self._lock:
            ix = self._producer_ix.get(producer)
            if ix is None:  # another process's producer: its id is saved with the receipt
                ix = self._producer_ix[producer] = len(self.producers)
                self.producers.append(producer)
            self.received.add(_index(self.streams, self._stream_ix, f"{group}/{topic}"),
                              partition, offset, ix, seq)
        return True

    def save(self, folder: Path) -> Path:
        """Write ``ledger-<pid>-<random>.npz`` into ``folder``; returns its path."""
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"ledger-{os.getpid()}-{uuid.uuid4().hex[:8]}.npz"
        part = path.with_name(path.name + ".part")  # renamed when whole: readers glob *.npz
        with self._lock, part.open("wb") as out:
            columns = {f"acked_{k}": v.copy() for k, v in self.acked.arrays().items()}
            columns.update({f"received_{k}": v.copy()
                            for k, v in self.received.arrays().items()})
            np.savez(out, topics=np.array(self.topics, dtype=object),
                     streams=np.array(self.streams, dtype=object),
                     producers=np.array(self.producers, dtype=object),
                     counts=np.array([self.sent, self.failed], np.int64), **columns)
        os.replace(part, path)
        return path


def _index(names: list[str], index: dict[str, int], name: str) -> int:
    ix = index.get(name)
    if ix is None:
        ix = index[name] = len(names)
        names.append(name)
    return ix


class Merged:
    """Every ledger of a run on one set of global topic and producer numbers."""

    def __init__(self, paths: Iterable[Path]) -> None:
        self.topics: list[str] = []
        self.streams: list[str] = []
        self.producers: dict[bytes, int] = {}
        self.sent = self.failed = 0
        acked: list[dict[str, np.ndarray]] = []
        received: list[dict[str, np.ndarray]] = []
        for path in paths:
            with np.load(path, allow_pickle=True) as f:  # our own files, written by save()
                topics = [_global(self.topics, t) for t in f["topics"]]
                streams = [_global(self.streams, s) for s in f["streams"]]
                producers = [self.producers.setdefault(bytes(p), len(self.producers))
                             for p in f["producers"]]
                self.sent += int(f["counts"][0])
                self.failed += int(f["counts"][1])
                for prefix, out, names in (("acked", acked, topics),
                                           ("received", received, streams)):
                    cols = {k: f[f"{prefix}_{k}"] for k in FIELDS}
                    cols["topic"] = np.array(names, np.int64)[cols["topic"]] \
                        if len(cols["topic"]) else cols["topic"]
                    cols["producer"] = np.array(producers, np.int64)[cols["producer"]] \
                        if len(cols["producer"]) else cols["producer"]
                    out.append(cols)
        self.acked = _concat(acked)
        self.received = _concat(received)


def _global(names: list[str], name: Any) -> int:
    name = str(name)
    if name not in names:
        names.append(name)
    return names.index(name)


def _concat(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    if not parts:
        return {k: np.empty(0, np.int64) for k in FIELDS}
    return {k: np.concatenate([p[k] for p in parts]) for k in FIELDS}


def _key(producer: np.ndarray, seq: np.ndarray) -> np.ndarray:
    """One int64 per (producer, seq): producers < 2**23, sequences < 2**40."""
    return (producer.astype(np.int64) << 40) | seq.astype(np.int64)


def check_partition(log: dict[str, np.ndarray], acked: dict[str, np.ndarray]) -> dict[str, int]:
    """Counts for one partition. ``log``: offset, producer, seq of every stamped message in
    the partition (offset order); ``acked``: the same of what was acknowledged there."""
    lost = 0
    if len(acked["offset"]):
        at = np.searchsorted(log["offset"], acked["offset"])
        inside = at < len(log["offset"])
        held = np.zeros(len(at), bool)
        held[inside] = ((log["offset"][at[inside]] == acked["offset"][inside])
                        & (log["producer"][at[inside]] == acked["producer"][inside])
                        & (log["seq"][at[inside]] == acked["seq"][inside]))
        lost = int((~held).sum())
    keys = _key(log["producer"], log["seq"])
    _, first = np.unique(keys, return_index=True)
    duplicated = len(keys) - len(first)
    first.sort()  # first copies, in offset order
    producer, seq = log["producer"][first], log["seq"][first]
    order = np.argsort(producer, kind="stable")  # per producer, offset order kept
    same = producer[order][1:] == producer[order][:-1]
    backwards = int((same & (np.diff(seq[order]) <= 0)).sum())
    return {"acknowledged": len(acked["offset"]), "stored": len(keys), "lost": lost,
            "duplicated": duplicated, "out_of_order": backwards}


def consumer_counts(merged: Merged) -> dict[str, dict[str, int]]:
    """Per "group/topic": distinct stamps received, receipts beyond the first, and
    acknowledged stamps of the topic never received."""
    out = {}
    for s, stream in enumerate(merged.streams):
        topic = stream.split("/", 1)[1]
        got = merged.received["topic"] == s
        keys = _key(merged.received["producer"][got], merged.received["seq"][got])
        distinct = np.unique(keys)
        acked = np.zeros(0, np.int64)
        if topic in merged.topics:
            mine = merged.acked["topic"] == merged.topics.index(topic)
            acked = _key(merged.acked["producer"][mine], merged.acked["seq"][mine])
        out[stream] = {"consumed": len(distinct), "redelivered": len(keys) - len(distinct),
                       "unconsumed": int((~np.isin(acked, distinct)).sum())}
    return out


def verify(folder: Path, read_log, sync_topics: set[str] = frozenset(),
           loss_allowed: bool = False) -> dict[str, Any]:
    """Merge the ledgers in ``folder`` and check them against the log.

    ``read_log(topic, producers)`` returns {partition: {"offset", "producer", "seq"}} arrays
    of every message of the topic stamped by one of ``producers`` (16-byte id -> number), for
    every partition (see :func:`log_reader`). ``loss_allowed`` (faults were injected): lost
    messages of topics not in ``sync_topics`` are reported but do not fail the run.
    """
    merged = Merged(sorted(folder.glob("ledger-*.npz")))
    per_partition: dict[str, dict[str, int]] = {}
    failures: list[str] = []
    for t, topic in enumerate(merged.topics):
        mine = merged.acked["topic"] == t
        acked = {k: v[mine] for k, v in merged.acked.items()}
        logs = read_log(topic, merged.producers)
        for partition in sorted(set(logs) | set(acked["partition"].tolist())):
            log = logs.get(partition) or {k: np.empty(0, np.int64)
                                          for k in ("offset", "producer", "seq")}
            here = acked["partition"] == partition
            counts = check_partition(log, {k: v[here] for k, v in acked.items()})
            per_partition[f"{topic}[{partition}]"] = counts
            if counts["lost"] and (topic in sync_topics or not loss_allowed):
                failures.append(f"{topic}[{partition}]: {counts['lost']} acknowledged "
                                f"message(s) lost")
            if counts["out_of_order"]:
                failures.append(f"{topic}[{partition}]: {counts['out_of_order']} message(s) "
                                "stored out of their producer's order")
    totals = {k: sum(c[k] for c in per_partition.values())
              for k in ("acknowledged", "stored", "lost", "duplicated", "out_of_order")}
    consumers = consumer_counts(merged)
    return {"produced": merged.sent, "failed_sends": merged.failed, **totals,
            "consumed": sum(c["consumed"] for c in consumers.values()),
            "consumers": consumers, "partitions": per_partition,
            "failures": failures, "ok": not failures}


def log_reader(masters: str, credentials: Any = None, timeout_s: float = 300.0):
    """``read_log`` for :func:`verify`: reads every partition of a topic from its earliest
    offset to the latest of when the read began, as a group-less consumer."""
    from lib import PullConsumer
    from lib.consumer.reader import MessageReader
    from lib.types import TopicPartition

    def read(topic: str, producers: dict[bytes, int]) -> dict[int, dict[str, np.ndarray]]:
        with MessageReader(masters, credentials=credentials) as reader:
            ends = {p: b.latest for p, b in reader.offsets(topic).items()}
        cols: dict[int, list[array]] = {p: [array("q"), array("q"), array("q")] for p in ends}
        consumer = PullConsumer(masters, credentials=credentials)
        try:
            consumer.assign([TopicPartition(topic, p) for p in ends])
            consumer.seek_to_beginning(*[TopicPartition(topic, p) for p in ends])
            left = {p for p, end in ends.items() if end > 0}
            deadline = time.monotonic() + timeout_s
            while left:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"reading {topic} back took over {timeout_s} s")
                for r in consumer.poll(timeout=1.0):
                    if r.offset >= ends[r.partition]:
                        left.discard(r.partition)
                        continue
                    found = read_stamp(r.value)
                    if found is not None and found[0] in producers:
                        offsets, who, seqs = cols[r.partition]
                        offsets.append(r.offset)
                        who.append(producers[found[0]])
                        seqs.append(found[1])
                    if r.offset + 1 >= ends[r.partition]:
                        left.discard(r.partition)
        finally:
            consumer.close()
        return {p: {k: np.frombuffer(c, np.int64) if len(c) else np.empty(0, np.int64)
                    for k, c in zip(("offset", "producer", "seq"), cs, strict=True)}
                for p, cs in cols.items()}
    return read
