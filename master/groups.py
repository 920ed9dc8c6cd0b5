"""Consumer-group coordination on the master: membership, sessions, sticky rebalancing.

Live state only (in memory, on the active master). Members join, heartbeat and leave; a member
whose session passed is expired by a reaper thread. Every join of a new member (or a change of
its topics), leave, expiry and change of a subscribed topic's partition count rebalances the
group AT ONCE (no timer) under a new generation ``(epoch << 32) | counter``; members learn
their new assignment in their next heartbeat reply. The counter is shared by every group, so a
group's generation never goes back even when the group empties and comes back; the epoch grows
at every leadership, so generations grow across failovers too (brokers fence on them).

After a failover (:meth:`GroupCoordinator.reset`) members rejoin with the partitions they
owned; for ``grace_ms`` those are kept and rebalances wait, then each group that changed is
rebalanced once, stickily: a failover moves no partition whose owner came back.

Broadcast groups (docs/broadcast.md): every member gets every partition of its topics and keeps
its own offsets under a stable ``instance_id``, so joins, leaves and expiries rebalance nobody
and move no generation. A group is in one mode at a time (that of its live members: a join in
the other mode is refused, GroupModeConflict), and two live members never share an instance id
(InstanceInUse, saying when the holder's session ends).

The clock is injectable (monotonic ms) so expiry is unit-testable. Thread-safe: one lock.
"""
from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from lib.errors import (
    GroupModeConflict,
    InstanceInUse,
    InvalidArgument,
    UnknownMember,
    UnknownTopic,
)
from lib.names import check_instance_id, check_name
from master.assign import Assignment, assign
from master.brokers import monotonic_ms, wall_ms
from master.kafka_groups import KafkaGroups

MAX_TOPICS_PER_MEMBER = 1000
MAX_HOST_LEN = 255
CLUSTERING, BROADCAST = "clustering", "broadcast"
MODES = (CLUSTERING, BROADCAST)


@dataclass
class Member:
    member_id: str
    topics: tuple[str, ...]
    client_host: str
    session_ms: int
    last_seen: int  # monotonic ms
    last_heartbeat_ms: int  # wall ms
    instance_id: str = ""  # broadcast members only


@dataclass
class Group:
    name: str
    members: dict[str, Member] = field(default_factory=dict)
    assignment: Assignment = field(default_factory=dict)
    generation: int = 0
    pending: bool = False  # members rejoined during a failover grace: rebalance when it ends
    mode: str = CLUSTERING  # of its live members (a group with none takes the next one's)


@dataclass(frozen=True)
class MemberView:
    """What a member is told: its id, the generation and its partitions (topic -> list)."""

    member_id: str
    generation: int
    assignments: dict[str, list[int]]
    topics: tuple[str, ...]
    heartbeat_interval_ms: int


@dataclass(frozen=True)
class SessionLimits:
    default_ms: int = 10_000
    min_ms: int = 1000
    max_ms: int = 600_000


def _own_id(group: str, member_id: str) -> bool:
    """A member id this coordinator could have issued for ``group`` (kept on a rejoin)."""
    return member_id.startswith(f"{group}-") and len(member_id) <= len(group) + 33


