"""Answers written piece by piece (broker/listening.py): big pieces reach the transport as
they are, small ones joined, all in order."""
from __future__ import annotations

from broker.listening import OWN_WRITE_BYTES, write_pieces


class Recorder:
    def __init__(self) -> None:
        self.writes: list[bytes | memoryview] = []

    def write(self, data: bytes | memoryview) -> None:
        self.writes.append(data)


def test_big_pieces_go_as_they_are_and_small_ones_are_joined_in_order():
    big = memoryview(bytes(range(256)) * (OWN_WRITE_BYTES // 256 + 1))
    other = memoryview(b"z" * OWN_WRITE_BYTES)
    pieces = [b"\x00\x00\x01", b"head", big, b"t1", b"t2", other, b"end"]
    out = Recorder()
    write_pieces(out, pieces)
    assert b"".join(out.writes) == b"".join(pieces)
    assert [type(w) for w in out.writes] == [bytes, memoryview, bytes, memoryview, bytes]
    assert out.writes[1] is big and out.writes[3] is other  # not copied


def test_an_answer_of_small_pieces_is_one_write():
    out = Recorder()
    write_pieces(out, [b"a", memoryview(b"bc"), b""])
    assert out.writes == [b"abc"]
