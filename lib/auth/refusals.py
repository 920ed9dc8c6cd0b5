"""Refused calls and failed logins, summarised for the audit log; and the failed-login backoff.

Every refusal is worth knowing about, but a flood of bad calls must neither fill the audit log
nor cost the server more than a dict update per call. :class:`RefusalLog` counts refusals per
(principal, method, reason, source host) and hands out one summary per key and window
(``count`` says how many calls it stands for), at most ``max_keys`` of them; the calls past
that are folded into one overflow entry. So the audit log grows by at most ``max_keys + 1``
entries per window per server, whatever the flood.

:class:`LoginBackoff` slows password guessing from one source: from the ``free``-th failure
in a row on, each failure closes the source for a doubling delay (capped), during which logins
from it are refused without checking the password.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

MAX_FIELD = 200


@dataclass(frozen=True)
class Refusal:
    principal: str  # "" when nobody was identified
    method: str  # the gRPC method's short name
    reason: str
    peer: str  # the source host
    count: int
    first_ms: int


def host_of(peer: str) -> str:
    """``ipv4:127.0.0.1:5555`` -> ``127.0.0.1``; ``ipv6:[::1]:5555`` -> ``[::1]``."""
    address = peer.partition(":")[2] or peer
    return address.rsplit(":", 1)[0] if address.count(":") >= 1 else address


class RefusalLog:
    """Thread-safe: interceptors record on their threads, one flusher drains."""

    def __init__(self, window_s: float = 60.0, max_keys: int = 20,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s, self.max_keys, self._clock = window_s, max_keys, clock
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str, str, str], list[int]] = {}
        self._overflow = 0
        self._window_start = clock()

    def record(self, principal: str, method: str, reason: str, peer: str) -> None:
        key = (principal[:MAX_FIELD], method.rsplit("/", 1)[-1][:MAX_FIELD],
               reason[:MAX_FIELD], host_of(peer)[:MAX_FIELD])
        with self._lock:
            seen = self._counts.get(key)
            if seen is not None:
                seen[0] += 1
            elif len(self._counts) < self.max_keys:
                self._counts[key] = [1, int(time.time() * 1000)]
            else:
                self._overflow += 1

    def drain(self) -> list[Refusal]:
        """The summaries of the window that ended ([] while it runs): at most one drain per
        window, so a flusher may call this as often as it likes."""
        with self._lock:
            if self._clock() - self._window_start < self.window_s:
                return []
            counts, overflow = self._counts, self._overflow
            self._counts, self._overflow, self._window_start = {}, 0, self._clock()
        out = [Refusal(p, m, r, h, n, first) for (p, m, r, h), (n, first) in counts.items()]
        if overflow:
            out.append(Refusal("", "*", f"more refused calls of other kinds (over "
                                        f"{self.max_keys} kinds in the window)", "", overflow,
                               int(time.time() * 1000)))
        return out


class LoginBackoff:
    """Failed logins per source host; bounded memory (the least recently failing hosts are
    forgotten first)."""

    def __init__(self, free: int = 5, base_s: float = 1.0, max_s: float = 60.0,
                 max_hosts: int = 10_000, clock: Callable[[], float] = time.monotonic) -> None:
        self.free, self.base_s, self.max_s, self.max_hosts = free, base_s, max_s, max_hosts
        self._clock = clock
        self._lock = threading.Lock()
        self._hosts: OrderedDict[str, tuple[int, float]] = OrderedDict()  # failures, closed until

    def wait_s(self, peer: str) -> float:
        """Seconds until ``peer`` may try again (0: now)."""
        with self._lock:
            state = self._hosts.get(host_of(peer))
        return 0.0 if state is None else max(0.0, state[1] - self._clock())

    def failed(self, peer: str) -> None:
        host = host_of(peer)
        with self._lock:
            failures = self._hosts.pop(host, (0, 0.0))[0] + 1
            over = failures - self.free  # the free-th failure closes the host for base_s
            until = self._clock() + min(self.max_s, self.base_s * 2 ** min(over, 32)) \
                if over >= 0 else 0.0
            self._hosts[host] = (failures, until)
            while len(self._hosts) > self.max_hosts:
                self._hosts.popitem(last=False)

    def succeeded(self, peer: str) -> None:
        with self._lock:
            self._hosts.pop(host_of(peer), None)
