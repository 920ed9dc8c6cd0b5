"""What each broker must host, as registration and heartbeats send it, built once per change.

A broker's view is the settings of every topic, the placements of the partitions it holds a
copy of (leader, leader epoch, replicas, ISR, the leader's address) and the deleted topic
incarnations. At 10,000 topics that is 10,000 settings and placements: building, sending and
converging on it every heartbeat (each second) cost the master and the broker more CPU than
the records did. So a view is cached per broker under a stamp of everything it is made of (the
topics' version, the brokers' addresses), and carries a digest (BLAKE2b of its deterministic
encoding): a broker that names the digest of the view it applied is told "unchanged" instead
of being sent it again. The digest depends on the content only, so it holds across a master
failover (a new master computes the same one, or the broker gets the view once more).
"""
from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from typing import Any

from lib.proto import master_pb2 as mpb
from master import reassign, settings
from master.routes import RouteBook
from master.state import MetaState

DIGEST_BYTES = 16


@dataclass(frozen=True)
class BrokerView:
    topics: dict[str, mpb.TopicSettings]
    placements: list[mpb.PartitionPlacement]
    deleted: list[mpb.DeletedTopic]
    digest: bytes

    def unchanged_for(self, held: bytes) -> bool:
        """Whether a broker holding ``held`` (a digest; empty: none) needs nothing sent."""
        return bool(held) and held == self.digest


class BrokerViews:
    """The per-broker view cache (module docstring). Thread-safe."""

    def __init__(self, state: MetaState, routes: RouteBook) -> None:
        self.state, self.routes = state, routes
        self._lock = threading.Lock()
        self._views: dict[int, tuple[tuple[Any, ...], BrokerView]] = {}
        self.builds = 0  # views built, not served from the cache: tests see the caching

    def view(self, broker_id: int) -> BrokerView:
        # The stamp is taken before building: a change made meanwhile leaves a stale stamp
        # with the view, and the next call builds again.
        stamp = (self.state.topics_version(), self.routes.addresses_stamp())
        with self._lock:
            cached = self._views.get(broker_id)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        view = self._build(broker_id)
        with self._lock:
            self._views[broker_id] = (stamp, view)
            self.builds += 1
        return view

    def _build(self, broker_id: int) -> BrokerView:
        topics, placements = {}, []
        for name, record in self.state.topics().items():
            topics[name] = settings.to_pb(record["settings"], record["topic_id"])
            targets = reassign.targets(record)
            placements += [
                mpb.PartitionPlacement(
                    topic=name, partition=p, broker_id=broker_id,
                    leader=record["placement"][p], leader_epoch=record["leader_epochs"][p],
                    replicas=replicas, isr=record["isr"][p], target_replicas=targets[p],
                    leader_address=self.routes.address(record["placement"][p]))
                for p, replicas in enumerate(record["replicas"]) if broker_id in replicas]
        deleted = [mpb.DeletedTopic(topic=t["topic"], topic_id=t["topic_id"])
                   for t in self.state.tombstones()]
        encoded = mpb.BrokerHeartbeatResponse(
            topics=topics, placements=placements, deleted=deleted).SerializeToString(
            deterministic=True)
        return BrokerView(topics, placements, deleted,
                          hashlib.blake2b(encoded, digest_size=DIGEST_BYTES).digest())
