"""A consumer group's dead letters: list, show, replay, purge (``tubeq dlq``, the portal).

The dead-letter topic is an ordinary topic owned by its group (docs/retry.md), so these are
reads and writes through the brokers plus one audit entry per replay or purge
(``Admin.AuditDeadLetters``): who did it, to which group, how many and where to.

Replay re-publishes each dead letter to the topic it was first consumed from (its
``tubeq.retry.topic`` header) or to ``to``, with its key, tag and own headers; its failure
count starts again (the retry headers are dropped) and ``tubeq.replayed_from`` names the dead
letter. The dead letters stay where they are until purged.
"""
from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass

from lib.admin import AdminClient
from lib.auth.client import Credentials
from lib.consumer.pull import PullConsumer
from lib.errors import InvalidArgument, UnknownTopic
from lib.producer.producer import Producer
from lib.retry import H_ERROR, MOVE_HEADERS, attempts_of, origin_of
from lib.tls import Tls
from lib.types import TopicPartition

H_REPLAYED = "tubeq.replayed_from"  # "<dead-letter topic>/<partition>/<offset>"
MAX_SHOWN = 10_000


COUNT_CAP = 100_000  # dead letters counted one by one up to this many (then "at least")


@dataclass(frozen=True)
class DeadLetterTopic:
    group: str
    topic: str
    records: int  # dead letters in it (read_committed), at most COUNT_CAP


@dataclass(frozen=True)
class DeadLetter:
    """One dead letter: where it is, where it came from, its failures and the last error."""

    partition: int
    offset: int
    timestamp: int
    origin_topic: str
    origin_partition: int
    origin_offset: int
    attempts: int
    error: str
    key: bytes | None
    value: bytes


class DeadLetters:
    """The dead-letter operations, over one AdminClient and the brokers."""

    def __init__(self, masters: str | Sequence[str], admin: AdminClient,
                 credentials: Credentials | None = None, tls: Tls | None = None) -> None:
        self.masters, self.admin = masters, admin
        self._auth = {"credentials": credentials, "tls": tls}

    def topics(self) -> list[DeadLetterTopic]:
        """Every group's dead-letter topic the caller may describe, with how many dead
        letters it holds (counted by reading it: its offsets also hold the commit markers
        of the transactions that moved them)."""
        return [DeadLetterTopic(t.owner_group, t.name, self.count(t.name))
                for t in self.admin.list_topics() if t.owner_role == "dlq"]

    def topic_of(self, group: str) -> str:
        found = [t.name for t in self.admin.list_topics()
                 if t.owner_group == group and t.owner_role == "dlq"]
        if not found:
            raise UnknownTopic(f"group {group!r} has no dead-letter topic (none of its "
                               "consumers retried with retry=...)", group=group)
        return found[0]

    def count(self, topic: str) -> int:
        """Dead letters in ``topic`` now, up to COUNT_CAP."""
        return len(self._read(topic, COUNT_CAP, 0))

    def show(self, group: str, limit: int = 100, from_offset: int = 0) -> list[DeadLetter]:
        """Up to ``limit`` dead letters of ``group``, from ``from_offset`` of each partition."""
        if not 1 <= limit <= MAX_SHOWN:
            raise InvalidArgument(f"limit must be within 1..{MAX_SHOWN}, got {limit}")
        topic = self.topic_of(group)
        return [dead_letter(r) for r in self._read(topic, limit, from_offset)]

    def replay(self, group: str, to: str | None = None, limit: int | None = None,
               from_offset: int = 0) -> int:
        """Re-publish dead letters (all, or ``limit`` from ``from_offset``) to their original
        topics or to ``to``; audited. Returns how many."""
        topic = self.topic_of(group)
        records = self._read(topic, limit or MAX_SHOWN * 100, from_offset)
        if to is not None:
            self.admin.describe_topic(to)  # UnknownTopic before anything is sent
        targets: dict[str, int] = {}
        with Producer(self.masters, acks="all", linger_ms=5, **self._auth) as producer:
            futures = []
            for r in records:
                target = to or origin_of(r)[0]
                headers = {k: v for k, v in r.headers.items() if k not in MOVE_HEADERS}
                headers[H_REPLAYED] = f"{topic}/{r.partition}/{r.offset}".encode()
                futures.append(producer.send(target, r.value, key=r.key, tag=r.tag,
                                             headers=headers))
                targets[target] = targets.get(target, 0) + 1
            producer.flush()
            for f in futures:
                f.result()
        self.admin.audit_dead_letters(group, "dlq_replay", json.dumps(
            {"dead_letter_topic": topic, "records": len(records), "to": targets,
             "from_offset": from_offset}, sort_keys=True)[:4000])
        return len(records)

    def purge(self, group: str) -> int:
        """Delete every dead letter of ``group`` (the topic is made again, empty); audited.
        Returns how many there were."""
        topic = self.topic_of(group)
        count = self.count(topic)
        self.admin.delete_topic(topic)
        self.admin.audit_dead_letters(group, "dlq_purge", json.dumps(
            {"dead_letter_topic": topic, "records": count}, sort_keys=True))
        self.admin.ensure_group_topics(group, topic)
        return count

    def _read(self, topic: str, limit: int, from_offset: int) -> list:
        """Committed records of ``topic`` from ``from_offset``, up to ``limit``."""
        if from_offset < 0:
            raise InvalidArgument(f"from_offset must be >= 0, got {from_offset}")
        out: list = []
        with PullConsumer(self.masters, isolation_level="read_committed",
                          fetch_max_wait_ms=50, **self._auth) as consumer:
            info = self.admin.describe_topic(topic)
            tps = [TopicPartition(topic, p.partition) for p in info.partitions]
            consumer.assign(tps)
            for tp, p in zip(tps, info.partitions, strict=True):
                consumer.seek(tp, max(from_offset, p.earliest))
            ends = consumer.end_offsets()
            deadline = time.monotonic() + 60
            while len(out) < limit and any(consumer.position(tp) < end
                                           for tp, end in ends.items()):
                if time.monotonic() > deadline:
                    break
                out += consumer.poll(max_records=min(5000, limit - len(out)), timeout=0.5)
        return out[:limit]


def dead_letter(r) -> DeadLetter:
    topic, partition, offset = origin_of(r)
    return DeadLetter(r.partition, r.offset, r.timestamp, topic, partition, offset,
                      attempts_of(r.headers),
                      r.headers.get(H_ERROR, b"").decode("utf-8", "replace"), r.key, r.value)
