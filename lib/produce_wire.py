"""``Broker.Produce`` requests by hand, both ways, without protobuf's copies of the batch.

Writing (the producer): a serialized ``ProduceRequest`` is built with one join of the batch's
pieces; the protobuf message would copy a batch of up to 4 MiB twice more (into the message,
then out of it). Reading (the broker): gRPC hands the server the request as one bytes object,
and upb would copy the ``batch`` field into the message and again at every ``request.batch``
(5 % of a broker's CPU at 1 KiB records, perf); :func:`parse_produce` walks the wire format
and hands the batch on as a memoryview of the bytes received.

The fields are lib/proto/broker.proto's: topic = 1, partition = 2, batch = 3, acks_all = 4.
The reader reads what protobuf reads (fields in any order, the last of a field wins, unknown
fields skipped) and raises ValueError on bytes protobuf would refuse; lib.decoding turns that
into INVALID_ARGUMENT. tests/unit/test_produce_wire.py holds both to the protobuf message.
"""
from __future__ import annotations

from typing import NamedTuple

from lib.records.encode import Pieces, joined_len
from lib.types import TopicPartition

PRODUCE_METHOD = "/tubeq.broker.Broker/Produce"
_VARINT, _FIXED64, _DELIMITED, _FIXED32 = 0, 1, 2, 5
_U64 = (1 << 64) - 1
_U32 = (1 << 32) - 1


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def produce_request(tp: TopicPartition, head: bytes,
                    frames: bytes | bytearray | memoryview | Pieces,
                    acks_all: bool = False) -> bytes:
    """A serialized ``ProduceRequest`` whose batch is ``head`` + ``frames`` (whole or as
    pieces), built with one join."""
    topic = tp.topic.encode()
    parts = [b"\x0a", _varint(len(topic)), topic]
    if tp.partition:
        parts += (b"\x10", _varint(tp.partition))
    parts += (b"\x1a", _varint(len(head) + joined_len(frames)), head)
    if isinstance(frames, list):
        parts += frames
    else:
        parts.append(frames)
    if acks_all:
        parts.append(b"\x20\x01")
    return b"".join(parts)


class ProduceView(NamedTuple):
    """The fields of a ``ProduceRequest``, by the message's names; ``batch`` is a view."""

    topic: str
    partition: int
    batch: memoryview
    acks_all: bool


def _read_varint(raw: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while shift < 70:
        if pos >= len(raw):
            raise ValueError("the request ends inside a varint")
        byte = raw[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result & _U64, pos
        shift += 7
    raise ValueError("a varint is longer than 10 bytes")


def parse_produce(raw: bytes) -> ProduceView:
    view = memoryview(raw)
    topic, partition, batch, acks_all = b"", 0, view[:0], False
    pos, end = 0, len(raw)
    while pos < end:
        key, pos = _read_varint(raw, pos)
        field, kind = key >> 3, key & 7
        if field == 0:
            raise ValueError("field number 0 is not a protobuf field")
        if kind == _VARINT:
            value, pos = _read_varint(raw, pos)
            if field == 2:
                partition = value & _U32
            elif field == 4:
                acks_all = value != 0
        elif kind == _DELIMITED:
            size, pos = _read_varint(raw, pos)
            if size > end - pos:
                raise ValueError(f"field {field} claims {size} bytes, {end - pos} are left")
            if field == 1:
                topic = raw[pos:pos + size]
            elif field == 3:
                batch = view[pos:pos + size]
            pos += size
        elif kind in (_FIXED64, _FIXED32):
            pos += 8 if kind == _FIXED64 else 4
            if pos > end:
                raise ValueError(f"field {field} runs past the end of the request")
        else:
            raise ValueError(f"field {field} has wire type {kind}, which proto3 never writes")
    return ProduceView(topic.decode("utf-8"), partition, batch, acks_all)
