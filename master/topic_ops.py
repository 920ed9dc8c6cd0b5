"""Topic administration: create, alter, delete, describe.

Validation and placement happen here, against the live broker registry; the change itself is
one state command (with its audit entry), so the same command can later go through Raft.
A lock (``placing``) serialises "compute placement, then apply" so concurrent creates still
spread evenly, and so a broker being drained (master/broker_ops.py) is never given a partition
after its drain answered. Placement skips draining brokers (master/placement.py); a topic's
replicas, leaders, leader epochs and ISR live in its state record (master/state_topics.py).
"""
from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from lib.delay import DELAY_TOPIC, RESERVED_TOPICS, RETENTION_MARGIN_MS
from lib.errors import InvalidArgument, TopicExists, UnknownBroker, UnknownTopic
from lib.names import check_name
from lib.proto import admin_pb2 as apb
from lib.proto import master_pb2 as mpb
from lib.retry import dead_letter_topic, retry_topic
from master import placement, reassign, settings
from master.broker_calls import BrokerCalls
from master.brokers import BrokerRegistry, wall_ms
from master.config import MAX_MESSAGE_LIMIT, MasterConfig
from master.groups import GroupCoordinator
from master.routes import RouteBook
from master.state import MetaState


class TopicOps:
    def __init__(self, config: MasterConfig, state: MetaState, registry: BrokerRegistry,
                 groups: GroupCoordinator, routes: RouteBook, calls: BrokerCalls,
                 write: Callable[[dict[str, Any]], Any]) -> None:
        self.config, self.state, self.registry = config, state, registry
        self.groups, self.routes, self.calls = groups, routes, calls
        self.write = write  # replicates a state command (Raft) and returns its result
        self.placing = threading.Lock()

    def create(self, name: str, pb: mpb.TopicSettings | None, audit: dict[str, Any],
               request_id: str = "", internal: bool = False,
               owner: dict[str, str] | None = None) -> dict[str, Any]:
        check_name(name, "topic")
        if not internal:
            _not_reserved(name, "created")
        wanted = settings.for_create(pb, self.config)
        with self.placing:
            known = self.state.topic(name)
            if request_id and known and known.get("request_id") == request_id:
                return known  # a retry of a create that committed
            replicas = self._place(wanted["partitions"], wanted["replication_factor"])
            return self.write({
                "op": "create_topic", "time_ms": wall_ms(), "topic": name, "settings": wanted,
                "replicas": replicas, "max_topics": self.config.max_topics,
                "request_id": request_id, **({"owner": owner} if owner else {}),
                "audit": _audit(audit, "create_topic", name, {**wanted, "replicas": replicas})})

    def ensure_delay_topic(self) -> None:
        """Create ``tubeq.delayed`` on first use (lib/delay.py): its retention carries the
        longest delay, its replication factor the cluster's (at most 3, as live brokers
        allow)."""
        if self.state.topic(DELAY_TOPIC) is not None:
            return
        cfg = self.config
        rf = cfg.delay_replication_factor or max(1, min(3, len(self.registry.alive_ids())))
        pb = mpb.TopicSettings(
            partitions=cfg.delay_partitions, stores=cfg.delay_partitions, durability="async",
            retention_ms=cfg.max_delay_ms + RETENTION_MARGIN_MS, retention_bytes=-1,
            max_message_bytes=MAX_MESSAGE_LIMIT, replication_factor=rf,
            min_insync_replicas=min(2, rf))
        try:
            self.create(DELAY_TOPIC, pb, {"principal": "controller", "peer": "delayed messages"},
                        request_id="create-delay-topic", internal=True)
        except TopicExists:
            pass  # a concurrent first use made it

    def ensure_group_topics(self, group: str, dead_letters: str,
                            audit: dict[str, Any]) -> tuple[str, str]:
        """A group's retry and dead-letter topics (lib/retry.py), made when missing with one
        partition and the cluster's defaults, owned by the group; a dead-letter name that is
        already a topic of anything else is refused."""
        check_name(group, "group")
        names = {"retry": retry_topic(group), "dlq": dead_letter_topic(group, dead_letters)}
        for role, name in names.items():
            check_name(name, "topic")
            known = self.state.topic(name)
            if known is not None:
                if known.get("owner") != {"group": group, "role": role}:
                    raise InvalidArgument(
                        f"{'dead-letter' if role == 'dlq' else 'retry'} topic {name!r} of group "
                        f"{group!r} is already a topic of its own (or another group's): name "
                        "another dead_letter_topic, or delete that topic", topic=name,
                        group=group)
                continue
            try:
                self.create(name, mpb.TopicSettings(partitions=1), {
                    **audit, "principal": audit.get("principal") or "controller"},
                    request_id=f"group-topic-{group}-{role}", internal=False,
                    owner={"group": group, "role": role})
            except TopicExists:
                pass  # another member made it meanwhile: checked on its next call
        return names["retry"], names["dlq"]

    def alter(self, name: str, pb: mpb.TopicSettings | None,
              audit: dict[str, Any]) -> dict[str, Any]:
        check_name(name, "topic")
        _not_reserved(name, "altered")
        with self.placing:
            current = self._existing(name)
            wanted = settings.for_alter(current["settings"], pb, self.config)
            added = wanted["partitions"] - current["settings"]["partitions"]
            moves = self._resize(current, wanted["replication_factor"])
            new = self._place(added, wanted["replication_factor"])
            changes = {k: v for k, v in wanted.items() if current["settings"][k] != v}
            details = {**changes, "new_replicas": new,
                       "reassign": {m["partition"]: m["target"] for m in moves}}
            record = self.write({
                "op": "alter_topic", "time_ms": wall_ms(), "topic": name, "settings": wanted,
                "replicas": current["replicas"] + new, "reassign": moves,
                "audit": _audit(audit, "alter_topic", name, details)})
        if added:
            self.groups.topics_changed({name})
        return record

    def reassign(self, name: str, wanted: dict[int, list[int]],
                 audit: dict[str, Any]) -> dict[str, Any]:
        """Move partitions of ``name`` to the replicas given (master/reassign.py); each list
        names live, undrained brokers, as many as the topic's replication factor."""
        check_name(name, "topic")
        with self.placing:
            record = self._existing(name)
            if not wanted:
                raise InvalidArgument(f"reassignment of {name!r} names no partition")
            changes = [{"topic": name, "topic_id": record["topic_id"], "partition": p,
                        "target": self._check_target(record, p, replicas)}
                       for p, replicas in sorted(wanted.items())]
            self.write({"op": "reassign", "time_ms": wall_ms(), "changes": changes,
                        "audit": _audit(audit, "reassign_partitions", name,
                                        {c["partition"]: c["target"] for c in changes})})
        return self._existing(name)

    def _check_target(self, record: dict[str, Any], p: int, replicas: list[int]) -> list[int]:
        name, rf = record["topic"], record["settings"]["replication_factor"]
        if not 0 <= p < len(record["replicas"]):
            raise InvalidArgument(f"topic {name} has partitions 0..{len(record['replicas']) - 1}"
                                  f", not {p}", topic=name, partition=p)
        if len(replicas) != rf or len(set(replicas)) != len(replicas):
            raise InvalidArgument(
                f"reassignment of {name}/{p} to {replicas}: needs {rf} distinct brokers (the "
                "topic's replication_factor; change it with topic alter --replication-factor)",
                topic=name, partition=p, replication_factor=rf)
        current = set(record["replicas"][p])
        for b in replicas:
            if b not in self.state.brokers():
                raise UnknownBroker(f"reassignment of {name}/{p}: unknown broker {b}: no broker "
                                    "with this id ever registered", broker_id=b)
            if b not in current and not self.registry.is_alive(b):
                raise InvalidArgument(f"reassignment of {name}/{p}: broker {b} is not alive, "
                                      "so it could not copy the partition", broker_id=b)
            if b not in current and b in self.state.draining():
                raise InvalidArgument(f"reassignment of {name}/{p}: broker {b} is draining "
                                      f"(tubeq broker undrain {b} first)", broker_id=b)
        return list(replicas)

    def _resize(self, current: dict[str, Any], replication_factor: int) -> list[dict[str, Any]]:
        """Reassignments for a replication factor change (none when it stays)."""
        if replication_factor == current["settings"]["replication_factor"]:
            return []
        busy = reassign.in_progress(current)
        if busy:
            raise InvalidArgument(
                f"cannot change the replication factor of {current['topic']!r} while partitions "
                f"{busy} are being reassigned: wait for them (topic describe) or cancel by "
                "reassigning them to their current replicas", topic=current["topic"])
        load, _ = self.loads()
        return reassign.resize_moves(current, replication_factor, load, self.state.draining(),
                                     self.registry.racks())

    def delete(self, name: str, audit: dict[str, Any]) -> None:
        check_name(name, "topic")
        _not_reserved(name, "deleted")
        with self.placing:
            old = self._existing(name)
            self.write({"op": "delete_topic", "time_ms": wall_ms(), "topic": name,
                              "audit": _audit(audit, "delete_topic", name,
                                              {"topic_id": old["topic_id"]})})
        self.groups.topics_changed({name})

    def describe(self, name: str, live: bool = True) -> apb.TopicDescription:
        """Settings and partitions; offsets asked of the brokers (``live``) else last stats."""
        check_name(name, "topic")
        record = self._existing(name)
        offsets = self._live_offsets(record) if live else {}
        parts = []
        for route in self.routes.partitions(record):
            stat = self.registry.stat(route.broker_id, record["topic"], route.partition)
            earliest, latest, stable = offsets.get(route.partition) or (
                (-1, -1, -1) if stat is None else (stat.earliest, stat.latest,
                                                   stat.last_stable))
            parts.append(apb.PartitionDescription(
                partition=route.partition, broker_id=route.broker_id, address=route.address,
                available=route.available, earliest=earliest, latest=latest,
                last_stable=stable,
                disk_bytes=-1 if stat is None else stat.disk_bytes,
                leader_epoch=route.leader_epoch, replicas=route.replicas, isr=route.isr,
                replica_lags=self._lags(record["topic"], route, latest),
                target_replicas=route.target_replicas))
        owner = record.get("owner") or {}
        return apb.TopicDescription(
            topic=name, settings=settings.to_pb(record["settings"], record["topic_id"]),
            partitions=parts, created_ms=record["created_ms"],
            owner_group=owner.get("group", ""), owner_role=owner.get("role", ""))

    def _lags(self, topic: str, route: mpb.PartitionRoute, latest: int) -> list[int]:
        """Offsets each replica is behind the leader's ``latest``, from its own heartbeat
        stats (a follower reports its copy's log end); -1 when either is unknown."""
        lags = []
        for b in route.replicas:
            stat = self.registry.stat(b, topic, route.partition)
            end = latest if b == route.broker_id else (-1 if stat is None else stat.latest)
            lags.append(-1 if end < 0 or latest < 0 else max(0, latest - end))
        return lags

    def _live_offsets(self, record: dict[str, Any]) -> dict[int, tuple[int, int, int]]:
        jobs = {}
        for broker, parts in self.routes.by_broker(record).items():
            address = self.routes.address(broker)
            if address and self.registry.is_alive(broker):
                jobs[broker] = (lambda a=address, ps=parts:
                                self.calls.list_offsets(a, record["topic"], ps))
        out: dict[int, tuple[int, int, int]] = {}
        for result in self.calls.each(jobs).values():
            if isinstance(result, dict):
                out.update({p: (po.earliest, po.latest, po.last_stable)
                            for p, po in result.items()})
        return out

    def _existing(self, name: str) -> dict[str, Any]:
        record = self.state.topic(name)
        if record is None:
            raise UnknownTopic(f"unknown topic {name!r}", topic=name)
        return record

    def _place(self, count: int, replication_factor: int) -> list[list[int]]:
        """Replica lists for ``count`` new partitions, given every topic's current ones."""
        load, leaders = self.loads()
        return placement.place(count, load, self.state.draining(),
                               replication_factor=replication_factor, leaders=leaders,
                               racks=self.registry.racks())

    def loads(self) -> tuple[dict[int, int], dict[int, int]]:
        """(replicas, leaderships) per live broker, over every topic."""
        if self.groups.in_grace():  # a new leader: let the brokers re-register first
            self.registry.wait_alive(set(self.state.brokers()), self.groups.grace_left_s())
        topics = self.state.topics().values()
        live = self.registry.alive_ids()
        return (placement.load_of((r for t in topics for r in t["replicas"]), live),
                placement.load_of(([b] for t in topics for b in t["placement"]), live))


def _audit(base: dict[str, Any], action: str, target: str,
           details: dict[str, Any]) -> dict[str, Any]:
    return {**base, "action": action, "target": target,
            "details": json.dumps(details, sort_keys=True)}


def _not_reserved(name: str, what: str) -> None:
    if name in RESERVED_TOPICS:
        raise InvalidArgument(
            f"topic {name!r} is reserved for the cluster (delayed messages: docs/delayed.md); "
            f"it cannot be {what} by a client", topic=name)
