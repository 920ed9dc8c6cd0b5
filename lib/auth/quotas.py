"""Byte-rate quotas: the entries masters hold and the token buckets brokers enforce them with.

An entry limits ``user:<name>`` (every call of that principal), ``user:*`` (each principal
without an entry of its own, separately, as Kafka's default quotas), ``group:<name>`` or
``group:*`` (consumers that name the group: pull consumers in a group, push subscriptions) to
so many bytes per second of produce and of consume. A call is charged to its principal's quota
and, when it names a group, to the group's too; the longer of the two waits applies.

Each broker enforces every quota on its own traffic (a principal producing to three brokers
may reach three times its quota, as in Kafka), with a token bucket per (direction, entity)
that holds one second of burst and may go into debt: a call is served whole and its response
says how long the client must wait (``throttle_ms``) for the debt to be paid back, so the
client slows down to the quota instead of failing. A client that ignores this and runs more
than ``hard_limit_s`` of debt is refused with :class:`QuotaExceeded` (retriable, after
``retry_after_ms``), which names the quota: a stream of refusals, not a crash or lost data.
"""
from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from lib.errors import InvalidArgument, QuotaExceeded
from lib.names import check_name
from lib.proto import security_pb2 as spb

DIRECTIONS = ("produce", "consume")
KINDS = ("user", "group")
MAX_ENTRIES = 10_000
MAX_RATE = 1 << 40  # bytes/s: a terabyte per second is "no limit" in all but name
MIN_RATE = 1024  # below 1 KiB/s a single record would owe minutes
BURST_S = 1.0
HARD_LIMIT_S = 30.0
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 1 << 10, "m": 10**6, "mb": 10**6,
          "mib": 1 << 20, "g": 10**9, "gb": 10**9, "gib": 1 << 30}


@dataclass(frozen=True, order=True)
class Quota:
    entity: str  # user:<name>, user:*, group:<name>, group:*
    produce_bytes_per_s: int = 0  # 0: no limit
    consume_bytes_per_s: int = 0

    def __post_init__(self) -> None:
        kind, sep, name = self.entity.partition(":")
        if not sep or kind not in KINDS:
            raise InvalidArgument(f"quota entity must be user:<name>, user:*, group:<name> or "
                                  f"group:*, got {self.entity[:80]!r}")
        if name != "*":
            check_name(name, kind)
        for direction in DIRECTIONS:
            rate = self.rate(direction)
            if not isinstance(rate, int) or not (rate == 0 or MIN_RATE <= rate <= MAX_RATE):
                raise InvalidArgument(
                    f"{direction} quota of {self.entity} must be 0 (no limit) or "
                    f"{MIN_RATE} to {MAX_RATE} bytes/s, got {rate!r}", limit=MAX_RATE)
        if kind == "group" and self.produce_bytes_per_s:
            raise InvalidArgument(f"{self.entity}: a group quota limits consume only "
                                  "(producers belong to no group)")
        if not self.produce_bytes_per_s and not self.consume_bytes_per_s:
            raise InvalidArgument(f"quota of {self.entity} limits nothing: give a produce or "
                                  "a consume rate (tubeq quota remove deletes it)")

    def rate(self, direction: str) -> int:
        return self.produce_bytes_per_s if direction == "produce" else self.consume_bytes_per_s

    def describe(self) -> str:
        rates = [f"{d} {human_rate(self.rate(d))}" for d in DIRECTIONS if self.rate(d)]
        return f"{self.entity}: {', '.join(rates)}"


