"""Where new partitions go: pure functions, deterministic, unit-tested.

Each new partition goes to the live broker holding the fewest partitions so far (counting every
topic), ties broken by broker id. Placing several partitions in a row therefore spreads them
round robin over equally loaded brokers, and a newly added broker fills up first.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from lib.errors import NotEnoughBrokers


def load_of(placements: Iterable[list[int]], live: Iterable[int]) -> dict[int, int]:
    """Partitions per live broker over every topic's placement list."""
    load = {b: 0 for b in live}
    for placement in placements:
        for broker in placement:
            if broker in load:
                load[broker] += 1
    return load


def place(count: int, load: Mapping[int, int]) -> list[int]:
    """Broker ids for ``count`` new partitions, least loaded first (``load`` = live brokers)."""
    if count <= 0:
        return []
    if not load:
        raise NotEnoughBrokers(
            f"no live broker to place {count} partition(s) on: start a broker or wait for it "
            "to register", needed=count)
    current = dict(load)
    out = []
    for _ in range(count):
        broker = min(current, key=lambda b: (current[b], b))
        out.append(broker)
        current[broker] += 1
    return out
