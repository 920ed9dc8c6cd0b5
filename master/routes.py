"""Where each partition lives, as clients and admins see it: built from state + live registry.

A route names the partition's leader (``broker_id``: produce and fetch go there), its leader
epoch, replicas (with their addresses: the exactly-once sink stages copies on the followers)
and in-sync replicas. A partition is available when its leader is alive.
Addresses come from the live registry, else from the last address the broker registered with
(persisted), so a route to a broker that is down still names it.
"""
from __future__ import annotations

from typing import Any

from lib.proto import master_pb2 as mpb
from master import reassign, settings
from master.brokers import BrokerRegistry
from master.state import MetaState


class RouteBook:
    def __init__(self, state: MetaState, registry: BrokerRegistry) -> None:
        self.state, self.registry = state, registry

    def address(self, broker_id: int) -> str:
        return self.registry.address(broker_id) or self.state.brokers().get(broker_id, "")

    def addresses_stamp(self) -> tuple[tuple[tuple[int, str], ...], ...]:
        """Every address :meth:`address` may answer, to tell when one changed."""
        return (tuple(sorted(self.registry.addresses().items())),
                tuple(sorted(self.state.brokers().items())))

    def partitions(self, record: dict[str, Any]) -> list[mpb.PartitionRoute]:
        alive = set(self.registry.alive_ids())
        known = self.state.brokers()
        out, targets = [], reassign.targets(record)
        for p, broker in enumerate(record["placement"]):
            address = self.registry.address(broker) or known.get(broker, "")
            out.append(mpb.PartitionRoute(
                partition=p, broker_id=broker, address=address, available=broker in alive,
                leader_epoch=record["leader_epochs"][p], replicas=record["replicas"][p],
                isr=record["isr"][p], target_replicas=targets[p],
                replica_addresses=[self.registry.address(b) or known.get(b, "")
                                   for b in record["replicas"][p]]))
        return out

    def route(self, record: dict[str, Any]) -> mpb.TopicRoute:
        return mpb.TopicRoute(topic=record["topic"], partitions=self.partitions(record),
                              settings=settings.to_pb(record["settings"], record["topic_id"]))

    def routes(self, names: list[str] | tuple[str, ...]) -> list[mpb.TopicRoute]:
        """Routes of ``names`` (all topics when empty); unknown names are skipped."""
        topics = self.state.topics()
        chosen = sorted(topics) if not names else [n for n in dict.fromkeys(names) if n in topics]
        return [self.route(topics[n]) for n in chosen]

    def by_broker(self, record: dict[str, Any],
                  partitions: list[int] | None = None) -> dict[int, list[int]]:
        """broker id -> partitions of ``record`` (all, or the listed ones) it hosts."""
        out: dict[int, list[int]] = {}
        wanted = range(len(record["placement"])) if partitions is None else partitions
        for p in wanted:
            out.setdefault(record["placement"][p], []).append(p)
        return out
