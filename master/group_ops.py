"""Group administration: describe (members, committed offsets, lag) and reset offsets.

Committed offsets live on the brokers, so both operations ask the broker owning each partition:
FetchOffsets WITHOUT a member id (reading never claims), ListOffsets for earliest/latest (and
time lookups), and for a reset the master-only ResetOffsets carrying the master's term. Every
target offset is computed and checked before the first broker is changed, so a bad request
changes nothing.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from lib.errors import (
    GroupNotEmpty,
    InvalidArgument,
    OffsetOutOfRange,
    PartitionNotHosted,
    TubeqError,
    UnknownPartition,
    UnknownTopic,
)
from lib.names import check_instance_id, check_name
from lib.proto import admin_pb2 as apb
from lib.proto import master_pb2 as mpb
from master.broker_calls import NO_TIME, BrokerCalls
from master.brokers import wall_ms
from master.groups import GroupCoordinator
from master.routes import RouteBook
from master.state import MetaState


class GroupOps:
    def __init__(self, state: MetaState, groups: GroupCoordinator, routes: RouteBook,
                 calls: BrokerCalls, write: Callable[[dict[str, Any]], Any]) -> None:
        self.state, self.groups, self.routes, self.calls = state, groups, routes, calls
        self.write = write  # replicates a state command (Raft)

    def list(self) -> list[str]:
        return sorted(set(self.state.groups()) | set(self.groups.live_groups()))

    def describe(self, group: str) -> apb.GroupDescription:
        check_name(group, "group")
        generation, members = self.groups.describe(group)
        mode = self.groups.mode(group)
        owner = {(t, p): m.member_id for m, assigned in members if not m.instance_id
                 for t, parts in assigned.items() for p in parts}
        live = {m.instance_id: m.member_id for m, _ in members if m.instance_id}
        recorded = self.state.groups().get(group, {}).get("topics", [])
        topics = sorted(set(recorded) | {t for m, _ in members for t in m.topics})
        rows = []
        for topic in topics:
            record = self.state.topic(topic)
            if record is not None:
                rows += self._lags(group, record, owner, live, mode)
        return apb.GroupDescription(
            group=group, generation=generation, partitions=rows, mode=mode,
            members=[apb.MemberDescription(
                member_id=m.member_id, client_host=m.client_host,
                last_heartbeat_ms=m.last_heartbeat_ms, instance_id=m.instance_id,
                assignments=[mpb.Assignment(topic=t, partitions=ps)
                             for t, ps in sorted(assigned.items())])
                for m, assigned in members])

    def _lags(self, group: str, record: dict[str, Any], owner: dict[tuple[str, int], str],
              live: dict[str, str], mode: str) -> list[apb.PartitionLag]:
        """Lag rows of one topic: the group's per partition and, for broadcast instances
        (those with offsets here and the live ones), each instance's per partition."""
        topic = record["topic"]
        jobs = {}
        for broker, parts in self.routes.by_broker(record).items():
            address = self.routes.address(broker)
            if address and self.routes.registry.is_alive(broker):
                jobs[broker] = (lambda a=address, ps=parts: (
                    self.calls.committed(a, group, topic, ps),
                    self.calls.list_offsets(a, topic, ps),
                    self.calls.instances(a, group, topic, ps)))
        known: dict[int, tuple[int, int, int]] = {}
        by_instance: dict[tuple[str, int], int] = {}
        for result in self.calls.each(jobs).values():
            if isinstance(result, tuple):
                committed, offsets, instances = result
                by_instance.update(instances)
                for p, po in offsets.items():
                    known[p] = (committed.get(p, -1), po.earliest, po.latest)
        count = len(record["placement"])
        names = sorted({i for i, _ in by_instance} | set(live))
        rows = []
        # A broadcast group's own offsets stay empty: without live members, show them only
        # when something is there (it was used in clustering mode) or nothing else is.
        if mode == "clustering" or (mode == "" and (
                not names or any(known.get(p, (-1,))[0] >= 0 for p in range(count)))):
            rows += [_lag(topic, p, known.get(p, (-1, -1, -1)),
                          member_id=owner.get((topic, p), "")) for p in range(count)]
        for name in names:
            for p in range(count):
                _, earliest, latest = known.get(p, (-1, -1, -1))
                rows.append(_lag(topic, p, (by_instance.get((name, p), -1), earliest, latest),
                                 member_id=live.get(name, ""), instance_id=name))
        return rows

    def reset(self, req: apb.ResetGroupOffsetsRequest, term: int,
              audit: dict[str, Any]) -> apb.GroupDescription:
        """Move a group's committed offsets (only while it has no live member). With
        ``dry_run`` every check runs and the moves come back, but nothing changes."""
        group, topic = check_name(req.group, "group"), check_name(req.topic, "topic")
        record = self.state.topic(topic)
        if record is None:
            raise UnknownTopic(f"unknown topic {topic!r}", topic=topic)
        kind = req.WhichOneof("target")
        if kind is None:
            raise InvalidArgument("reset needs a target: earliest, latest, offset or timestamp_ms")
        instance = self._check_idle(group, req.instance_id)
        parts = self._partitions(record, list(req.partitions))
        targets = self._targets(record, parts, kind, getattr(req, kind))
        moves = [apb.OffsetMove(topic=topic, partition=p, from_offset=was, to_offset=targets[p])
                 for p, was in sorted(self._committed(record, group, parts, instance).items())]
        if req.dry_run:
            return apb.GroupDescription(group=group, moves=moves)
        self._apply(record, group, targets, term, instance)
        details = {"topic": topic, kind: getattr(req, kind), "offsets": targets,
                   **({"instance_id": instance} if instance else {})}
        self.write({"op": "record_group", "time_ms": wall_ms(), "group": group,
                          "topics": [topic], "audit": {
                              **audit, "action": "reset_group_offsets", "target": group,
                              "details": json.dumps(details, sort_keys=True)}})
        described = self.describe(group)
        described.moves.extend(moves)
        return described

    def _check_idle(self, group: str, instance: str) -> str:
        """Refuse a reset of offsets a live consumer uses: the group's while it has live
        members, a broadcast instance's while that instance is live. Returns the instance."""
        if instance:
            check_instance_id(instance)
            if any(m.instance_id == instance for m, _ in self.groups.describe(group)[1]):
                raise GroupNotEmpty(f"instance {instance!r} of group {group!r} is live: stop it "
                                    "(or wait for its session to expire) before resetting its "
                                    "offsets", group=group, instance_id=instance)
        elif self.groups.has_members(group):
            raise GroupNotEmpty(f"group {group!r} has live members: stop its consumers (or wait "
                                "for their sessions to expire) before resetting offsets",
                                group=group)
        return instance

    def _committed(self, record: dict[str, Any], group: str, parts: list[int],
                   instance: str = "") -> dict[int, int]:
        """The group's (or an instance's) committed offset of each partition (-1: none)."""
        found = dict.fromkeys(parts, -1)
        for broker, ps in self.routes.by_broker(record, parts).items():
            found.update(self.calls.committed(self._address(broker), group, record["topic"], ps,
                                              instance))
        return found

    @staticmethod
    def _partitions(record: dict[str, Any], asked: list[int]) -> list[int]:
        count = len(record["placement"])
        for p in asked:
            if p >= count:
                raise UnknownPartition(f"topic {record['topic']!r} has no partition {p} "
                                       f"(it has {count})", topic=record["topic"], partition=p)
        return sorted(set(asked)) if asked else list(range(count))

    def _targets(self, record: dict[str, Any], parts: list[int], kind: str,
                 value: Any) -> dict[int, int]:
        if kind == "timestamp_ms" and value < 0:
            raise InvalidArgument(f"timestamp_ms must be >= 0, got {value}")
        topic = record["topic"]
        targets: dict[int, int] = {}
        for broker, ps in self.routes.by_broker(record, parts).items():
            stamp = value if kind == "timestamp_ms" else NO_TIME
            offsets = self.calls.list_offsets(self._address(broker), topic, ps, stamp)
            for p in ps:
                if p not in offsets:
                    raise PartitionNotHosted(f"broker {broker} did not report {topic}[{p}]",
                                             topic=topic, partition=p, broker_id=broker)
                targets[p] = _target(topic, p, offsets[p], kind, value)
        return targets

    def _apply(self, record: dict[str, Any], group: str, targets: dict[int, int],
               term: int, instance: str = "") -> None:
        for broker, ps in self.routes.by_broker(record, sorted(targets)).items():
            self.calls.reset(self._address(broker), group, record["topic"],
                             {p: targets[p] for p in ps}, term, instance)

    def _address(self, broker: int) -> str:
        address = self.routes.address(broker)
        if not address:
            raise TubeqError(f"broker {broker} has no known address")
        return address


def _target(topic: str, p: int, po: Any, kind: str, value: Any) -> int:
    if kind == "earliest":
        return po.earliest
    if kind == "latest":
        return po.latest
    if kind == "timestamp_ms":
        return po.for_time if po.for_time >= 0 else po.latest
    if not po.earliest <= value <= po.latest:
        raise OffsetOutOfRange(
            f"cannot reset {topic}[{p}] to offset {value}: it must be within [earliest "
            f"{po.earliest}, latest {po.latest}]", topic=topic, partition=p, offset=value,
            earliest=po.earliest, latest=po.latest)
    return value


def _lag(topic: str, partition: int, known: tuple[int, int, int], member_id: str = "",
         instance_id: str = "") -> apb.PartitionLag:
    """One lag row from (committed, earliest, latest); -1 where unknown. Without a commit the
    lag counts from the earliest offset (what a reader starting there has left)."""
    committed, earliest, latest = known
    base = committed if committed >= 0 else earliest
    lag = max(0, latest - base) if latest >= 0 and base >= 0 else -1
    return apb.PartitionLag(topic=topic, partition=partition, committed=committed,
                            latest=latest, lag=lag, member_id=member_id,
                            instance_id=instance_id)
