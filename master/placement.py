"""Where new partitions go: pure functions, deterministic, unit-tested.

Each new partition goes to the live broker holding the fewest partitions so far (counting every
topic), ties broken by broker id. Placing several partitions in a row therefore spreads them
round robin over equally loaded brokers, and a newly added broker fills up first.

A draining broker (``tubeq broker drain``) takes no new partition; the partitions it already
hosts stay there (moving them needs replication, a later issue) and still count in its load.
"""
from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from lib.errors import NotEnoughBrokers


def load_of(placements: Iterable[list[int]], live: Iterable[int]) -> dict[int, int]:
    """Partitions per live broker over every topic's placement list."""
    load = {b: 0 for b in live}
    for placement in placements:
        for broker in placement:
            if broker in load:
                load[broker] += 1
    return load


def place(count: int, load: Mapping[int, int], draining: Collection[int] = ()) -> list[int]:
    """Broker ids for ``count`` new partitions, least loaded first (``load`` = live brokers),
    never a broker of ``draining``."""
    if count <= 0:
        return []
    current = {b: n for b, n in load.items() if b not in draining}
    if not current:
        raise _nowhere(count, sorted(load))
    out = []
    for _ in range(count):
        broker = min(current, key=lambda b: (current[b], b))
        out.append(broker)
        current[broker] += 1
    return out


def _nowhere(count: int, live: list[int]) -> NotEnoughBrokers:
    if not live:
        return NotEnoughBrokers(
            f"no live broker to place {count} partition(s) on: start a broker or wait for it "
            "to register", needed=count)
    ids = ", ".join(map(str, live))
    return NotEnoughBrokers(
        f"no broker takes new partitions: every live broker is draining (broker(s) {ids}); "
        "undrain one (tubeq broker undrain ID) or start another broker", needed=count,
        draining=ids)
