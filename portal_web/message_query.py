"""What a message browser request asks for (portal_web/browse.py scans it): per partition,
a range [start, end) of offsets, the filters, and how many records to show. Bad input is a 400
naming the field and its limits.

- ``mode=newest`` (default): the newest ``limit`` matching records of every partition (or of
  ``partition``), shown newest first; "next" walks back to the oldest;
- ``mode=range``: ``partition`` (required), ``from`` (default earliest) .. ``to`` (exclusive,
  default latest);
- ``mode=time``: from the first offset at or after ``time`` (epoch ms or ISO 8601) to latest,
  in every partition or ``partition``;
- ``cursor=p:offset,...`` (the "next" link) continues where a scan stopped, in any mode: from
  each offset on, or in newest mode below each offset (partitions it does not name are done).

Filters: ``key`` (exact, or a substring with ``key_match=substring``), ``tag`` (exact),
``value`` (a substring of the value's bytes); ``format`` (auto, text, json, hex) says how
bytes are shown.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from lib.consumer.reader import OffsetBounds
from lib.records import Record
from portal_web.errors import PortalError
from portal_web.render import FORMATS
from portal_web.views import integer

MODES = ("newest", "range", "time")
KEY_MATCHES = ("exact", "substring")
DEFAULT_RECORDS = 50
MAX_RECORDS = 500
MAX_SCAN_BYTES = 8 << 20
MAX_SCAN_OFFSETS = 100_000
MAX_FILTER_CHARS = 1000
MAX_OFFSET = 2**63 - 1


def bad(message: str) -> PortalError:
    return PortalError(400, "INVALID_ARGUMENT", message)


@dataclass(frozen=True)
class Filters:
    key: bytes | None = None
    key_substring: bool = False
    tag: str | None = None
    value: bytes | None = None

    def matches(self, r: Record) -> bool:
        if self.key is not None:
            if r.key is None or not (self.key in r.key if self.key_substring
                                     else self.key == r.key):
                return False
        if self.tag is not None and r.tag != self.tag:
            return False
        return self.value is None or self.value in r.value


@dataclass
class Plan:
    """What to scan: partition -> [start, end), and how to show it."""

    topic: str
    ranges: dict[int, tuple[int, int]]
    limit: int
    newest_first: bool
    filters: Filters
    scan_bytes: int
    fmt: str


def text_arg(args: Mapping[str, Any], name: str) -> str | None:
    raw = str(args.get(name) or "")
    if len(raw) > MAX_FILTER_CHARS:
        raise bad(f"{name} must be at most {MAX_FILTER_CHARS} characters, got {len(raw)}")
    return raw or None


def choice(args: Mapping[str, Any], name: str, allowed: tuple[str, ...]) -> str:
    value = str(args.get(name) or allowed[0])
    if value not in allowed:
        raise bad(f"{name} must be one of {', '.join(allowed)}, got {value[:40]!r}")
    return value


def parse_time(raw: str) -> int:
    """Epoch milliseconds from digits, or from an ISO 8601 date-time (UTC unless it names its
    offset)."""
    text = raw.strip()
    if text.isdigit():
        if len(text) > 18:
            raise bad(f"time in epoch milliseconds must have at most 18 digits, got "
                      f"{len(text)}")
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise bad(f"time must be epoch milliseconds or an ISO 8601 date-time such as "
                  f"2024-05-01T12:00:00Z, got {text[:40]!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max(0, int(moment.timestamp() * 1000))


def filters(args: Mapping[str, Any]) -> Filters:
    key, tag, value = (text_arg(args, n) for n in ("key", "tag", "value"))
    return Filters(None if key is None else key.encode(),
                   choice(args, "key_match", KEY_MATCHES) == "substring", tag,
                   None if value is None else value.encode())


def parse_cursor(raw: str, bounds: dict[int, OffsetBounds]) -> dict[int, int]:
    """``p:offset,...`` -> {p: offset}; an offset below earliest (retention moved on) starts
    at earliest."""
    out: dict[int, int] = {}
    for item in raw.split(",")[:len(bounds)]:
        p_text, _, off_text = item.partition(":")
        try:
            p, off = int(p_text), int(off_text)
        except ValueError:
            raise bad(f"cursor must be partition:offset pairs (as the next link gives), got "
                      f"{raw[:40]!r}") from None
        if p not in bounds:
            raise bad(f"cursor names partition {p}: the topic has partitions 0.."
                      f"{len(bounds) - 1}")
        if not 0 <= off <= bounds[p].latest:
            raise bad(f"cursor offset {off} of partition {p} must be between 0 and its latest "
                      f"offset {bounds[p].latest}")
        out[p] = max(off, bounds[p].earliest)
    return out


def plan(topic: str, args: Mapping[str, Any], bounds: dict[int, OffsetBounds]) -> Plan:
    """The ranges a request asks for; 400 naming the field and its limits for bad input."""
    mode = choice(args, "mode", MODES)
    limit = integer(args, "limit", DEFAULT_RECORDS, 1, MAX_RECORDS)
    partition = integer(args, "partition", None, 0, len(bounds) - 1) \
        if str(args.get("partition", "")) not in ("", "all") else None
    parts = sorted(bounds) if partition is None else [partition]
    scan_bytes = integer(args, "scan_bytes", MAX_SCAN_BYTES, 1024, MAX_SCAN_BYTES)
    fmt = choice(args, "format", FORMATS)
    made = Plan(topic, {}, limit, mode == "newest", filters(args), scan_bytes, fmt)
    cursor = str(args.get("cursor") or "")
    if mode == "range":
        made.ranges = _range(args, partition, bounds)
    elif mode == "time":
        if not args.get("time"):
            raise bad("time is required in time mode: epoch milliseconds or an ISO 8601 "
                      "date-time such as 2024-05-01T12:00:00Z")
        made.ranges = {p: (bounds[p].for_time, bounds[p].latest) for p in parts}
    else:
        made.ranges = {p: (bounds[p].earliest, bounds[p].latest) for p in parts}
    if cursor and made.newest_first:
        ends = parse_cursor(cursor, bounds)
        made.ranges = {p: (bounds[p].earliest, end) for p, end in ends.items()}
    elif cursor:
        starts = parse_cursor(cursor, bounds)
        made.ranges = {p: (starts[p], end) for p, end in
                       ((p, made.ranges.get(p, (0, bounds[p].latest))[1]) for p in starts)}
    return made


def _range(args: Mapping[str, Any], partition: int | None,
           bounds: dict[int, OffsetBounds]) -> dict[int, tuple[int, int]]:
    if partition is None:
        raise bad(f"partition is required in range mode (0..{len(bounds) - 1})")
    b = bounds[partition]
    start = integer(args, "from", b.earliest, b.earliest, b.latest)
    end = integer(args, "to", None, 0, MAX_OFFSET)
    if end is not None and end <= start:
        raise bad(f"to ({end}) must be greater than from ({start})")
    return {partition: (start, b.latest if end is None else min(end, b.latest))}
