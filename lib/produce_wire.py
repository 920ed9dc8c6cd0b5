"""``Broker.Produce`` requests by hand, both ways, without protobuf's copies of the batch.

Writing (the producer): a serialized ``ProduceRequest`` is built with one join of the batch's
pieces; the protobuf message would copy a batch of up to 4 MiB twice more (into the message,
then out of it). Reading (the broker): gRPC hands the server the request as one bytes object,
and upb would copy the ``batch`` field into the message and again at every ``request.batch``
(5 % of a broker's CPU at 1 KiB records, perf); :func:`parse_produce` walks the wire format
and hands the batch on as a memoryview of the bytes received.

The fields are lib/proto/broker.proto's: topic = 1, partition = 2, batch = 3, acks_all = 4,
topic_id = 5. A ``ProduceManyRequest`` is those requests as its repeated field 1, each entry
the bytes of one ``ProduceRequest``: the producer wraps the requests it already sealed (one
join, no re-encoding), and the broker reads each entry in place.
The reader reads what protobuf reads (fields in any order, the last of a field wins, unknown
fields skipped) and raises ValueError on bytes protobuf would refuse; lib.decoding turns that
into INVALID_ARGUMENT (the field walk is lib/wire.py's). tests/unit/test_produce_wire.py holds
both to the protobuf message.
"""
from __future__ import annotations

from typing import NamedTuple

from lib.records.encode import Pieces, joined_len, restamp_batch
from lib.types import TopicPartition
from lib.wire import DELIMITED, VARINT, fields, varint

PRODUCE_METHOD = "/tubeq.broker.Broker/Produce"
PRODUCE_MANY_METHOD = "/tubeq.broker.Broker/ProduceMany"
MAX_ENTRIES = 10_000  # per ProduceMany call: what a call's answer and its wait may hold
_U32 = (1 << 32) - 1
_U64 = (1 << 64) - 1


def produce_request(tp: TopicPartition, head: bytes,
                    frames: bytes | bytearray | memoryview | Pieces,
                    acks_all: bool = False, topic_id: int = 0) -> bytes:
    """A serialized ``ProduceRequest`` whose batch is ``head`` + ``frames`` (whole or as
    pieces), built with one join; ``topic_id`` is the incarnation the routes name."""
    return b"".join(request_pieces(tp, head, frames, acks_all, topic_id))


def request_pieces(tp: TopicPartition, head: bytes,
                   frames: bytes | bytearray | memoryview | Pieces,
                   acks_all: bool = False, topic_id: int = 0) -> Pieces:
    """:func:`produce_request` not joined yet: a batch that goes in a ``ProduceMany`` call
    is joined once, into the call's request (:func:`produce_many_request`), not into a
    request of its own first (a second copy of every byte into fresh pages: at 10,000
    topics the producer's sender thread spent a third of its time in page faults)."""
    topic = tp.topic.encode()
    frames_len = joined_len(frames)
    before = [b"\x0a", varint(len(topic)), topic]
    if tp.partition:
        before += (b"\x10", varint(tp.partition))
    before += (b"\x1a", varint(len(head) + frames_len), head)
    after = []
    if acks_all:
        after.append(b"\x20\x01")
    if topic_id:
        after += (b"\x28", varint(topic_id))
    return Pieces([*before, *(frames if isinstance(frames, list) else (frames,)), *after],
                  sum(map(len, before)) + frames_len + sum(map(len, after)))


def joined(request: bytes | Pieces) -> bytes:
    """A request from :func:`request_pieces` as one bytes object (a Produce call's)."""
    return b"".join(request) if isinstance(request, Pieces) else request


def restamp_request(raw: bytes, producer_id: int, producer_epoch: int,
                    base_sequence: int) -> bytes:
    """A copy of the serialized request ``raw`` whose batch carries another producer id,
    epoch and base sequence (its CRC made again): a batch refused as a sequence gap is sent
    again under a fresh id (lib/producer/sender.py). Rare, so one copy is fine."""
    out = bytearray(raw)
    at = _batch_at(raw)
    restamp_batch(memoryview(out)[at:], producer_id, producer_epoch, base_sequence)
    return bytes(out)


def _batch_at(raw: bytes) -> int:
    return batch_span(raw)[0]


def batch_span(raw: bytes | bytearray) -> tuple[int, int]:
    """(start, stop) of the batch inside the serialized request ``raw`` (fields after it,
    such as acks_all and topic_id, are not part of it)."""
    for f in fields(memoryview(raw)):
        if f.kind == DELIMITED and f.number == 3:
            return f.payload, f.stop
    raise ValueError("the request carries no batch")


class ProduceView(NamedTuple):
    """The fields of a ``ProduceRequest``, by the message's names; ``batch`` is a view."""

    topic: str
    partition: int
    batch: memoryview
    acks_all: bool
    topic_id: int


def produce_many_request(requests: list[bytes | Pieces]) -> bytes:
    """A serialized ``ProduceManyRequest`` of the ``ProduceRequest``s given, serialized or as
    :func:`request_pieces` (joined here: their one copy)."""
    return b"".join(produce_many_pieces(requests))


def produce_many_pieces(requests: list[bytes | Pieces]) -> list:
    """:func:`produce_many_request` not joined: for a socket that gathers them
    (lib/stream_client.py)."""
    parts: list = []
    for raw in requests:
        parts += (b"\x0a", varint(joined_len(raw)))
        parts += raw if isinstance(raw, Pieces) else (raw,)
    return parts


def parse_produce_many(raw: bytes) -> list[ProduceView]:
    """The entries of a serialized ``ProduceManyRequest``, each batch a view of ``raw``."""
    view = memoryview(raw)
    entries = []
    for f in fields(view):
        if f.kind == DELIMITED and f.number == 1:
            if len(entries) == MAX_ENTRIES:
                raise ValueError(f"a ProduceMany call carries at most {MAX_ENTRIES} entries")
            entries.append(parse_produce(view, f.payload, f.stop))
    return entries


def parse_produce(raw: bytes | memoryview, pos: int = 0, end: int | None = None
                  ) -> ProduceView:
    """The request in ``raw[pos:end]``."""
    view = memoryview(raw)
    topic, partition, batch, acks_all, topic_id = b"", 0, view[:0], False, 0
    for f in fields(view, pos, end):
        if f.kind == VARINT:
            if f.number == 2:
                partition = f.value & _U32
            elif f.number == 4:
                acks_all = f.value != 0
            elif f.number == 5:
                topic_id = f.value & _U64
        elif f.kind == DELIMITED:
            if f.number == 1:
                topic = bytes(view[f.payload:f.stop])
            elif f.number == 3:
                batch = view[f.payload:f.stop]
    return ProduceView(topic.decode("utf-8"), partition, batch, acks_all, topic_id)
