"""Retry and dead-letter topics: the names, headers and policy the consumers and the masters
share (docs/retry.md).

A record a consumer gives up on for now (a handler that raised, ``PullConsumer.nack``) is
moved, in the transaction that commits the consumer's offset past it, to the group's retry
topic ``<group>.retry`` as a delayed record (lib/delay.py) that falls due after the policy's
backoff; the group's consumers read that topic as well. After ``max_attempts`` failures it
goes to the dead-letter topic (``<group>.dlq`` unless named) instead. Headers say where it
came from, how often it failed and why.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lib.delay import INTERNAL_HEADERS
from lib.errors import InvalidArgument

H_TOPIC = "tubeq.retry.topic"  # where the record was first consumed from
H_PARTITION = "tubeq.retry.partition"
H_OFFSET = "tubeq.retry.offset"
H_ATTEMPTS = "tubeq.retry.attempts"  # failures so far
H_ERROR = "tubeq.retry.error"  # the last one: "Type: message", at most MAX_ERROR_CHARS
H_GROUP = "tubeq.retry.group"
MOVE_HEADERS = frozenset({H_TOPIC, H_PARTITION, H_OFFSET, H_ATTEMPTS, H_ERROR, H_GROUP})
MAX_ERROR_CHARS = 512

# RocketMQ's delay levels from 1 s (its retries start at 10 s, its third level): the n-th
# retry waits BACKOFF_S[n - 1], the last level repeating.
BACKOFF_S = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800,
             3600, 7200)


def retry_topic(group: str) -> str:
    return f"{group}.retry"


def dead_letter_topic(group: str, given: str = "") -> str:
    return given or f"{group}.dlq"


@dataclass(frozen=True)
class RetryPolicy:
    """How a consumer group retries a failed record: ``backoff_s[n - 1]`` before the n-th
    retry (the last one repeating), then the dead-letter topic after ``max_attempts``
    failures. ``ordered``: a push consumer retries in place, holding the partition (RocketMQ's
    orderly consumption), instead of moving the record aside and going on."""

    max_attempts: int = 16
    backoff_s: tuple[float, ...] = BACKOFF_S
    dead_letter_topic: str = ""  # "<group>.dlq"
    ordered: bool = False

    def validate(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) \
                or not 1 <= self.max_attempts <= 1000:
            raise InvalidArgument(f"max_attempts must be within 1..1000, got "
                                  f"{self.max_attempts!r}")
        if not self.backoff_s or any(not isinstance(s, int | float) or not 0 <= s <= 7 * 86400
                                     for s in self.backoff_s):
            raise InvalidArgument(f"backoff_s must be one or more delays of 0 s .. 7 days, got "
                                  f"{self.backoff_s!r}")

    def delay_for(self, failures: int) -> float:
        """Seconds before the retry that follows the ``failures``-th failure."""
        return float(self.backoff_s[min(max(failures, 1), len(self.backoff_s)) - 1])


def attempts_of(headers: Mapping[str, bytes]) -> int:
    """Failures a record has had (0: never failed)."""
    try:
        return int(headers.get(H_ATTEMPTS, b"0"))
    except ValueError:
        return 0


def origin_of(record) -> tuple[str, int, int]:
    """(topic, partition, offset) a record was first consumed from: its own unless it came
    through a retry topic."""
    h = record.headers
    if H_TOPIC in h:
        try:
            return h[H_TOPIC].decode(), int(h[H_PARTITION]), int(h[H_OFFSET])
        except (KeyError, ValueError, UnicodeDecodeError):
            pass
    return record.topic, record.partition, record.offset


def moved_headers(record, group: str, failures: int, error: BaseException | str | None
                  ) -> dict[str, bytes]:
    """A moved record's headers: its own (without those of an earlier move or delay), where
    it came from, its failures and the last error."""
    topic, partition, offset = origin_of(record)
    out = {k: v for k, v in record.headers.items()
           if k not in INTERNAL_HEADERS and k not in MOVE_HEADERS}
    if isinstance(error, BaseException):
        error = f"{type(error).__name__}: {error}"
    out.update({H_TOPIC: topic.encode(), H_PARTITION: str(partition).encode(),
                H_OFFSET: str(offset).encode(), H_ATTEMPTS: str(failures).encode(),
                H_GROUP: group.encode(),
                H_ERROR: (error or "nack")[:MAX_ERROR_CHARS].encode("utf-8", "replace")})
    return out
