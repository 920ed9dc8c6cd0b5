"""Kafka-managed consumer groups: the JoinGroup / SyncGroup / Heartbeat / LeaveGroup protocol
that Kafka's clients speak, coordinated on the active master.

Kafka's clients assign partitions themselves (their range, roundrobin or cooperative-sticky
assignors run in the group's leader); the coordinator only gathers the members, picks a
protocol all of them name, numbers the generation and hands the leader's assignments out. One
coordinator per cluster (this master) means one answer for a group whatever broker a client
reached. Brokers forward the calls (broker/kafka/groups.py) and never wait here: a join or a
sync that must wait for the other members is answered ``pending`` and asked again, so waiting
members hold no master thread.

A group is Kafka-managed or tubeq-managed, never both at once: a Kafka join is refused while
tubeq consumers are live in the group (``tubeq_live``), and master/groups.py refuses tubeq joins
while Kafka members are (:meth:`KafkaGroups.live`).

Live state only, as tubeq's groups: after a failover every member's next call gets
UNKNOWN_MEMBER_ID and it joins again. Kafka's ``generation_id`` is a per-group counter; commits
are fenced on the partitions' brokers with ``(epoch << 32) | generation``
(:meth:`KafkaGroups.check`), which grows across failovers as tubeq's generations do.
"""
from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from lib.errors import InvalidArgument
from lib.names import check_name
from lib.proto import master_pb2 as mpb
from master.brokers import monotonic_ms

# Kafka's error codes answered here (org.apache.kafka.common.protocol.Errors)
NONE, ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL = 0, 22, 23
UNKNOWN_MEMBER_ID, INVALID_SESSION_TIMEOUT, REBALANCE_IN_PROGRESS = 25, 26, 27
GROUP_MAX_SIZE_REACHED = 81
EMPTY, PREPARING, COMPLETING, STABLE = "Empty", "PreparingRebalance", "CompletingRebalance", \
    "Stable"
MIN_SESSION_MS, MAX_SESSION_MS = 1000, 600_000
MAX_REBALANCE_MS = 300_000
MAX_MEMBERS = 1000
MAX_PROTOCOLS = 16
MAX_METADATA_BYTES = 1 << 20


@dataclass
class KafkaMember:
    member_id: str
    client_id: str
    client_host: str
    session_ms: int
    rebalance_ms: int
    protocols: list[tuple[str, bytes]]
    last_seen: int
    joined: bool = True  # has (re)joined in the current round
    assignment: bytes = b""


@dataclass
class KafkaGroup:
    name: str
    protocol_type: str = ""
    state: str = EMPTY
    generation: int = 0
    protocol: str = ""
    leader: str = ""
    members: dict[str, KafkaMember] = field(default_factory=dict)
    deadline: int = 0  # a rebalance completes by then, without the members not back


@dataclass(frozen=True)
class Answer:
    """What a call is told; ``pending``: ask again (a join or sync still waiting)."""

    error: int = NONE
    pending: bool = False
    member_id: str = ""
    generation: int = -1
    protocol: str = ""
    leader: str = ""
    members: tuple[tuple[str, bytes], ...] = ()  # the leader's join answer only
    assignment: bytes = b""
    fencing_generation: int = 0
    message: str = ""


