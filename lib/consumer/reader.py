"""MessageReader: look at stored messages without consuming them (operations tools, the portal's
message browser).

Two broker calls, each sent to the broker that hosts the partition (routes from the master,
refreshed and retried when stale, as the consumers do: :class:`OffsetClient`):

- :meth:`MessageReader.offsets`: ``ListOffsets``, earliest and latest offset per partition and
  the first offset at or after a time (ACL ``describe`` on the topic);
- :meth:`MessageReader.read`: ``QueryMessages``, the records of offsets [start, end) of one
  partition within ``max_bytes`` (ACL ``consume`` on the topic; charged to the caller's
  consume quota). No group is involved: nothing is committed, no member joins.
- :meth:`MessageReader.find_by_key`: ``FindByKey`` on every partition (or those asked), the
  records whose key is the one asked, from each partition's key index (docs/lookup.md; ACL
  ``consume`` on the topic).

Every frame is CRC-checked as it is decoded (:func:`lib.records.decode_records`); a corrupt
one raises CorruptRecord naming its offset. Thread-safe; ``close()`` when done.

Example::

    with MessageReader(masters) as reader:
        latest = reader.offsets("orders")[0].latest
        for record in reader.read("orders", 0, max(0, latest - 10)).records:
            print(record.offset, record.key, record.value)
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lib import errors
from lib.auth.client import Credentials
from lib.closing import Closeable
from lib.config import require, settle
from lib.consumer.coordinator import OffsetClient
from lib.names import check_name
from lib.proto import broker_pb2
from lib.records import Record, decode_records
from lib.routes import RouteCache
from lib.rpc import MasterClient, client_pool, invoke
from lib.tls import Tls
from lib.types import TopicPartition

MAX_READ_BYTES = 32 << 20  # a broker's default fetch_max_bytes: it caps every answer there


@dataclass(frozen=True)
class ReaderConfig:
    rpc_timeout_s: float = 10.0  # per call, retries of stale routes included
    max_bytes: int = 1 << 20  # default frame bytes per read()

    def validate(self) -> None:
        require(0.1 <= self.rpc_timeout_s <= 600,
                f"rpc_timeout_s must be within 0.1..600, got {self.rpc_timeout_s}")
        require(1 <= self.max_bytes <= MAX_READ_BYTES,
                f"max_bytes must be within 1..{MAX_READ_BYTES}, got {self.max_bytes}")


@dataclass(frozen=True)
class OffsetBounds:
    """Offsets of one partition: ``earliest`` still stored, ``latest`` the next to be written
    (``latest - earliest`` messages), ``for_time`` the first at or after the time asked
    (``latest`` when every message is older; -1 when no time was asked), ``last_stable``
    where read_committed readers stop (the oldest open transaction's first offset, else
    ``latest``)."""

    partition: int
    earliest: int
    latest: int
    for_time: int = -1
    last_stable: int = -1


@dataclass(frozen=True)
class ReadResult:
    """What one :meth:`MessageReader.read` returned. ``next_offset`` is where to continue (past
    the last record, or past offsets that hold no record); ``nbytes`` the frame bytes read."""

    topic: str
    partition: int
    records: list[Record]
    next_offset: int
    earliest: int
    latest: int
    nbytes: int
    # A partition transactions wrote to: (first, last) offsets of aborted transactions'
    # batches among those read, and where read_committed readers stop now (-1: none wrote).
    aborted: tuple[tuple[int, int], ...] = ()
    last_stable: int = -1


class MessageReader(Closeable):
    """Reads messages by offset and offsets by time; see the module docstring."""

    def __init__(self, masters: str | Sequence[str], *, config: ReaderConfig | None = None,
                 credentials: Credentials | None = None, tls: Tls | None = None,
                 **settings: Any) -> None:
        """``settings`` are :class:`ReaderConfig` fields; ``credentials`` (else the
        environment's TUBEQ_USER/TUBEQ_PASSWORD, TUBEQ_API_KEY or TUBEQ_TOKEN) log in: the
        brokers check *their* ACLs; ``tls`` (else TUBEQ_TLS_CA ...) reaches TLS ports."""
        try:
            self.config: ReaderConfig = settle(ReaderConfig, config, settings)
        except errors.ConfigError as exc:
            raise errors.InvalidArgument(str(exc)) from None
        timeout = self.config.rpc_timeout_s
        masters = masters if isinstance(masters, str) else list(masters)
        self._pool = client_pool(masters, credentials, timeout, tls)
        self._master = MasterClient(masters, pool=self._pool, timeout=timeout)
        self._routes = RouteCache(self._master, timeout=timeout)
        self._offsets = OffsetClient(self._pool, self._master, self._routes, timeout)

    def partitions(self, topic: str) -> int:
        """How many partitions ``topic`` has (from the master's routes, cached for 30 s;
        UnknownTopic if there is no such topic, Unavailable while none is placed)."""
        count = self._routes.get(check_name(topic)).count
        if not count:
            raise errors.Unavailable(f"topic {topic} has no partitions placed yet",
                                     topic=topic)
        return count

    def offsets(self, topic: str, partitions: Iterable[int] | None = None,
                timestamp_ms: int | None = None) -> dict[int, OffsetBounds]:
        """Earliest and latest offsets of ``partitions`` (default: all), and with
        ``timestamp_ms`` the first offset whose timestamp is at or after it."""
        parts = self._checked_partitions(topic, partitions)
        if timestamp_ms is not None and (not _is_int(timestamp_ms) or timestamp_ms < 0):
            raise errors.InvalidArgument(f"timestamp_ms must be an integer >= 0, got "
                                         f"{timestamp_ms!r}")
        asked = -1 if timestamp_ms is None else timestamp_ms
        got = self._offsets.list_offsets([TopicPartition(topic, p) for p in parts], asked)
        return {tp.partition: OffsetBounds(tp.partition, po.earliest, po.latest,
                                           po.for_time if timestamp_ms is not None else -1,
                                           po.last_stable)
                for tp, po in sorted(got.items())}

    def read(self, topic: str, partition: int, start: int, end: int | None = None,
             max_bytes: int | None = None) -> ReadResult:
        """Records of offsets [``start``, ``end``) (``end`` None: up to the latest) of one
        partition, as many as fit in ``max_bytes`` of frames (at least one when there is
        one). OffsetOutOfRange (with ``earliest``/``latest``) when ``start`` is outside the
        stored offsets; UnknownPartition for a partition the topic does not have."""
        self._checked_partitions(topic, [partition])
        if not _is_int(start) or start < 0:
            raise errors.InvalidArgument(f"start must be an integer >= 0, got {start!r}")
        if end is not None and (not _is_int(end) or end <= start):
            raise errors.InvalidArgument(f"end must be an integer > start ({start}), got "
                                         f"{end!r}")
        size = self.config.max_bytes if max_bytes is None else max_bytes
        if not _is_int(size) or not 1 <= size <= MAX_READ_BYTES:
            raise errors.InvalidArgument(f"max_bytes must be within 1..{MAX_READ_BYTES}, got "
                                         f"{size!r}")
        request = broker_pb2.QueryMessagesRequest(topic=topic, partition=partition,
                                                  start_offset=start, end_offset=end or 0,
                                                  max_bytes=size)
        answers: list[broker_pb2.PartitionData] = []
        self._offsets.per_broker(
            [TopicPartition(topic, partition)],
            lambda stub, _t, _p: answers.append(invoke(stub.QueryMessages, request,
                                                       self.config.rpc_timeout_s)))
        data = answers[-1]
        if len(data.offsets) % 8:
            raise errors.CorruptRecord(f"query of {topic}[{partition}]: offsets are not int64s",
                                       topic=topic, partition=partition)
        offsets = np.frombuffer(data.offsets, "<i8")
        records = decode_records(data.frames, offsets, partition, topic)
        pairs = np.frombuffer(data.aborted, "<i8") if len(data.aborted) % 16 == 0 else \
            np.empty(0, "<i8")
        aborted = tuple(zip(pairs[0::2].tolist(), pairs[1::2].tolist(), strict=True))
        stable = data.last_stable if data.transactional else -1
        return ReadResult(topic, partition, records, data.next_offset, data.earliest,
                          data.latest, len(data.frames), aborted, stable)

    def find_by_key(self, topic: str, key: bytes | str, *,
                    partitions: Iterable[int] | None = None, since_ms: int | None = None,
                    until_ms: int | None = None, limit: int = 64) -> list[Record]:
        """Records of ``topic`` whose key is ``key`` (str: its UTF-8 bytes), with timestamps in
        [``since_ms``, ``until_ms``] when given: the oldest ``limit`` (1..1000) by timestamp,
        from each partition's key index without a scan (docs/lookup.md). InvalidArgument
        names a bad key (empty, over 4096 bytes), ``until_ms < since_ms`` or a bad limit;
        UnknownTopic an unknown topic."""
        key_bytes = key.encode() if isinstance(key, str) else key
        if not isinstance(key_bytes, bytes) or not key_bytes:
            raise errors.InvalidArgument(f"key must be non-empty bytes or str, got {key!r}")
        if not _is_int(limit) or not 1 <= limit <= 1000:
            raise errors.InvalidArgument(f"limit must be within 1..1000, got {limit!r}")
        for name, value in (("since_ms", since_ms), ("until_ms", until_ms)):
            if value is not None and (not _is_int(value) or value < 0):
                raise errors.InvalidArgument(f"{name} must be epoch milliseconds >= 0, got "
                                             f"{value!r}")
        if since_ms is not None and until_ms is not None and until_ms < since_ms:
            raise errors.InvalidArgument(f"until ({until_ms}) is before since ({since_ms})")
        parts = self._checked_partitions(topic, partitions)
        found: dict[tuple[int, int], Record] = {}  # a retried broker answers twice

        def ask(stub: Any, _topic: str, on_broker: list[int]) -> None:
            for p in on_broker:
                req = broker_pb2.FindByKeyRequest(topic=topic, partition=p, key=key_bytes,
                                                  since_ms=since_ms, until_ms=until_ms,
                                                  limit=limit)
                data = invoke(stub.FindByKey, req, self.config.rpc_timeout_s)
                found.update(((r.partition, r.offset), r) for r in decode_records(
                    data.frames, np.frombuffer(data.offsets, "<i8"), p, topic))

        self._offsets.per_broker([TopicPartition(topic, p) for p in parts], ask)
        return sorted(found.values(), key=lambda r: (r.timestamp, r.partition, r.offset))[:limit]

    def find_by_key_in(self, topic: str, partition: int, key: bytes, from_offset: int = 0,
                       limit: int = 1000) -> tuple[list[Record], int]:
        """One page of one partition's records with ``key`` (oldest first, from
        ``from_offset`` on, at most ``limit``) and where the next page starts: the end the
        broker searched up to when this page holds every match left."""
        self._checked_partitions(topic, [partition])
        req = broker_pb2.FindByKeyRequest(topic=topic, partition=partition, key=key,
                                          limit=limit, from_offset=from_offset)
        answers: list[broker_pb2.PartitionData] = []
        self._offsets.per_broker(
            [TopicPartition(topic, partition)],
            lambda stub, _t, _p: answers.append(invoke(stub.FindByKey, req,
                                                       self.config.rpc_timeout_s)))
        data = answers[-1]
        return (decode_records(data.frames, np.frombuffer(data.offsets, "<i8"), partition, topic),
                data.next_offset)

    def topic_id(self, topic: str) -> int:
        """The topic's id (assigned by the master at creation; part of message ids)."""
        return self._routes.get(check_name(topic)).topic_id

    def _checked_partitions(self, topic: str, partitions: Iterable[int] | None) -> list[int]:
        count = self.partitions(topic)
        if partitions is None:
            return list(range(count))
        parts = list(partitions)
        for p in parts:
            if not _is_int(p) or not 0 <= p < count:
                raise errors.UnknownPartition(
                    f"topic {topic} has partitions 0..{count - 1}, not {p!r}", topic=topic,
                    partition=p if _is_int(p) else -1, partitions=count)
        return parts

    def close(self) -> None:
        self._master.close()
        self._pool.close()


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
