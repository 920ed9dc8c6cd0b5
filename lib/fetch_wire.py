"""``Broker.Fetch`` answers without protobuf's copies of the frames (lib/wire.py).

A ``FetchResponse`` built as a message copied each partition's frames (up to
``fetch_max_total_bytes``) into the message and again when serialized; read as a message, the
consumer got them copied at parse and again at every read of ``frames``. The broker answers
with a :class:`~lib.wire.Spliced` (the frames joined in once, after the rest) and the consumer
splits the bytes it received, each partition's frames a view of them. The bytes on the wire
are a ``FetchResponse`` either way: a plain protobuf stub reads them as before.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.protobuf.message import DecodeError

from lib.errors import CorruptRecord
from lib.proto import broker_pb2 as pb
from lib.wire import Spliced, split

FETCH_METHOD = "/tubeq.broker.Broker/Fetch"
FETCH_ENTRIES = pb.FetchResponse.DESCRIPTOR.fields_by_name["partitions"].number
FETCH_FRAMES = pb.PartitionData.DESCRIPTOR.fields_by_name["frames"].number


def fetch_answer(entries: Sequence[tuple[pb.PartitionData, Any]]) -> Spliced:
    """The answer to a Fetch: each partition's data without its frames, and its frames."""
    return Spliced(pb.FetchResponse(), FETCH_ENTRIES, FETCH_FRAMES, entries)


def read_fetch(raw: bytes, broker: str
               ) -> tuple[pb.FetchResponse, list[tuple[pb.PartitionData, memoryview]]]:
    """A Fetch answer as bytes: (its other fields, [(each partition's data without its frames,
    the frames as a view of ``raw``)]). Bytes that do not parse raise CorruptRecord."""
    try:
        return split(raw, FETCH_ENTRIES, FETCH_FRAMES, pb.FetchResponse, pb.PartitionData)
    except (ValueError, DecodeError) as exc:
        raise CorruptRecord(f"the Fetch answer of {broker} does not parse: {exc}") from None