class KafkaGroups:
    def __init__(self, epoch: int, tubeq_live: Callable[[str], bool],
                 clock: Callable[[], int] = monotonic_ms, initial_delay_ms: int = 500) -> None:
        self.epoch = epoch
        self._tubeq_live, self._clock = tubeq_live, clock
        self._initial_delay = initial_delay_ms
        self._lock = threading.Lock()
        self._groups: dict[str, KafkaGroup] = {}

    def reset(self, epoch: int) -> None:
        with self._lock:
            self.epoch, self._groups = epoch, {}

    def live(self, group: str) -> bool:
        with self._lock:
            g = self._groups.get(group)
            return g is not None and bool(g.members)

    def described(self, group: str) -> mpb.KafkaGroupResponse:
        """DescribeGroups' view of a group ("Dead": no live member)."""
        with self._lock:
            g = self._groups.get(group)
            if g is None or not g.members:
                return mpb.KafkaGroupResponse(group=group, state="Dead")
            return mpb.KafkaGroupResponse(
                group=group, state=g.state, protocol_type=g.protocol_type, protocol=g.protocol,
                described=[mpb.KafkaGroupMember(
                    member_id=m.member_id, client_id=m.client_id, client_host=m.client_host,
                    metadata=dict(m.protocols).get(g.protocol, b""), assignment=m.assignment)
                    for m in g.members.values()])

    def listed(self) -> list[mpb.KafkaGroupResponse]:
        with self._lock:
            return [mpb.KafkaGroupResponse(group=name, state=g.state,
                                           protocol_type=g.protocol_type)
                    for name, g in sorted(self._groups.items()) if g.members]

    # -- the protocol ----------------------------------------------------------------------

    def join(self, group: str, member_id: str, client_id: str, client_host: str,
             protocol_type: str, protocols: list[tuple[str, bytes]], session_ms: int,
             rebalance_ms: int, again: bool = False) -> Answer:
        """A JoinGroup; ``again``: the same join asked again after "pending" (it waits for
        the round it joined and is answered with it, never starting another)."""
        if not MIN_SESSION_MS <= session_ms <= MAX_SESSION_MS:
            return Answer(INVALID_SESSION_TIMEOUT, message=f"session timeout {session_ms} ms "
                          f"outside {MIN_SESSION_MS}..{MAX_SESSION_MS}")
        if not protocols or len(protocols) > MAX_PROTOCOLS or \
                sum(len(m) for _, m in protocols) > MAX_METADATA_BYTES:
            return Answer(INCONSISTENT_GROUP_PROTOCOL, message="a join names 1 to "
                          f"{MAX_PROTOCOLS} protocols of at most {MAX_METADATA_BYTES} bytes")
        if self._tubeq_live(group):
            return Answer(INCONSISTENT_GROUP_PROTOCOL, message=f"group {group!r} has live "
                          "tubeq consumers: a Kafka consumer cannot join it until they leave")
        with self._lock:
            g = self._groups.setdefault(group, KafkaGroup(group))
            now = self._clock()
            self._expire(g, now)
            if g.members and protocol_type != g.protocol_type:
                return Answer(INCONSISTENT_GROUP_PROTOCOL, message=f"group {group!r} is of "
                              f"protocol type {g.protocol_type!r}, not {protocol_type!r}")
            member = g.members.get(member_id) if member_id else None
            if member_id and member is None:
                return Answer(UNKNOWN_MEMBER_ID, message=f"member {member_id} is not in "
                              f"group {group!r} (its session ended): join again without it")
            if member is None:
                if len(g.members) >= MAX_MEMBERS:
                    return Answer(GROUP_MAX_SIZE_REACHED, message=f"{MAX_MEMBERS} members")
                member = KafkaMember(f"{client_id or 'kafka'}-{uuid.uuid4()}", client_id,
                                     client_host, session_ms, rebalance_ms, protocols, now)
                g.members[member.member_id] = member
                g.protocol_type = protocol_type
                self._prepare(g, now, self._initial_delay if g.state == EMPTY else None)
            elif not again and g.state in (STABLE, COMPLETING) and (
                    member.member_id == g.leader or member.protocols != protocols):
                self._prepare(g, now)
            member.protocols, member.session_ms, member.last_seen = protocols, session_ms, now
            member.rebalance_ms, member.joined = rebalance_ms, True
            return self._join_answer(g, member, now)

    def sync(self, group: str, member_id: str, generation: int,
             assignments: dict[str, bytes]) -> Answer:
        with self._lock:
            g, member, error = self._known(group, member_id, generation)
            if error is not None:
                return error
            if g.state == PREPARING:
                return Answer(REBALANCE_IN_PROGRESS)
            if member_id == g.leader and g.state == COMPLETING:
                for mid, m in g.members.items():
                    m.assignment = assignments.get(mid, b"")
                g.state = STABLE
            if g.state != STABLE:
                return Answer(pending=True, member_id=member_id)
            return Answer(member_id=member_id, generation=g.generation, protocol=g.protocol,
                          assignment=member.assignment)

    def heartbeat(self, group: str, member_id: str, generation: int) -> Answer:
        with self._lock:
            g, _, error = self._known(group, member_id, generation)
            if error is not None:
                return error
            return Answer(REBALANCE_IN_PROGRESS if g.state == PREPARING else NONE)

    def leave(self, group: str, member_ids: list[str]) -> Answer:
        with self._lock:
            g = self._groups.get(group)
            gone = [m for m in member_ids if g is not None and g.members.pop(m, None)]
            if not gone:
                return Answer(UNKNOWN_MEMBER_ID)
            if g.members:
                self._prepare(g, self._clock())
            else:
                self._empty(g)
            return Answer()

    def check(self, group: str, member_id: str, generation: int) -> Answer:
        """Whether a commit of ``member_id`` at ``generation`` stands, and the fencing
        generation the partitions' brokers keep. As Kafka's coordinator: a member of the
        current generation commits while the group is stable or preparing a rebalance (what
        it consumed until it rejoins), not while the leader's assignment is awaited. A commit
        with no member (generation -1) is a consumer without group management: allowed while
        no Kafka member is live."""
        with self._lock:
            g = self._groups.get(group)
            if not member_id and generation < 0:
                if g is not None and g.members:
                    return Answer(UNKNOWN_MEMBER_ID, message=f"group {group!r} has live "
                                  "members: commit as one of them")
                return Answer(fencing_generation=0)
            g, _, error = self._known(group, member_id, generation)
            if error is not None:
                return error
            if g.state == COMPLETING:
                return Answer(REBALANCE_IN_PROGRESS)
            return Answer(fencing_generation=(self.epoch << 32) | g.generation)

    # -- inside the lock ---------------------------------------------------------------------

    def _known(self, group: str, member_id: str, generation: int
               ) -> tuple[KafkaGroup | None, KafkaMember | None, Answer | None]:
        g = self._groups.get(group)
        if g is not None:
            self._expire(g, self._clock())
        member = g.members.get(member_id) if g is not None else None
        if member is None:
            return g, None, Answer(UNKNOWN_MEMBER_ID, message=f"member {member_id!r} is not "
                                   f"in group {group!r}: join again")
        member.last_seen = self._clock()
        if generation != g.generation:
            return g, member, Answer(ILLEGAL_GENERATION, message=f"generation {generation} "
                                     f"is not the group's {g.generation}: join again")
        return g, member, None

    def _prepare(self, g: KafkaGroup, now: int, delay_ms: int | None = None) -> None:
        """Start a rebalance: every member must join again by the deadline."""
        g.state = PREPARING
        for m in g.members.values():
            m.joined = False
        wait = max(m.rebalance_ms for m in g.members.values()) if delay_ms is None else delay_ms
        g.deadline = now + min(wait, MAX_REBALANCE_MS)

    def _join_answer(self, g: KafkaGroup, member: KafkaMember, now: int) -> Answer:
        if g.state == PREPARING:
            waiting = any(not m.joined for m in g.members.values())
            first = g.generation == 0 and len(g.members) == 1  # others may come: wait a bit
            if now < g.deadline and (waiting or first):
                return Answer(pending=True, member_id=member.member_id)
            self._complete(g)
            if member.member_id not in g.members:
                return Answer(UNKNOWN_MEMBER_ID)
        if g.state == EMPTY:
            return Answer(UNKNOWN_MEMBER_ID)
        members = tuple((mid, dict(m.protocols)[g.protocol]) for mid, m in g.members.items()) \
            if member.member_id == g.leader else ()
        return Answer(member_id=member.member_id, generation=g.generation, protocol=g.protocol,
                      leader=g.leader, members=members)

    def _complete(self, g: KafkaGroup) -> None:
        """The round ends: members not back are dropped, a protocol all name is chosen (the
        leader's first that every member has), the generation moves on."""
        for mid in [mid for mid, m in g.members.items() if not m.joined]:
            del g.members[mid]
        if not g.members:
            self._empty(g)
            return
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        names = [name for name, _ in g.members[g.leader].protocols]
        common = [n for n in names if all(n in dict(m.protocols) for m in g.members.values())]
        if not common:  # refused at join time in Kafka; here: drop the members that differ
            keep = dict(g.members[g.leader].protocols)
            for mid in [mid for mid, m in g.members.items()
                        if not set(dict(m.protocols)) & set(keep)]:
                del g.members[mid]
            common = [n for n in names
                      if all(n in dict(m.protocols) for m in g.members.values())]
        g.protocol = common[0]
        g.generation += 1
        g.state = COMPLETING
        for m in g.members.values():
            m.assignment = b""

    def _expire(self, g: KafkaGroup, now: int) -> None:
        gone = [mid for mid, m in g.members.items() if now - m.last_seen > m.session_ms]
        for mid in gone:
            del g.members[mid]
        if gone:
            if g.members:
                self._prepare(g, now)
            else:
                self._empty(g)

    @staticmethod
    def _empty(g: KafkaGroup) -> None:
        g.state, g.leader, g.protocol = EMPTY, "", ""


