"""Partition reassignment: moving replicas between brokers with no downtime. Pure, unit-tested.

A reassignment gives a partition a **target** replica list. Until it is done, the partition's
replicas are the target followed by the current replicas that are in sync and not in it (a
current replica out of the ISR holds nothing the partition needs and goes at once): the new
replicas copy the partition from the leader like any follower, and the leader adds them to
the ISR once they caught up (broker/replication.py). The reassignment is **done** when every
target replica is in the ISR: the replicas become the target, the ISR keeps only its members,
and the brokers left out delete their copies (broker/topics.py).

If the leader stays (it is in the target), the master finishes as soon as the ISR covers the
target. If it leaves, the leader finishes it: it holds new writes, waits until the ISR holds
its whole log, then asks (AlterIsr ``complete_reassignment``), and the master elects the first
in-sync target replica under the next leader epoch; so no acknowledged record is lost, with
acks=1 too. A leader that dies meanwhile is replaced from the ISR in replica order (target
first), which leads to the same end.

Reassigning a partition to the replicas it has cancels a reassignment in progress (and may
change the preferred leader's order). Drains and replication factor changes are reassignments
computed here (:func:`drain_moves`, :func:`resize_moves`).
"""
from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from lib.errors import NotEnoughBrokers


def targets(record: dict[str, Any]) -> list[list[int]]:
    """Each partition's target replicas ([]: no reassignment in progress)."""
    found = record.get("targets") or []
    return [list(found[p]) if p < len(found) else [] for p in range(len(record["replicas"]))]


def _with(record: dict[str, Any], p: int, **fields: Any) -> dict[str, Any]:
    out = dict(record)
    for name, value in fields.items():
        items = targets(record) if name == "targets" else list(record[name])
        items[p] = value
        out[name] = items
    return out


def start(record: dict[str, Any], p: int, target: list[int]) -> dict[str, Any]:
    """``record`` with partition ``p`` reassigned to ``target`` (finished at once when it
    needs no copy and keeps the leader)."""
    replicas, isr = record["replicas"][p], record["isr"][p]
    if set(target) == set(replicas):
        return _with(record, p, replicas=list(target), targets=[])
    kept = [b for b in replicas if b not in target and b in isr]
    moving = _with(record, p, replicas=list(target) + kept, targets=list(target))
    return finish(moving, p, leader_may_leave=False)


def finish(record: dict[str, Any], p: int, leader_may_leave: bool) -> dict[str, Any]:
    """``record`` with partition ``p``'s reassignment done, when every target replica is in
    sync and either the leader stays or ``leader_may_leave`` (the leader asked, holding its
    writes); else ``record`` itself."""
    target, isr = targets(record)[p], record["isr"][p]
    if not target or not set(target) <= set(isr):
        return record
    leader = record["placement"][p]
    new_isr = [b for b in isr if b in target]
    if leader in target:
        return _with(record, p, replicas=list(target), isr=new_isr, targets=[])
    if not leader_may_leave:
        return record
    heir = next(b for b in target if b in new_isr)
    return _with(record, p, replicas=list(target), isr=new_isr, targets=[], placement=heir,
                 leader_epochs=record["leader_epochs"][p] + 1)


def in_progress(record: dict[str, Any]) -> list[int]:
    """The partitions of a topic with a reassignment in progress."""
    return [p for p, target in enumerate(targets(record)) if target]


def drain_moves(topics: Mapping[str, dict[str, Any]], broker: int, load: Mapping[int, int],
                draining: Collection[int], racks: Mapping[int, str] | None = None
                ) -> tuple[list[dict[str, Any]], list[tuple[str, int]]]:
    """Reassignments that move every replica ``broker`` holds (or is about to) to another
    live broker that takes new partitions: (changes, partitions that no broker can take)."""
    usable = {b: n for b, n in load.items() if b not in draining and b != broker}
    changes, stuck = [], []
    for name, record in sorted(topics.items()):
        for p, target in enumerate(targets(record)):
            wanted = target or record["replicas"][p]
            if broker not in wanted:
                continue
            rest = [b for b in wanted if b != broker]
            extra = _more(rest, 1, usable, racks)
            if extra is None:
                stuck.append((name, p))
                continue
            at = wanted.index(broker)
            changes.append(_change(record, p, rest[:at] + extra + rest[at:]))
            usable[extra[0]] += 1
    return changes, stuck


def resize_moves(record: dict[str, Any], replication_factor: int, load: Mapping[int, int],
                 draining: Collection[int], racks: Mapping[int, str] | None = None
                 ) -> list[dict[str, Any]]:
    """Reassignments giving every partition of a topic ``replication_factor`` replicas: the
    least loaded brokers are added; on the way down the leader and the in-sync replicas stay
    first. NotEnoughBrokers when too few live brokers take new partitions."""
    usable = {b: n for b, n in load.items() if b not in draining}
    changes = []
    for p, replicas in enumerate(record["replicas"]):
        if len(replicas) < replication_factor:
            extra = _more(replicas, replication_factor - len(replicas), usable, racks)
            if extra is None:
                ids = ", ".join(map(str, sorted(usable))) or "none"
                raise NotEnoughBrokers(
                    f"replication_factor {replication_factor} needs {replication_factor} live "
                    f"brokers that take new partitions; {len(usable)} do (broker(s) {ids}): "
                    "start more brokers or ask for fewer copies", needed=replication_factor,
                    usable=ids)
            target = replicas + extra
        elif len(replicas) > replication_factor:
            leader, isr = record["placement"][p], record["isr"][p]
            ranked = sorted(replicas, key=lambda b: (b != leader, b not in isr))
            target = [b for b in replicas if b in ranked[:replication_factor]]
        else:
            continue
        changes.append(_change(record, p, target))
        for b in target:
            if b not in replicas and b in usable:
                usable[b] += 1
    return changes


def _more(current: list[int], count: int, usable: Mapping[int, int],
          racks: Mapping[int, str] | None) -> list[int] | None:
    """``count`` brokers to add to ``current`` (least loaded, on racks it does not use yet),
    or None when too few usable brokers are left."""
    free = {b: n for b, n in usable.items() if b not in current}
    if len(free) < count:
        return None
    rack = {b: (racks or {}).get(b) or f"broker {b}" for b in free}
    used = {(racks or {}).get(b) or f"broker {b}" for b in current}
    chosen: list[int] = []
    for _ in range(count):
        best = min((b for b in free if b not in chosen),
                   key=lambda b: (rack[b] in used, free[b], b))
        chosen.append(best)
        used.add(rack[best])
    return chosen


def _change(record: dict[str, Any], p: int, target: list[int]) -> dict[str, Any]:
    return {"topic": record["topic"], "topic_id": record["topic_id"], "partition": p,
            "target": target}
