"""Leader failover: which partitions need a new leader, and who it is. Pure, unit-tested.

The master is the controller (Kafka's design): when a partition's leader is no longer alive
(its broker stopped heartbeating), the first in-sync replica that is alive, in replica order,
takes over under the next leader epoch, and the ISR keeps only the live members. Only an ISR
member may lead: it holds every offset below the high watermark, so no acknowledged record a
consumer could have seen is lost. A partition with no live ISR member stays offline (led by
its last leader, reported unavailable) until one returns, unless its topic says
``unclean_leader_election``: then the first live replica leads alone (an "unclean" election,
marked so for the audit: records only the old ISR held are lost when a member returns and
truncates to the new leader). A clean shutdown's handoff is never unclean.

The result is a list of plain changes for the ``elect_leaders`` state command, each carrying
the epoch it was computed from, so a change computed on stale state is skipped when applied.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any


def handoff(topics: Mapping[str, dict[str, Any]], broker: int,
            alive: Collection[int]) -> list[dict[str, Any]]:
    """Changes for a broker stopping cleanly: its leaderships go as if it were dead, and it
    leaves the ISR of the partitions it follows (their high watermark must not wait for it)."""
    others = set(alive) - {broker}
    out = [c for c in elections(topics, others) if c["from_leader"] == broker]
    for name, record in sorted(topics.items()):
        for p, leader in enumerate(record["placement"]):
            isr = record["isr"][p]
            if leader != broker and leader in others and broker in isr:
                epoch = record["leader_epochs"][p]
                out.append({"topic": name, "topic_id": record["topic_id"], "partition": p,
                            "leader": leader, "from_leader": leader, "from_epoch": epoch,
                            "leader_epoch": epoch, "isr": [b for b in isr if b != broker]})
    return out


def partition_health(topics: Mapping[str, dict[str, Any]],
                     alive: Collection[int]) -> tuple[int, int]:
    """(under-replicated, offline) partition counts: fewer in-sync replicas than replicas,
    and no live leader (the metrics operators alert on)."""
    live = set(alive)
    under = offline = 0
    for record in topics.values():
        for p, leader in enumerate(record["placement"]):
            under += len(record["isr"][p]) < len(record["replicas"][p])
            offline += leader not in live
    return under, offline


def elections(topics: Mapping[str, dict[str, Any]], alive: Collection[int],
              allow_unclean: bool = False) -> list[dict[str, Any]]:
    """The leader changes to make now for every partition whose leader is not alive
    (``allow_unclean``: also unclean ones, for the topics whose settings allow them)."""
    live = set(alive)
    out = []
    for name, record in sorted(topics.items()):
        unclean_ok = allow_unclean and record.get("settings", {}).get("unclean_leader_election")
        for p, leader in enumerate(record["placement"]):
            if leader in live or len(record["replicas"][p]) < 2:
                continue
            isr = record["isr"][p]
            heirs = [b for b in record["replicas"][p] if b in isr and b in live]
            unclean = not heirs and unclean_ok
            if unclean:
                heirs = [b for b in record["replicas"][p] if b in live]
            if not heirs:
                continue  # offline until an in-sync replica returns
            epoch = record["leader_epochs"][p]
            change = {"topic": name, "topic_id": record["topic_id"], "partition": p,
                      "leader": heirs[0], "from_leader": leader, "from_epoch": epoch,
                      "leader_epoch": epoch + 1,
                      "isr": [heirs[0]] if unclean else [b for b in isr if b in live]}
            if unclean:
                change["unclean"] = True
            out.append(change)
    return out