def kafka_group_call(groups: KafkaGroups, req: mpb.KafkaGroupRequest) -> mpb.KafkaGroupResponse:
    """One forwarded call (``req.op``) as its answer."""
    if req.op == "list":
        return mpb.KafkaGroupResponse(groups=groups.listed())
    group = check_name(req.group, "group")
    if req.op == "describe":
        return groups.described(group)
    if req.op == "join":
        answer = groups.join(group, req.member_id, req.client_id[:255],
                             req.client_host[:255], req.protocol_type[:255],
                             [(p.name, p.metadata) for p in req.protocols],
                             req.session_timeout_ms, req.rebalance_timeout_ms, req.again)
    elif req.op == "sync":
        answer = groups.sync(group, req.member_id, req.generation,
                             {p.name: p.metadata for p in req.protocols})
    elif req.op == "heartbeat":
        answer = groups.heartbeat(group, req.member_id, req.generation)
    elif req.op == "leave":
        answer = groups.leave(group, list(req.leaving))
    elif req.op == "check":
        answer = groups.check(group, req.member_id, req.generation)
    else:
        raise InvalidArgument(f"KafkaGroup op {req.op[:40]!r}: join, sync, heartbeat, leave, "
                              "check, list or describe")
    return mpb.KafkaGroupResponse(
        error_code=answer.error, pending=answer.pending, member_id=answer.member_id,
        generation=answer.generation, protocol=answer.protocol, leader=answer.leader,
        members=[mpb.KafkaGroupProtocol(name=m, metadata=md) for m, md in answer.members],
        assignment=answer.assignment, fencing_generation=answer.fencing_generation,
        message=answer.message)
