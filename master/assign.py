"""Sticky balanced assignment of partitions to the members of a consumer group (pure).

Per topic, the partitions are split among the members subscribed to it so that their counts
differ by at most one. Of all balanced assignments, the one chosen keeps the most partitions
with their previous owner: members that already own the most get the larger quotas, each keeps
its previous partitions up to its quota (lowest numbers first), and only the rest move, to the
members below quota in member-id order. Same input, same output.
"""
from __future__ import annotations

from collections.abc import Mapping

Assignment = dict[str, dict[str, list[int]]]  # member -> topic -> sorted partitions


def assign(subscriptions: Mapping[str, list[str]], partitions: Mapping[str, int],
           previous: Mapping[str, Mapping[str, list[int]]] | None = None) -> Assignment:
    """``subscriptions``: member -> topics; ``partitions``: topic -> count (unknown: skipped)."""
    previous = previous or {}
    out: Assignment = {m: {} for m in subscriptions}
    topics = sorted({t for ts in subscriptions.values() for t in ts if t in partitions})
    for topic in topics:
        members = sorted(m for m, ts in subscriptions.items() if topic in ts)
        prev = {m: list(previous.get(m, {}).get(topic, [])) for m in members}
        for member, parts in _split(members, partitions[topic], prev).items():
            out[member][topic] = parts
    return out


def _split(members: list[str], count: int, prev: dict[str, list[int]]) -> dict[str, list[int]]:
    kept = _valid_previous(members, count, prev)
    base, extra = divmod(count, len(members))
    by_kept = sorted(members, key=lambda m: (-len(kept[m]), m))
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(by_kept)}
    result = {m: kept[m][:quota[m]] for m in members}
    taken = {p for parts in result.values() for p in parts}
    free = iter(p for p in range(count) if p not in taken)
    for m in members:
        while len(result[m]) < quota[m]:
            result[m].append(next(free))
        result[m].sort()
    return result


def _valid_previous(members: list[str], count: int,
                    prev: dict[str, list[int]]) -> dict[str, list[int]]:
    """Previous partitions still in range, each claimed by one member only (first by id)."""
    seen: set[int] = set()
    kept: dict[str, list[int]] = {}
    for m in members:
        parts = sorted({p for p in prev.get(m, []) if 0 <= p < count} - seen)
        seen.update(parts)
        kept[m] = parts
    return kept
