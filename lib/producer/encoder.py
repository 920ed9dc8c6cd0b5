"""Where a producer's record goes and what it becomes: the partition (the key's hash, the
caller's choice, or the sticky round robin of lib/producer/partitioner.py) and the encoded
frame, checked against the topic's limits. The producer's send paths call it; it holds the
routes it reads, the topics whose names were checked, and each topic's sticky partition
for plain values.
"""
from __future__ import annotations

import time
import zlib
from collections.abc import Mapping, Sequence

import numpy as np

from lib.errors import InvalidArgument, RecordTooLarge, Unavailable, UnknownPartition
from lib.names import check_name
from lib.producer.partitioner import Partitioner
from lib.records import (
    FLAG_VALUE_ZLIB,
    FRAME_HEADER_SIZE,
    Record,
    encode_frame,
    headers_of,
    plain_frame,
    tag_hash,
)
from lib.records.layout import crc32
from lib.routes import RouteCache, TopicRoutes
from lib.types import TopicPartition

_BYTES = (bytes, bytearray)


class RecordEncoder:
    """Partition and frame of each record (module docstring). Used by the producer's
    callers' threads: ``named`` and ``sticky`` tolerate races (a name checked twice, a
    sticky partition picked twice)."""

    def __init__(self, routes: RouteCache, batch_bytes: int, compress: bool) -> None:
        self.routes = routes
        self.partitioner = Partitioner(sticky_bytes=batch_bytes)
        self.batch_bytes = batch_bytes
        self.zlib = compress  # values over 64 bytes are zlib-compressed when that saves bytes
        self.named: set[str] = set()
        # topic -> [partition, max frame bytes, open batch]: send()'s plain values (stick)
        self.sticky: dict[str, list] = {}

    def stick(self, topic: str, value: bytes) -> list | None:
        """The topic's next sticky partition for plain values: [partition, max frame bytes,
        open batch (None: the accumulator opens one)]; None when the record needs the checked
        path (unknown or unavailable topic, too large)."""
        if topic not in self.named:
            return None
        route = self.routes.get(topic)
        if not route.available or len(value) + FRAME_HEADER_SIZE > route.max_message_bytes:
            return None
        p = self.partitioner.partition(topic, None, route.count, route.available,
                                       self.batch_bytes)  # a whole turn: the next partition
        sticky = self.sticky[topic] = [route.tps[p], route.max_message_bytes, None]
        return sticky

    def encode(self, topic: str, value: bytes, key: bytes | None, tag: str | None,
               headers: Mapping[str, bytes] | None, partition: int | None,
               timestamp: int | None) -> tuple[TopicPartition, tuple[bytes, ...], int, int, int]:
        """Check one record and encode its frame: (partition, frame pieces, frame size, tag
        hash, timestamp). Raises the errors ``Producer.send`` documents for bad input."""
        if topic not in self.named:
            check_name(topic)
            self.named.add(topic)
        if not isinstance(value, _BYTES) or (key is not None and not isinstance(key, _BYTES)):
            raise InvalidArgument(
                f"value and key must be bytes, got value {type(value).__name__}, "
                f"key {type(key).__name__}")
        route = self.routes.get(topic)
        ts = time.time_ns() // 1_000_000 if timestamp is None else int(timestamp)
        p = self.choose(route, key, partition, len(value))
        flags = 0
        if self.zlib and len(value) > 64:
            packed = zlib.compress(value, 1)
            if len(packed) < len(value):
                value, flags = packed, FLAG_VALUE_ZLIB
        if tag or headers:
            frame = encode_frame(Record(bytes(value), None if key is None else bytes(key), tag,
                                        headers_of(headers), ts, flags=flags))
            pieces: tuple[bytes, ...] = (frame,)
        else:
            pieces = plain_frame(value, key, ts, flags)
        size = sum(map(len, pieces))
        if size > route.max_message_bytes:
            raise self.too_large(route, size)
        # Not route.tps[p]: choose may have refreshed the routes to find a new partition p.
        return TopicPartition(route.topic, p), pieces, size, tag_hash(tag) if tag else 0, ts

    @staticmethod
    def too_large(route: TopicRoutes, size: int) -> RecordTooLarge:
        return RecordTooLarge(
            f"message for {route.topic} is {size} bytes encoded, over the topic's "
            f"max_message_bytes of {route.max_message_bytes}",
            topic=route.topic, size=size, limit=route.max_message_bytes)

    def choose(self, route: TopicRoutes, key: bytes | None, partition: int | None,
               size: int) -> int:
        """The partition of a record: the caller's (checked against the routes, refreshed
        once for a partition just added), else the partitioner's."""
        if partition is None:
            if not route.count:
                raise Unavailable(f"topic {route.topic} has no partitions placed yet",
                                  topic=route.topic)
            return self.partitioner.partition(route.topic, key, route.count, route.available,
                                              size)
        if not isinstance(partition, int) or partition < 0:
            raise InvalidArgument(f"partition must be an int >= 0, got {partition!r}")
        if partition >= route.count:
            self.routes.invalidate(route.topic)
            route = self.routes.get(route.topic)
            if partition >= route.count:
                raise UnknownPartition(
                    f"topic {route.topic} has {route.count} partitions, no partition {partition}",
                    topic=route.topic, partition=partition, partitions=route.count)
        return partition

    def bulk_partitions(self, route: TopicRoutes, values: Sequence[bytes],
                        keys: Sequence[bytes] | None, partition: int | None) -> np.ndarray:
        """``send_batch``'s partition of every record: by key hash, else one for all."""
        n = len(values)
        if keys is not None and partition is None:
            if not route.count:
                raise Unavailable(f"topic {route.topic} has no partitions placed yet",
                                  topic=route.topic)
            return np.fromiter(map(crc32, keys), np.int64, n) % route.count
        size = sum(map(len, values))
        return np.full(n, self.choose(route, None, partition, size), np.int64)