class GroupCoordinator:
    def __init__(self, epoch: int, partitions_of: Callable[[str], int | None],
                 limits: SessionLimits = SessionLimits(), reaper_interval_ms: int = 200,
                 clock: Callable[[], int] = monotonic_ms, wall: Callable[[], int] = wall_ms,
                 on_rebalance: Callable[[str, str, int], None] | None = None) -> None:
        self.epoch = epoch
        self._partitions_of = partitions_of
        self._limits = limits
        self._reaper_interval = reaper_interval_ms / 1000
        self._clock, self._wall = clock, wall
        self._on_rebalance = on_rebalance
        self._lock = threading.Lock()
        self._groups: dict[str, Group] = {}
        self._counter = 0
        self._grace_until = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Kafka-managed groups (master/kafka_groups.py): a group is one kind or the other
        self.kafka = KafkaGroups(epoch, self.has_members, clock)

    # -- membership ----------------------------------------------------------------------

    def reset(self, epoch: int, grace_ms: int) -> None:
        """A new leadership: forget every group; members rejoin within ``grace_ms``.

        During the grace a member that rejoins with its id and the partitions it owned keeps
        them, without a rebalance (the others are still rejoining); when it ends, groups that
        changed are rebalanced once, stickily, so only partitions nobody claimed move.
        """
        with self._lock:
            self.epoch, self._counter, self._groups = epoch, 0, {}
            self._grace_until = self._clock() + grace_ms
        self.kafka.reset(epoch)

    def in_grace(self) -> bool:
        return self._clock() < self._grace_until

    def grace_left_s(self) -> float:
        return max(0, self._grace_until - self._clock()) / 1000

    def join(self, group: str, topics: Sequence[str], member_id: str = "",
             client_host: str = "", session_ms: int = 0,
             owned: dict[str, list[int]] | None = None, mode: str = "",
             instance_id: str = "") -> MemberView:
        """Add (or update) a member; a new member or new topics rebalance the group now.

        ``owned``: on a rejoin after a failover, the partitions the member had; it keeps the
        ones nobody else holds. ``mode`` ``"broadcast"`` (with ``instance_id``): the member
        gets every partition and rebalances nobody.
        """
        check_name(group, "group")
        mode = _check_mode(mode, instance_id)
        wanted = self._check_topics(topics)
        session = self._session(session_ms)
        if len(client_host) > MAX_HOST_LEN:
            raise InvalidArgument(f"client_host is longer than {MAX_HOST_LEN} characters")
        with self._lock:
            g = self._groups.setdefault(group, Group(group))
            member = g.members.get(member_id) if member_id else None
            self._admit(g, mode, instance_id, member)
            if member is None and mode == BROADCAST:
                member_id = self._broadcast_id(g, member_id, owned)
                member = g.members[member_id] = Member(member_id, wanted, client_host, session,
                                                       0, 0, instance_id)
            elif member is None:
                rejoin = owned is not None and _own_id(group, member_id)
                member_id = member_id if rejoin else f"{group}-{uuid.uuid4().hex[:8]}"
                member = g.members[member_id] = Member(member_id, wanted, client_host, session,
                                                       0, 0)
                if rejoin:
                    self._seed(g, member_id, owned or {}, wanted)
                self._rebalance(g, "rejoin" if rejoin else "join")
            elif member.topics != wanted:
                member.topics = wanted
                self._rebalance(g, "topics_changed")
            member.client_host, member.session_ms = client_host, session
            self._touch(member)
            return self._view(g, member)

    def heartbeat(self, group: str, member_id: str) -> MemberView:
        """Keep the session alive; the reply carries the current generation and assignment."""
        with self._lock:
            g, member = self._member(group, member_id)
            self._touch(member)
            return self._view(g, member)

    def leave(self, group: str, member_id: str) -> None:
        """Remove a member and rebalance the others at once (unknown members: no-op)."""
        with self._lock:
            g = self._groups.get(group)
            if g is not None and g.members.pop(member_id, None) is not None:
                self._rebalance(g, "leave")

    def expire(self) -> list[tuple[str, str]]:
        """Drop every member whose session passed; returns (group, member) pairs dropped."""
        now = self._clock()
        dropped = []
        with self._lock:
            for g in list(self._groups.values()):
                gone = [m for m in g.members.values() if now - m.last_seen > m.session_ms]
                for m in gone:
                    del g.members[m.member_id]
                    dropped.append((g.name, m.member_id))
                if gone:
                    self._rebalance(g, "expired")
        return dropped

    def topics_changed(self, topics: set[str]) -> None:
        """Partition counts of ``topics`` changed (or they were deleted): rebalance users."""
        with self._lock:
            for g in self._groups.values():
                if any(set(m.topics) & topics for m in g.members.values()):
                    self._rebalance(g, "topic_changed")

    def _admit(self, g: Group, mode: str, instance_id: str, member: Member | None) -> None:
        """Refuse a join in the other mode than the live members', or of an instance id a
        live member holds; an empty group takes the joiner's mode (the lock held)."""
        if self.kafka.live(g.name):
            raise GroupModeConflict(
                f"group {g.name!r} is Kafka-managed: Kafka clients are live in it (its Kafka "
                "port); a tubeq consumer cannot join it until they leave (use another group "
                "name)", group=g.name, mode="kafka")
        if not g.members:
            g.mode = mode
        elif g.mode != mode:
            raise GroupModeConflict(
                f"group {g.name!r} has {len(g.members)} live member(s) consuming in {g.mode} "
                f"mode: a {mode} consumer cannot join it until they leave (use another group "
                "name for the other mode)", group=g.name, mode=g.mode)
        if mode != BROADCAST:
            return
        for other in g.members.values():
            if other.instance_id == instance_id and other is not member:
                left = max(0, other.session_ms - (self._clock() - other.last_seen))
                raise InstanceInUse(
                    f"group {g.name!r} already has a live instance {instance_id!r} (member "
                    f"{other.member_id} on {other.client_host or 'an unknown host'}): give each "
                    "process its own instance_id; if the previous process with this id died, "
                    f"its session ends within {left} ms", group=g.name,
                    instance_id=instance_id, expires_in_ms=left)

    def _broadcast_id(self, g: Group, member_id: str, owned: dict[str, list[int]] | None
                      ) -> str:
        """A new broadcast member's id: kept on a rejoin after a failover, else fresh."""
        if owned is not None and _own_id(g.name, member_id):
            return member_id
        return f"{g.name}-{uuid.uuid4().hex[:8]}"

    # -- reads ---------------------------------------------------------------------------

    def live_groups(self) -> list[str]:
        with self._lock:
            return sorted(name for name, g in self._groups.items() if g.members)

    def has_members(self, group: str) -> bool:
        with self._lock:
            g = self._groups.get(group)
            return g is not None and bool(g.members)

    def describe(self, group: str) -> tuple[int, list[tuple[Member, dict[str, list[int]]]]]:
        """(generation, [(member copy, its assignment)]) of a group (0, [] when unknown)."""
        with self._lock:
            g = self._groups.get(group)
            if g is None:
                return 0, []
            return g.generation, [(Member(**vars(m)), self._assigned(g, m))
                                  for m in sorted(g.members.values(), key=lambda m: m.member_id)]

    def mode(self, group: str) -> str:
        """The mode of a group's live members ("" when it has none; "kafka" for a
        Kafka-managed group)."""
        if self.kafka.live(group):
            return "kafka"
        with self._lock:
            g = self._groups.get(group)
            return g.mode if g is not None and g.members else ""

    # -- reaper --------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._reap, name="group-reaper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _reap(self) -> None:
        while not self._stop.wait(self._reaper_interval):
            self.expire()
            self._settle()

    # -- internals -----------------------------------------------------------------------

    def _rebalance(self, g: Group, reason: str) -> None:
        if g.mode == BROADCAST:  # every member has every partition: nothing moves
            return
        if self.in_grace():  # members are still rejoining: keep what they own, settle later
            g.pending = True
            self._new_generation(g, reason)
            return
        subs = {m.member_id: list(m.topics) for m in g.members.values()}
        counts = {}
        for t in {t for ts in subs.values() for t in ts}:
            n = self._partitions_of(t)
            if n:
                counts[t] = n
        g.assignment = assign(subs, counts, g.assignment)
        g.pending = False
        self._new_generation(g, reason)

    def _new_generation(self, g: Group, reason: str) -> None:
        self._counter += 1
        g.generation = (self.epoch << 32) | self._counter
        if self._on_rebalance is not None:
            self._on_rebalance(g.name, reason, g.generation)

    def _seed(self, g: Group, member_id: str, owned: dict[str, list[int]],
              topics: tuple[str, ...]) -> None:
        """Give a rejoining member the partitions it owned that nobody else holds now."""
        held = {(t, p) for a in g.assignment.values() for t, ps in a.items() for p in ps}
        mine: dict[str, list[int]] = {}
        for t, parts in owned.items():
            n = self._partitions_of(t) if t in topics else None
            keep = sorted({p for p in parts if n and 0 <= p < n and (t, p) not in held})
            if keep:
                mine[t] = keep
        g.assignment[member_id] = mine

    def _settle(self) -> None:
        """After the failover grace: rebalance the groups members rejoined meanwhile."""
        with self._lock:
            if self.in_grace():
                return
            for g in self._groups.values():
                if g.pending:
                    self._rebalance(g, "failover")

    def _member(self, group: str, member_id: str) -> tuple[Group, Member]:
        g = self._groups.get(group)
        member = g.members.get(member_id) if g is not None else None
        if g is None or member is None:
            if self.in_grace():  # a new leader: the member keeps its partitions and rejoins
                raise UnknownMember(
                    f"group {group!r}: the active master changed; rejoin with the partitions "
                    "you own", group=group, member_id=member_id, rejoin=True)
            raise UnknownMember(
                f"group {group!r} has no member {member_id!r} (session expired or never "
                "joined): join again", group=group, member_id=member_id)
        return g, member

    def _touch(self, member: Member) -> None:
        member.last_seen, member.last_heartbeat_ms = self._clock(), self._wall()

    def _view(self, g: Group, member: Member) -> MemberView:
        return MemberView(member.member_id, g.generation, self._assigned(g, member),
                          member.topics, max(1, member.session_ms // 3))

    def _assigned(self, g: Group, member: Member) -> dict[str, list[int]]:
        """A member's partitions: its share, or in a broadcast group every partition (read
        now, so a topic's new partitions reach every instance at its next heartbeat)."""
        if g.mode != BROADCAST:
            return dict(g.assignment.get(member.member_id, {}))
        counts = {t: self._partitions_of(t) for t in member.topics}
        return {t: list(range(n)) for t, n in counts.items() if n}

    def _check_topics(self, topics: Sequence[str]) -> tuple[str, ...]:
        wanted = tuple(sorted(set(topics)))
        if not wanted:
            raise InvalidArgument("a group member must subscribe to at least one topic")
        if len(wanted) > MAX_TOPICS_PER_MEMBER:
            raise InvalidArgument(f"a member may subscribe to at most {MAX_TOPICS_PER_MEMBER} "
                                  f"topics, asked for {len(wanted)}")
        for t in wanted:
            check_name(t, "topic")
            if self._partitions_of(t) is None:
                raise UnknownTopic(f"unknown topic {t!r}", topic=t)
        return wanted

    def _session(self, session_ms: int) -> int:
        lim = self._limits
        if session_ms == 0:
            return lim.default_ms
        if not lim.min_ms <= session_ms <= lim.max_ms:
            raise InvalidArgument(
                f"session_timeout_ms must be within {lim.min_ms}..{lim.max_ms}, got "
                f"{session_ms}", min=lim.min_ms, max=lim.max_ms)
        return session_ms


def _check_mode(mode: str, instance_id: str) -> str:
    """The member's mode ("" is clustering); broadcast needs a valid instance id."""
    mode = mode or CLUSTERING
    if mode not in MODES:
        raise InvalidArgument(f"mode must be 'clustering' or 'broadcast', got {mode!r}",
                              mode=mode[:64])
    if mode == BROADCAST:
        check_instance_id(instance_id)
    elif instance_id:
        raise InvalidArgument("instance_id is for broadcast consumers (mode='broadcast'); a "
                              "clustering member's id is given by the master")
    return mode