def human_rate(rate: int) -> str:
    """Exact: in the largest binary unit that divides it, else in bytes."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if rate and rate % size == 0:
            return f"{rate // size} {unit}/s"
    return f"{rate} B/s"


def parse_rate(text: str) -> int:
    """Bytes per second from ``1048576``, ``512KiB``, ``1MB``, ``2.5 MiB`` (``/s`` optional;
    ``0`` or ``none``: no limit)."""
    cleaned = text.strip().lower().removesuffix("/s").replace(" ", "")
    if cleaned in ("0", "none", "unlimited"):
        return 0
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([a-z]*)", cleaned)
    if match is None or match.group(2) not in _UNITS:
        raise InvalidArgument(f"rate {text[:40]!r} is not a number of bytes per second such "
                              "as 1048576, 512KiB or 10MB")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def to_pb(quota: Quota) -> spb.QuotaEntry:
    return spb.QuotaEntry(entity=quota.entity, produce_bytes_per_s=quota.produce_bytes_per_s,
                          consume_bytes_per_s=quota.consume_bytes_per_s)


def from_pb(entry: spb.QuotaEntry) -> Quota:
    return Quota(entry.entity, entry.produce_bytes_per_s, entry.consume_bytes_per_s)


class Bucket:
    """Tokens are bytes; they refill at ``rate`` up to ``rate * burst_s`` and may go negative
    (a debt the caller pays back by waiting)."""

    __slots__ = ("rate", "capacity", "tokens", "stamp")

    def __init__(self, rate: int, burst_s: float, now: float) -> None:
        self.rate = rate
        self.capacity = rate * burst_s
        self.tokens = self.capacity
        self.stamp = now

    def debt_s(self, now: float) -> float:
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        return max(0.0, -self.tokens) / self.rate

    def charge(self, nbytes: int, now: float) -> float:
        """Take ``nbytes``; the seconds until the debt is paid back (0: none)."""
        self.debt_s(now)
        self.tokens -= nbytes
        return max(0.0, -self.tokens) / self.rate


class QuotaBook:
    """A broker's copy of the quotas and its buckets; replaced whole by the masters' responses
    when the version differs. Costs one attribute test per call while no quota exists."""

    MAX_BUCKETS = 100_000  # beyond, buckets without debt are forgotten (they start full again)

    def __init__(self, burst_s: float = BURST_S, hard_limit_s: float = HARD_LIMIT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.burst_s, self.hard_limit_s, self._clock = burst_s, hard_limit_s, clock
        self.version = -1
        self._entries: dict[str, Quota] = {}
        self._buckets: dict[tuple[str, str], Bucket] = {}
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        return bool(self._entries)

    def replace(self, entries: Iterable[Quota], version: int) -> None:
        with self._lock:
            self._entries = {q.entity: q for q in entries}
            self._buckets.clear()  # rates may have changed: start from full buckets
            self.version = version

    def _limits(self, direction: str, principal: str, group: str
                ) -> list[tuple[str, str, int]]:
        """(entity charged, quota entry's entity, rate) of every quota that applies."""
        out = []
        for kind, name in (("user", principal), ("group", group)):
            if not name:
                continue
            entity = f"{kind}:{name}"
            quota = self._entries.get(entity) or self._entries.get(f"{kind}:*")
            if quota is not None and quota.rate(direction):
                out.append((entity, quota.entity, quota.rate(direction)))
        return out

    def _bucket(self, direction: str, entity: str, rate: int, now: float) -> Bucket:
        key = (direction, entity)
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= self.MAX_BUCKETS:
                self._buckets = {k: b for k, b in self._buckets.items() if b.debt_s(now) > 0}
            bucket = self._buckets[key] = Bucket(rate, self.burst_s, now)
        return bucket

    def admit(self, direction: str, principal: str, group: str = "") -> None:
        """QuotaExceeded when a quota of the call is more than ``hard_limit_s`` in debt (the
        client did not wait as told)."""
        if not self._entries:
            return
        with self._lock:
            now = self._clock()
            for entity, quota_entity, rate in self._limits(direction, principal, group):
                debt = self._bucket(direction, entity, rate, now).debt_s(now)
                if debt > self.hard_limit_s:
                    wait_ms = int((debt - self.hard_limit_s) * 1000) + 1
                    raise QuotaExceeded(
                        f"{direction} quota of {quota_entity} ({human_rate(rate)}) exceeded "
                        f"by {entity}: {debt:.1f} s of traffic ahead of it, more than the "
                        f"{self.hard_limit_s:g} s allowed; retry in {wait_ms} ms (clients "
                        "that wait the throttle_ms of each response never see this)",
                        quota=quota_entity, direction=direction, rate=rate,
                        retry_after_ms=wait_ms)

    def charge(self, direction: str, principal: str, group: str, nbytes: int) -> int:
        """Charge ``nbytes`` to every quota of the call; the milliseconds to wait (0: none)."""
        if not self._entries or nbytes <= 0:
            return 0
        with self._lock:
            now = self._clock()
            wait = max((self._bucket(direction, entity, rate, now).charge(nbytes, now)
                        for entity, _, rate in self._limits(direction, principal, group)),
                       default=0.0)
        return int(wait * 1000 + 0.999)
