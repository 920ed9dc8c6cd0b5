"""Protobuf's wire format by hand, where a message carries a large bytes field.

Python's protobuf (upb) copies a bytes field into the message when it is set, again when the
message is serialized, again when bytes are parsed and again at every read of the field: four
copies of up to 4 MiB of frames per message, the largest CPU cost of a follower's copy after
gRPC's own (perf: memmove was a fifth of a broker's CPU with three copies of each partition).
Here a message's large field is kept aside: :class:`Spliced` serializes the rest with protobuf
and joins the large field in after it (fields may come in any order, the last one wins), and
:func:`split` parses the rest with protobuf and hands the large field on as a view of the bytes
received. ``lib/produce_wire.py`` reads a ``ProduceRequest`` with the same helpers.

Readers raise ValueError on bytes protobuf would refuse; proto3's groups (wire types 3 and 4,
which it never writes) are refused too.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

VARINT, FIXED64, DELIMITED, FIXED32 = 0, 1, 2, 5
_U64 = (1 << 64) - 1


def varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_varint(raw: bytes | memoryview, pos: int, end: int | None = None) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    end = len(raw) if end is None else end
    result = shift = 0
    while shift < 70:
        if pos >= end:
            raise ValueError("the message ends inside a varint")
        byte = raw[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result & _U64, pos
        shift += 7
    raise ValueError("a varint is longer than 10 bytes")


class Field(NamedTuple):
    """One field as it sits in the bytes: a varint's value, else the span of its payload."""

    number: int
    kind: int
    value: int  # varint: the value; else the payload's length
    start: int  # where the field's key begins
    payload: int  # where its value (or a delimited field's payload) begins
    stop: int  # where the field ends


def fields(raw: bytes | memoryview, pos: int = 0, end: int | None = None) -> Iterator[Field]:
    """The fields of the message in ``raw[pos:end]``, in the order they come."""
    end = len(raw) if end is None else end
    while pos < end:
        start = pos
        key, pos = read_varint(raw, pos, end)
        number, kind = key >> 3, key & 7
        if number == 0:
            raise ValueError("field number 0 is not a protobuf field")
        if kind == VARINT:
            value, stop = read_varint(raw, pos, end)
        elif kind == DELIMITED:
            value, pos = read_varint(raw, pos, end)
            if value > end - pos:
                raise ValueError(f"field {number} claims {value} bytes, {end - pos} are left")
            stop = pos + value
        elif kind in (FIXED64, FIXED32):
            value = 8 if kind == FIXED64 else 4
            stop = pos + value
            if stop > end:
                raise ValueError(f"field {number} runs past the end of the message")
        else:
            raise ValueError(f"field {number} has wire type {kind}, which proto3 never writes")
        yield Field(number, kind, value, start, pos, stop)
        pos = stop


def delimited(number: int, size: int) -> bytes:
    """The key and length of a delimited field of ``size`` bytes (its payload follows)."""
    return varint(number << 3 | DELIMITED) + varint(size)


class Runs:
    """One blob given as consecutive pieces, none copied (a socket sends them as they are;
    ``bytes()`` joins them). ``len`` is the blob's length in bytes, as for any buffer."""

    __slots__ = ("pieces", "nbytes")

    def __init__(self, pieces: Sequence[Any] = ()) -> None:
        self.pieces = tuple(pieces)
        self.nbytes = sum(map(len, self.pieces))

    def __len__(self) -> int:
        return self.nbytes

    def __iter__(self) -> Iterator[Any]:
        return iter(self.pieces)

    def __bytes__(self) -> bytes:
        return b"".join(self.pieces)


def leading(pieces: Sequence[Any], nbytes: int) -> Runs:
    """The first ``nbytes`` bytes of consecutive ``pieces``, cutting (a view of) the last."""
    out = []
    for piece in pieces:
        if nbytes <= 0:
            break
        if len(piece) > nbytes:
            piece = memoryview(piece)[:nbytes]
        out.append(piece)
        nbytes -= len(piece)
    return Runs(out)


class Spliced:
    """A message whose repeated field ``entries`` holds sub-messages, each with one large
    bytes field (``blob``) kept aside: serialized with one join of the blobs, no protobuf
    copy of them. ``head`` holds the message's other fields (its own copy of ``entries``
    is ignored)."""

    __slots__ = ("head", "entries_field", "blob_field", "entries")

    def __init__(self, head: Any, entries_field: int, blob_field: int,
                 entries: Sequence[tuple[Any, Any]]) -> None:
        self.head, self.entries_field, self.blob_field = head, entries_field, blob_field
        self.entries = entries  # (sub-message without its blob, blob bytes-like or Runs)

    def SerializeToString(self) -> bytes:  # noqa: N802 - grpc calls it as a message's
        return b"".join(self.pieces())

    def pieces(self) -> list[Any]:
        """The serialized message as consecutive pieces, the blobs uncopied (a socket can
        send them as they are)."""
        name = self.head.DESCRIPTOR.fields_by_number[self.entries_field].name
        rest = type(self.head)()
        rest.CopyFrom(self.head)
        rest.ClearField(name)
        parts: list[Any] = [rest.SerializeToString()]
        for entry, blob in self.entries:
            body = entry.SerializeToString()
            size = len(blob)
            tail = delimited(self.blob_field, size) if size else b""
            parts += (delimited(self.entries_field, len(body) + len(tail) + size), body, tail)
            if blob.__class__ is Runs:
                parts += blob.pieces
            elif size:
                parts.append(blob)
        return parts


def split(raw: bytes, entries_field: int, blob_field: int, head_type: Any, entry_type: Any
          ) -> tuple[Any, list[tuple[Any, memoryview]]]:
    """Parse what :class:`Spliced` (or protobuf) serialized: (the message without its
    entries, [(each entry without its blob, the blob as a view of ``raw``)]). Every other
    field is parsed by protobuf from a copy of its own bytes, so it reads what protobuf
    reads; a blob split over several fields keeps the last, as protobuf does."""
    view = memoryview(raw)
    head_spans: list[memoryview] = []
    entries = []
    for f in fields(view):
        if f.number == entries_field and f.kind == DELIMITED:
            spans, blob = [], view[:0]
            for g in fields(view, f.payload, f.stop):
                if g.number == blob_field and g.kind == DELIMITED:
                    blob = view[g.payload:g.stop]
                else:
                    spans.append(view[g.start:g.stop])
            entries.append((entry_type.FromString(b"".join(spans)), blob))
        else:
            head_spans.append(view[f.start:f.stop])
    return head_type.FromString(b"".join(head_spans)), entries
