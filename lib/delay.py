"""Delayed and scheduled messages: the names and encodings producers and brokers share.

A delayed record is stored at once in the internal topic ``tubeq.delayed`` (replicated and
acknowledged like any record), in the partition that :func:`delay_partition` picks for its
target partition, with its **due time as its timestamp** (so a broker reads due times as the
index's timestamp column, without decoding frames) and its target in headers. The leader of
each ``tubeq.delayed`` partition keeps a time-ordered index of what is pending on disk
(broker/delay_index.py) and, when records fall due, copies them to their targets in a
transaction that also writes a *done* record into the same ``tubeq.delayed`` partition
(broker/delayed.py): delivered exactly once for read_committed consumers, across restarts and
leader changes. docs/delayed.md has the whole design.
"""
from __future__ import annotations

import datetime as dt
import time
import zlib
from collections.abc import Mapping

from lib.errors import InvalidArgument

DELAY_TOPIC = "tubeq.delayed"
RESERVED_TOPICS = frozenset({DELAY_TOPIC})  # created by the masters, never by a client

H_TOPIC = "tubeq.delay.topic"  # the target topic (UTF-8)
H_PARTITION = "tubeq.delay.partition"  # the target partition (ASCII decimal)
H_SENT = "tubeq.delay.sent_ms"  # when the producer sent it (ASCII decimal ms)
H_DONE = "tubeq.delay.done"  # on a broker's done record: its value lists delivered entries
INTERNAL_HEADERS = frozenset({H_TOPIC, H_PARTITION, H_SENT, H_DONE})

# A delay topic's retention is max_delay_ms plus this: a record is kept a day after it fell due,
# so a broker that was down when it did still finds it (and the producer reads the maximum
# from the topic's retention without another setting to agree on).
RETENTION_MARGIN_MS = 24 * 3600 * 1000
CLOCK_SKEW_MS = 60_000  # a producer's clock may run this far ahead of a broker's


def due_ms(delay: dt.timedelta | float | None, deliver_at: dt.datetime | float | None,
           now_ms: int | None = None) -> int:
    """When a record falls due (wall-clock ms). ``delay``: a timedelta or seconds;
    ``deliver_at``: an aware datetime or epoch seconds. Exactly one may be given."""
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    if delay is not None and deliver_at is not None:
        raise InvalidArgument("give delay= or deliver_at=, not both")
    if delay is not None:
        seconds = delay.total_seconds() if isinstance(delay, dt.timedelta) else delay
        if not isinstance(seconds, int | float) or seconds != seconds:
            raise InvalidArgument(f"delay must be a timedelta or seconds, got {delay!r}")
        if seconds < 0:
            raise InvalidArgument(f"delay must not be negative, got {seconds} s")
        return now + int(seconds * 1000)
    if isinstance(deliver_at, dt.datetime):
        if deliver_at.tzinfo is None:
            raise InvalidArgument(
                "deliver_at must be timezone-aware (datetime.now(timezone.utc) + ...): a naive "
                "datetime's zone is a guess")
        return int(deliver_at.timestamp() * 1000)
    if isinstance(deliver_at, int | float) and deliver_at == deliver_at:
        return int(deliver_at * 1000)
    raise InvalidArgument(f"deliver_at must be an aware datetime or epoch seconds, got "
                          f"{deliver_at!r}")


def max_delay_ms(retention_ms: int) -> int:
    """The longest delay a delay topic with this retention takes."""
    return max(0, retention_ms - RETENTION_MARGIN_MS)


def check_due(due: int, now_ms: int, retention_ms: int) -> None:
    """InvalidArgument naming the limit when ``due`` is further out than the maximum delay."""
    limit = max_delay_ms(retention_ms)
    if due - now_ms > limit + CLOCK_SKEW_MS:
        raise InvalidArgument(
            f"delay of {(due - now_ms) / 1000:.0f} s is over the cluster's maximum of "
            f"{limit // 1000} s (master setting max_delay_ms)", limit_ms=limit)


def delay_partition(topic: str, partition: int, count: int) -> int:
    """The ``tubeq.delayed`` partition of a target partition: one per target, so records for
    one target partition are delivered in due-time order by one mover."""
    return zlib.crc32(f"{topic}/{partition}".encode()) % count


def target_headers(topic: str, partition: int, sent_ms: int,
                   headers: Mapping[str, bytes] | None) -> dict[str, bytes]:
    """A delayed record's headers: the caller's plus where it goes."""
    out = dict(headers or {})
    clash = INTERNAL_HEADERS.intersection(out)
    if clash:
        raise InvalidArgument(f"header {sorted(clash)[0]!r} is reserved for delayed delivery")
    out[H_TOPIC] = topic.encode()
    out[H_PARTITION] = str(partition).encode()
    out[H_SENT] = str(sent_ms).encode()
    return out


def target_of(headers: Mapping[str, bytes]) -> tuple[str, int]:
    """(topic, partition) a delayed record goes to; InvalidArgument when it names none."""
    try:
        return headers[H_TOPIC].decode(), int(headers[H_PARTITION])
    except (KeyError, UnicodeDecodeError, ValueError) as err:
        raise InvalidArgument(
            f"a record of {DELAY_TOPIC} needs headers {H_TOPIC} and {H_PARTITION} (send it with "
            "Producer.send(..., delay=...))") from err
