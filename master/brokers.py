"""Live broker registry: who registered since this master started, who still heartbeats.

Live state only (in memory, on the active master): after a restart or failover every broker
registers again. A broker is alive while its last heartbeat (or registration) is younger than
``timeout_ms``; a dead broker's partitions are reported unavailable, and the leaderships of
its replicated partitions move (master/election.py). A broker is *suspected* sooner: when a
live broker reports that its fetches from it fail and it has not heartbeated for
``suspect_after_ms`` either (:meth:`BrokerRegistry.suspects`); elections treat it as down.
The latest per-partition stats and disk status of each heartbeat are kept for describe and
``tubeq broker list``.
The clock is injectable (monotonic ms) so expiry is unit-testable. Thread-safe.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from lib.errors import InvalidArgument


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


def wall_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class PartitionStat:
    earliest: int
    latest: int
    bytes_in: int = 0
    messages_in: int = 0
    bytes_out: int = 0
    messages_out: int = 0
    disk_bytes: int = 0
    last_stable: int = -1


@dataclass(frozen=True)
class DiskState:
    """A broker's data dir as of its last heartbeat; ``full``: it refuses appends (DiskFull)."""

    free_bytes: int
    reserve_bytes: int
    full: bool


@dataclass
class LiveBroker:
    broker_id: int
    address: str
    last_seen: int  # monotonic ms
    last_heartbeat_ms: int  # wall clock, for humans
    stats: dict[tuple[str, int], PartitionStat] = field(default_factory=dict)
    disk: DiskState | None = None  # None until a heartbeat reports it
    rack: str = ""  # as the broker declared it: placement puts replicas on distinct racks
    unreachable: frozenset[int] = frozenset()  # leaders it cannot fetch from, it says
    kafka_address: str = ""  # its Kafka protocol listener, when it has one


def check_address(address: str) -> str:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidArgument(f"bad broker address {address!r}: expected host:port",
                              address=address)
    return address


MAX_RACK_CHARS = 64


def check_rack(rack: str) -> str:
    if len(rack) > MAX_RACK_CHARS or not rack.isprintable():
        raise InvalidArgument(f"bad broker rack {rack[:MAX_RACK_CHARS]!r}: at most "
                              f"{MAX_RACK_CHARS} printable characters", rack=rack[:80])
    return rack


class BrokerRegistry:
    def __init__(self, timeout_ms: int, clock: Callable[[], int] = monotonic_ms,
                 wall: Callable[[], int] = wall_ms) -> None:
        self.timeout_ms = timeout_ms
        self._clock, self._wall = clock, wall
        self._lock = threading.Lock()
        self._brokers: dict[int, LiveBroker] = {}

    def clear(self) -> None:
        """Forget every broker (a new leadership: they register again)."""
        with self._lock:
            self._brokers.clear()

    def wait_alive(self, broker_ids: set[int], timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) until every one of ``broker_ids`` is alive."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not broker_ids <= set(self.alive_ids()):
            time.sleep(0.05)

    def register(self, broker_id: int, address: str, rack: str = "",
                 kafka_address: str = "") -> None:
        """(Re)register: a restarted broker starts with fresh stats."""
        if broker_id < 0:
            raise InvalidArgument(f"broker_id must be >= 0, got {broker_id}")
        check_address(address)
        check_rack(rack)
        if kafka_address:
            check_address(kafka_address)
        with self._lock:
            self._brokers[broker_id] = LiveBroker(broker_id, address, self._clock(), self._wall(),
                                                  rack=rack, kafka_address=kafka_address)

    def kafka_addresses(self) -> dict[int, str]:
        """Broker id -> Kafka listener of every live broker that has one."""
        with self._lock:
            return {b: live.kafka_address for b, live in self._brokers.items()
                    if live.kafka_address and self._fresh(live)}

    def heartbeat(self, broker_id: int, stats: Iterable[tuple[str, int, PartitionStat]],
                  disk: DiskState | None = None, unreachable: Iterable[int] = (),
                  partial: bool = False) -> bool:
        """Record a heartbeat; False when the broker must register first. ``partial``:
        ``stats`` holds only the partitions that changed (the rest keep theirs)."""
        with self._lock:
            live = self._brokers.get(broker_id)
            if live is None:
                return False
            live.last_seen, live.last_heartbeat_ms = self._clock(), self._wall()
            fresh = {(t, p): s for t, p, s in stats}
            live.stats = {**live.stats, **fresh} if partial else fresh
            live.disk = disk
            live.unreachable = frozenset(unreachable) - {broker_id}
            return True

    def suspects(self, suspect_after_ms: int) -> set[int]:
        """Live brokers that a live broker cannot fetch from and that have not heartbeated
        for ``suspect_after_ms``: down, most likely, before ``timeout_ms`` says so. Both
        must hold: a broker cut off from its followers only still heartbeats, and a broker
        that is merely slow to heartbeat is still reached by its followers."""
        with self._lock:
            now = self._clock()
            said = {b for live in self._brokers.values() if self._fresh(live)
                    for b in live.unreachable}
            return {b for b in said if (live := self._brokers.get(b)) is not None
                    and self._fresh(live) and now - live.last_seen > suspect_after_ms}

    def is_alive(self, broker_id: int) -> bool:
        with self._lock:
            live = self._brokers.get(broker_id)
            return live is not None and self._fresh(live)

    def alive_ids(self) -> list[int]:
        with self._lock:
            return sorted(b for b, live in self._brokers.items() if self._fresh(live))

    def address(self, broker_id: int) -> str | None:
        with self._lock:
            live = self._brokers.get(broker_id)
            return None if live is None else live.address

    def addresses(self) -> dict[int, str]:
        """Broker id -> address of every broker registered here (live or not yet expired)."""
        with self._lock:
            return {b: live.address for b, live in self._brokers.items()}

    def racks(self) -> dict[int, str]:
        """Broker id -> rack of every live broker that declared one."""
        with self._lock:
            return {b: live.rack for b, live in self._brokers.items()
                    if live.rack and self._fresh(live)}

    def rack(self, broker_id: int) -> str:
        with self._lock:
            live = self._brokers.get(broker_id)
            return "" if live is None else live.rack

    def stat(self, broker_id: int, topic: str, partition: int) -> PartitionStat | None:
        with self._lock:
            live = self._brokers.get(broker_id)
            return None if live is None else live.stats.get((topic, partition))

    def snapshot(self) -> list[tuple[int, str, bool, int, DiskState | None]]:
        """(broker_id, address, alive, last_heartbeat_ms, disk) of every registered broker."""
        with self._lock:
            return [(b, live.address, self._fresh(live), live.last_heartbeat_ms, live.disk)
                    for b, live in sorted(self._brokers.items())]

    def _fresh(self, live: LiveBroker) -> bool:
        return self._clock() - live.last_seen <= self.timeout_ms
