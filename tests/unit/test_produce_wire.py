"""lib/produce_wire.py against the protobuf message it stands in for, both ways."""
from __future__ import annotations

import random

import pytest
from google.protobuf.message import DecodeError

from lib.produce_wire import (
    MAX_ENTRIES,
    joined,
    parse_produce,
    parse_produce_many,
    produce_many_request,
    produce_request,
    request_pieces,
)
from lib.proto import broker_pb2
from lib.records.encode import Pieces
from lib.types import TopicPartition

CASES = [("a", 0, 0, False, 0), ("orders", 1, 300, True, 7),
         ("t" * 200, 70_000, 5 << 20, False, 2**40), ("ünï", 2**32 - 1, 17, True, 2**64 - 1)]


def _frames(n: int) -> bytes:
    return bytes(range(256)) * (n // 256) + b"x" * (n % 256)


def _fields(message) -> tuple:
    return (message.topic, message.partition, bytes(message.batch), message.acks_all,
            message.topic_id)


@pytest.mark.parametrize("topic, partition, frames_len, acks_all, topic_id", CASES)
def test_hand_built_produce_requests_parse_as_the_protobuf_message(topic, partition,
                                                                   frames_len, acks_all,
                                                                   topic_id):
    head, frames = b"H" * 40, _frames(frames_len)
    raw = produce_request(TopicPartition(topic, partition), head, frames, acks_all, topic_id)
    request = broker_pb2.ProduceRequest.FromString(raw)
    assert _fields(request) == (topic, partition, head + frames, acks_all, topic_id)
    assert raw == request.SerializeToString()
    assert _fields(parse_produce(raw)) == _fields(request)


def test_the_batch_is_a_view_of_the_request_not_a_copy():
    raw = produce_request(TopicPartition("t", 3), b"H" * 40, _frames(4096))
    batch = parse_produce(raw).batch
    assert isinstance(batch, memoryview) and batch.obj is raw


def test_fields_in_any_order_repeated_and_unknown_read_as_protobuf_reads_them():
    unknown = (b"\x48\x07"  # field 9, varint
               + b"\x31" + b"\x00" * 8  # field 6, fixed64
               + b"\x3a\x02ab"  # field 7, length-delimited
               + b"\x45" + b"\x01" * 4)  # field 8, fixed32
    raw = (b"\x20\x01" + unknown + b"\x1a\x03old" + b"\x10\x05" + b"\x0a\x01t"
           + b"\x1a\x03new" + b"\x10" + b"\xff" * 9 + b"\x01" + b"\x20\x00"
           + b"\x28\x03" + b"\x28\x09")
    request = broker_pb2.ProduceRequest.FromString(raw)
    assert _fields(parse_produce(raw)) == _fields(request) == ("t", 2**32 - 1, b"new", False, 9)


def test_bytes_protobuf_refuses_are_refused_and_the_rest_read_alike():
    """Every truncation and 3,000 random byte flips of a valid request: the reader refuses
    what protobuf refuses and reads the same fields from the rest. Groups (wire types 3
    and 4, which proto3 never writes) are the one difference: always refused here."""
    rng = random.Random(11)
    good = produce_request(TopicPartition("orders", 300), b"H" * 40, _frames(60), True, 300)
    damaged = [good[:n] for n in range(len(good))]
    for _ in range(3000):
        raw = bytearray(good)
        for _ in range(rng.randint(1, 3)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        damaged.append(bytes(raw))
    refused = 0
    for raw in damaged:
        try:
            expected = _fields(broker_pb2.ProduceRequest.FromString(raw))
        except DecodeError:
            expected = None
        try:
            got = _fields(parse_produce(raw))
        except ValueError as exc:
            assert expected is None or "wire type" in str(exc), raw
            refused += 1
            continue
        assert got == expected, raw
    assert 100 < refused < len(damaged)  # both kinds were exercised


def test_produce_many_requests_parse_as_the_protobuf_message_with_batches_in_place():
    entries = [produce_request(TopicPartition(t, p), b"H" * 40, _frames(n), a, i)
               for t, p, n, a, i in CASES]
    raw = produce_many_request(entries)
    message = broker_pb2.ProduceManyRequest.FromString(raw)
    assert raw == message.SerializeToString()
    parsed = parse_produce_many(raw)
    assert [_fields(e) for e in parsed] == [_fields(e) for e in message.entries]
    assert all(e.batch.obj is raw for e in parsed)
    assert parse_produce_many(b"") == []


@pytest.mark.parametrize("as_pieces", [False, True])
def test_requests_left_as_pieces_make_the_same_bytes_joined_alone_or_in_a_produce_many(
        as_pieces):
    """The sender keeps a sealed batch's request as pieces (one copy, into the ProduceMany);
    whatever shape its frames have, the bytes are the joined request's."""
    def frames(n: int):
        whole = _frames(n)
        return Pieces([whole[:n // 3], memoryview(whole)[n // 3:]], n) if as_pieces else whole
    pieces = [request_pieces(TopicPartition(t, p), b"H" * 40, frames(n), a, i)
              for t, p, n, a, i in CASES]
    whole = [produce_request(TopicPartition(t, p), b"H" * 40, frames(n), a, i)
             for t, p, n, a, i in CASES]
    assert [p.nbytes for p in pieces] == [len(w) for w in whole]
    assert [joined(p) for p in pieces] == whole
    assert joined(whole[0]) is whole[0]
    assert produce_many_request(pieces) == produce_many_request(whole)
    assert produce_many_request([pieces[0], whole[1]]) == produce_many_request(whole[:2])


def test_produce_many_refuses_more_entries_than_its_limit_and_bad_entries():
    one = produce_request(TopicPartition("t", 0), b"H", b"x")
    assert len(parse_produce_many(produce_many_request([one] * MAX_ENTRIES))) == MAX_ENTRIES
    with pytest.raises(ValueError, match=f"at most {MAX_ENTRIES} entries"):
        parse_produce_many(produce_many_request([one] * (MAX_ENTRIES + 1)))
    with pytest.raises(ValueError):  # an entry whose topic is not UTF-8
        parse_produce_many(produce_many_request([b"\x0a\x01\xff"]))
    with pytest.raises(ValueError):  # an entry cut short
        parse_produce_many(produce_many_request([one + b"\x1a\x05ab"]))
