"""Where new partitions go: pure functions, deterministic, unit-tested.

A partition of a topic with replication factor R gets R replicas on distinct live brokers; the
first is its preferred leader. The leader is the broker holding the fewest replicas so far
(counting every topic), ties broken by the fewest leaderships, then by broker id; each follower
is then the least loaded broker on a rack the partition does not use yet (a broker that declared
no rack is a rack of its own), then the least loaded. Placing several partitions in a row
therefore spreads replicas and leaders round robin over equally loaded brokers, and a newly
added broker fills up first.

A draining broker (``tubeq broker drain``) takes no new replica; the ones it already hosts stay
there and still count in its load.
"""
from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from lib.errors import NotEnoughBrokers


def load_of(replica_sets: Iterable[list[int]], live: Iterable[int]) -> dict[int, int]:
    """Replicas per live broker over the replica lists of every partition of every topic."""
    load = {b: 0 for b in live}
    for replicas in replica_sets:
        for broker in replicas:
            if broker in load:
                load[broker] += 1
    return load


def place(count: int, load: Mapping[int, int], draining: Collection[int] = (), *,
          replication_factor: int = 1, leaders: Mapping[int, int] | None = None,
          racks: Mapping[int, str] | None = None) -> list[list[int]]:
    """Replica lists (preferred leader first) for ``count`` new partitions; ``load``: replicas
    per live broker, ``leaders``: leaderships per live broker (default: none yet)."""
    if count <= 0:
        return []
    current = {b: n for b, n in load.items() if b not in draining}
    if len(current) < replication_factor:
        raise _nowhere(count, replication_factor, sorted(load), sorted(current))
    led = {b: (leaders or {}).get(b, 0) for b in current}
    rack = {b: (racks or {}).get(b) or f"broker {b}" for b in current}
    out = []
    for _ in range(count):
        leader = min(current, key=lambda b: (current[b], led[b], b))
        chosen = [leader]
        while len(chosen) < replication_factor:
            used = {rack[b] for b in chosen}
            chosen.append(min((b for b in current if b not in chosen),
                              key=lambda b: (rack[b] in used, current[b], b)))
        for b in chosen:
            current[b] += 1
        led[leader] += 1
        out.append(chosen)
    return out


def _nowhere(count: int, replication_factor: int, live: list[int],
             usable: list[int]) -> NotEnoughBrokers:
    if not live:
        return NotEnoughBrokers(
            f"no live broker to place {count} partition(s) on: start a broker or wait for it "
            "to register", needed=count)
    if not usable:
        ids = ", ".join(map(str, live))
        return NotEnoughBrokers(
            f"no broker takes new partitions: every live broker is draining (broker(s) {ids}); "
            "undrain one (tubeq broker undrain ID) or start another broker", needed=count,
            draining=ids)
    ids = ", ".join(map(str, usable))
    return NotEnoughBrokers(
        f"replication_factor {replication_factor} needs {replication_factor} live brokers that "
        f"take new partitions; {len(usable)} do (broker(s) {ids}): start more brokers or ask "
        "for fewer copies", needed=replication_factor, usable=ids)
