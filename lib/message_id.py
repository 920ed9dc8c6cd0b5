"""Message ids: a record's cluster-wide id, derived from where the cluster stored it (RocketMQ's
message id, for tracing: log it when you produce, look it up later).

Format: 40 lowercase hex digits, ``<topic id: 16><partition: 8><offset: 16>`` (u64, u32, u64,
big-endian, so ids of one partition sort by offset). The master assigns the topic id when the
topic is created (1, 2, ... never reused), the broker the offset, so the id is *server-assigned*
and unique without storing anything per record: the id is where the record is. A topic deleted
and created again under its old name gets a new topic id, so an old id never finds the new
topic's record (``UnknownTopic`` names the id). Not encoded: the topic's name (ids stay fixed
length, and renames could not break them); :meth:`lib.admin.AdminClient.find_by_id` asks the
master which topic has the id.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from lib.errors import InvalidArgument

_HEX = re.compile(r"^[0-9a-fA-F]{40}$")
MAX_PARTITION = 2**32 - 1
MAX_U64 = 2**64 - 1


@dataclass(frozen=True)
class MessageId:
    """Where a record is: its topic's id, its partition and its offset."""

    topic_id: int
    partition: int
    offset: int

    def __post_init__(self) -> None:
        for name, value, top in (("topic_id", self.topic_id, MAX_U64),
                                 ("partition", self.partition, MAX_PARTITION),
                                 ("offset", self.offset, 2**63 - 1)):
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= top:
                raise InvalidArgument(f"message id: {name} must be an integer in 0..{top}, "
                                      f"got {value!r}")

    def __str__(self) -> str:
        return f"{self.topic_id:016x}{self.partition:08x}{self.offset:016x}"

    @classmethod
    def parse(cls, text: str) -> MessageId:
        """The id :meth:`__str__` wrote; InvalidArgument naming the problem otherwise."""
        if not isinstance(text, str) or not _HEX.match(text.strip()):
            raise InvalidArgument(f"bad message id {text!r}: a message id is 40 hex digits "
                                  f"(topic id, partition, offset)")
        text = text.strip()
        return cls(int(text[:16], 16), int(text[16:24], 16), int(text[24:], 16))
