"""The leader's side of replication: what followers hold, the high watermark, the ISR (the
answers to their ReplicaFetch calls are built in broker/replica_answer.py).

A follower fetches from the leader (Kafka's design): its fetch offset says it holds every
offset below it, so the leader learns each follower's log end from its fetches. The **high
watermark** of a partition is the smallest log end over its in-sync replicas (the leader's
own included): every ISR member holds the offsets below it. Consumers read only below it
(broker/data.py, broker/push.py), so a consumer never sees a record that a leader change could
truncate away. A partition with one copy has no followers: its high watermark is its log end,
and none of this is consulted (:meth:`ReplicaLeader.high_watermark` answers None).

Divergence (KIP-101 / KIP-320): a fetch carries the epoch of the follower's latest records.
When the leader's log says that epoch ends before the follower's log end, the follower holds
records the leader never wrote (an old leader's unreplicated tail): the answer tells it where
to truncate, and it fetches again from there. A follower whose log ends below the leader's
earliest offset is told so (OFFSET_OUT_OF_RANGE with ``log_start``) and restarts there.

**ISR upkeep**: a follower that has not caught up (held everything the leader held at its
previous fetch) for ``replica_lag_max_ms`` leaves the ISR, and comes back once it holds the
high watermark and is caught up again; the leader asks the master (:meth:`isr_changes`,
AlterIsr), which records the change in the Raft state only from the current leader at its
current epoch.

**Consumer offsets**: each answer carries the groups' offsets committed on the partition since
the version the follower names (broker/offsets.py), so a new leader serves them; and the
exactly-once sinks' marks and intents (broker/sinks.py); a follower stores a mark only once it
holds the records it covers.

**Idempotent producers**: each answer lists the producer batches (storage/producers.py) its records
complete, or with ``producer_state`` every one remembered below their end, so a follower that
becomes leader answers a retry the way this broker would have.

Known limit: a leader's log with holes (offsets lost to damage, storage/recovery.py) stops
replication at the first hole.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from broker.offsets import OffsetsPlane
from broker.replica_answer import ReplicaAnswers
from broker.topics import TopicManager
from lib.errors import (
    NotEnoughReplicas,
    NotEnoughReplicasAfterAppend,
    RequestTimedOut,
    TubeqError,
)
from lib.proto import broker_pb2 as pb
from lib.wire import Spliced

HOLD_SETTLE_S = 0.02  # a leadership handed over waits this long for appends already admitted


@dataclass
class _Followed:
    """What the leader knows of one partition's followers."""

    since: float  # when this broker started leading it (monotonic s): followers' grace
    epoch: int  # the leader epoch it leads under: a new one starts from scratch
    log_ends: dict[int, int] = field(default_factory=dict)  # replica id -> log end
    ends_then: dict[int, int] = field(default_factory=dict)  # our log end at its last fetch
    caught_up: dict[int, float] = field(default_factory=dict)  # replica id -> when
    out_since: dict[int, float] = field(default_factory=dict)  # out of the ISR since when
    # replica id -> (incarnation, version) of our committed offsets it holds (broker/offsets.py)
    offsets_at: dict[int, tuple[int, int]] = field(default_factory=dict)
    high_watermark: int = 0


@dataclass(frozen=True)
class IsrChange:
    topic: str
    topic_id: int
    partition: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...] = ()  # as the leader knows them
    complete: bool = False  # finish a reassignment that moves the leadership elsewhere


class ReplicaLeader:
    """Follower positions and high watermarks of the partitions this broker leads."""

    def __init__(self, topics: TopicManager, broker_id: int,
                 offsets: OffsetsPlane | None = None, clock=time.monotonic) -> None:
        self.topics = topics
        self.broker_id = broker_id
        self.offsets = offsets  # groups' committed offsets, sent to followers
        self._clock = clock
        self._lock = threading.Lock()
        self._parts: dict[tuple[str, int], _Followed] = {}
        # (topic, partition) -> leader epoch: writes held while the leadership moves away
        self._held: dict[tuple[str, int], int] = {}
        self._answers = ReplicaAnswers(topics, self, offsets)

    def _state(self, topic: str, partition: int) -> _Followed:
        """Under ``_lock``: the partition's follower state, new from now when first seen
        under its current leader epoch (what an earlier leadership knew, its high watermark
        too, may not hold any more: this copy may have been truncated since)."""
        role = self.topics.role(topic, partition)
        epoch = role.leader_epoch if role is not None else -1
        state = self._parts.get((topic, partition))
        if state is None or state.epoch != epoch:
            state = self._parts[(topic, partition)] = _Followed(self._clock(), epoch)
        return state

    def high_watermark(self, topic: str, partition: int) -> int | None:
        """The offset below which every in-sync replica holds the partition's records; None
        for a partition with one copy (its log end serves: no follower to wait for)."""
        role = self.topics.role(topic, partition)
        if role is None or not role.replicated:
            return None
        return self._advance(topic, partition)

    def _advance(self, topic: str, partition: int) -> int:
        """Recompute the high watermark from the ISR's log ends; within one leadership it
        only moves forward (a new leader epoch starts from what its ISR holds now)."""
        role = self.topics.role(topic, partition)
        store = self.topics.replica_store(topic, partition)
        with self._lock:
            state = self._state(topic, partition)
            ends = [store.latest(partition)]
            ends += [state.log_ends.get(b, 0) for b in role.isr if b != self.broker_id]
            state.high_watermark = max(state.high_watermark, min(ends))
            return state.high_watermark

    def follower_at(self, topic: str, partition: int, replica: int, log_end: int,
                     our_end: int) -> bool:
        """Record a follower's log end; True when the high watermark moved.

        A follower is caught up when it holds everything we held at its previous fetch (as
        Kafka judges it: a follower fetching steadily under load is never "at the end")."""
        with self._lock:
            state = self._state(topic, partition)
            if log_end >= min(state.ends_then.get(replica, our_end), our_end):
                state.caught_up[replica] = self._clock()
            state.log_ends[replica] = log_end
            state.ends_then[replica] = our_end
            before = state.high_watermark
        return self._advance(topic, partition) != before

    def check_acks_all(self, topic: str, partition: int) -> None:
        """Refuse an acks=all produce up front while the ISR is below the topic's
        min_insync_replicas (NotEnoughReplicas: nothing is stored)."""
        role = self.topics.role(topic, partition)
        if role is None or not role.replicated:
            return  # one copy: the leader is the whole ISR
        need = self.topics.topic(topic).spec.min_insync_replicas
        if len(role.isr) < need:
            raise NotEnoughReplicas(
                f"acks=all refused for {topic}/{partition}: {len(role.isr)} in-sync "
                f"replica(s) {list(role.isr)}, the topic needs {need} (min_insync_replicas)",
                topic=topic, partition=partition, isr=len(role.isr), needed=need)

    async def replicated(self, topic: str, partition: int, end: int, timeout: float) -> None:
        """Return once every in-sync replica holds the offsets below ``end`` (the high
        watermark reached it) and those are at least min_insync_replicas copies;
        RequestTimedOut after ``timeout`` seconds (the records stay stored: an idempotent
        producer's retry is answered with the same offsets).

        The high watermark also moves when the ISR shrinks (dead followers leave it), so
        reaching ``end`` alone may mean one copy: then NotEnoughReplicasAfterAppend, never
        success (Kafka's answer to the same case). The wait looks again every 0.5 s: an ISR
        recorded through a heartbeat does not signal the topic."""
        def missing() -> str:
            hw = self.high_watermark(topic, partition)
            if hw is not None and hw < end:
                return f"acks=all: {topic}/{partition} up to offset {end - 1}"
            self._check_copies(topic, partition, end)
            return ""

        await self._until(topic, missing, timeout, recheck_s=0.5, partition=partition)

    def _check_copies(self, topic: str, partition: int, end: int) -> None:
        """The records below ``end`` reached the high watermark: refuse the acknowledgement
        when the ISR that holds them is below the topic's min_insync_replicas."""
        role = self.topics.role(topic, partition)
        if role is None or not role.replicated:
            return
        need = self.topics.topic(topic).spec.min_insync_replicas
        if len(role.isr) < need:
            raise NotEnoughReplicasAfterAppend(
                f"acks=all not acknowledged for {topic}/{partition} up to offset {end - 1}: "
                f"stored by the leader, but the in-sync replicas fell to {len(role.isr)} "
                f"{list(role.isr)} while it waited, the topic needs {need} "
                f"(min_insync_replicas); it may still appear to consumers, retry with an "
                f"idempotent producer", topic=topic, partition=partition,
                isr=len(role.isr), needed=need)

    async def offsets_replicated(self, topic: str, partitions: list[int],
                                 timeout: float) -> None:
        """Return once every in-sync follower holds the groups' offsets committed here so far
        on ``partitions`` (a commit is answered only then, as Kafka's acks=all offset
        commits are); RequestTimedOut after ``timeout`` seconds (the commit stays stored)."""
        if self.offsets is None:
            return
        targets = {p: self.offsets.version(topic, p) for p in set(partitions)}

        def missing() -> str:
            behind = [p for p, v in targets.items() if not self._offsets_held(topic, p, v)]
            return f"offset commit on {topic} partitions {sorted(behind)}" if behind else ""

        # an ISR change does not signal the topic: look again every 0.5 s
        await self._until(topic, missing, timeout, recheck_s=0.5)

    async def _until(self, topic: str, missing, timeout: float,
                     recheck_s: float | None = None, **details) -> None:
        """Wait on the topic's signal until ``missing()`` names nothing; RequestTimedOut
        naming what is still missing after ``timeout`` seconds."""
        signal = self.topics.signal(topic)
        deadline = time.monotonic() + timeout
        while True:
            seen = signal.version
            what = missing()
            if not what:
                return
            left = deadline - time.monotonic()
            if left <= 0 or signal.closed:
                raise RequestTimedOut(f"{what} was stored by the leader but not by every "
                                      f"in-sync replica within {timeout:.1f} s",
                                      topic=topic, **details)
            await signal.wait_async(seen, left if recheck_s is None else min(left, recheck_s))

    def _offsets_held(self, topic: str, partition: int, version: int) -> bool:
        role = self.topics.role(topic, partition)
        if role is None or not role.replicated or role.leader != self.broker_id:
            return True
        ours = self.offsets.incarnation
        with self._lock:
            at = self._state(topic, partition).offsets_at
            held = [at.get(b, (0, 0)) for b in role.isr if b != self.broker_id]
        return all(incarnation == ours and v >= version for incarnation, v in held)

    def follower_offsets_at(self, topic: str, partition: int, replica: int,
                             p: pb.ReplicaFetchPartition) -> None:
        """Record which of our committed offsets a follower holds; wake commits waiting."""
        at = (p.offsets_incarnation, p.offsets_version)
        with self._lock:
            state = self._state(topic, partition)
            moved = state.offsets_at.get(replica) != at
            state.offsets_at[replica] = at
        if moved:
            self.topics.notify(topic)

    def isr_changes(self, lag_max_s: float) -> list[IsrChange]:
        """The ISR each led replicated partition should have now: followers not caught up
        for ``lag_max_s`` leave it; ones out of it that hold the high watermark and are
        caught up come back. Only the changes are returned; the master applies them."""
        now, out = self._clock(), []
        for topic, p, role in self.topics.leading():
            hw = self.high_watermark(topic, p)
            with self._lock:
                state = self._state(topic, p)
                fresh = {b for b in role.replicas if b == self.broker_id
                         or now - state.caught_up.get(b, state.since) <= lag_max_s}
                for b in role.replicas:
                    if b in role.isr:
                        state.out_since.pop(b, None)
                    else:
                        state.out_since.setdefault(b, now)
                # Back in only after catching up since it left (a broker stopping cleanly
                # left on its own and must not be taken back while it still looks fresh).
                back = {b for b in fresh - set(role.isr)
                        if state.caught_up.get(b, -1.0) > state.out_since[b]
                        and state.log_ends.get(b, -1) >= (hw or 0)}
            isr = tuple(b for b in role.replicas if (b in role.isr and b in fresh) or b in back)
            done = bool(role.target) and set(role.target) <= set(isr)
            if set(isr) != set(role.isr) or done:
                out.append(IsrChange(topic, self.topics.topic(topic).spec.topic_id, p,
                                     role.leader_epoch, isr, role.replicas,
                                     complete=done and self.broker_id not in role.target))
        return out

    # -- a reassignment moving the leadership away (master/reassign.py) --------------------

    def holding(self, topic: str, partition: int, leader_epoch: int) -> bool:
        """Whether writes to the partition are held: its leadership is being handed to a
        reassignment's target replica (refused as not led here; producers retry there)."""
        return self._held.get((topic, partition)) == leader_epoch

    def hold_writes(self, change: IsrChange, timeout: float) -> bool:
        """Hold new writes, then wait until every in-sync replica holds the whole log, so the
        next leader has every record acknowledged here (acks=1 too). False (writes go on)
        when they do not within ``timeout`` seconds; True: the caller asks the master, then
        calls :meth:`release_writes` only if it refused."""
        key = (change.topic, change.partition)
        self._held = {**self._held, key: change.leader_epoch}
        time.sleep(HOLD_SETTLE_S)  # a produce past its check appends now
        deadline = time.monotonic() + timeout
        try:
            store = self.topics.replica_store(*key)
            while time.monotonic() < deadline:
                if (self.high_watermark(*key) or 0) >= store.latest(change.partition):
                    return True
                time.sleep(0.01)
        except TubeqError:
            pass
        self.release_writes(change)
        return False

    def release_writes(self, change: IsrChange) -> None:
        self._held = {k: v for k, v in self._held.items()
                      if k != (change.topic, change.partition)}

    def isr_changed(self, change: IsrChange, isr: list[int]) -> None:
        """The master recorded ``isr``: use it now (its heartbeats bring it too), and wake
        consumers if the high watermark moved (a lagging follower left)."""
        if self.topics.set_isr(change.topic, change.partition, change.leader_epoch, isr):
            with self._lock:
                before = self._state(change.topic, change.partition).high_watermark
            if self._advance(change.topic, change.partition) != before:
                self.topics.notify(change.topic)

    async def fetch(self, req: pb.ReplicaFetchRequest, run) -> Spliced:
        """Serve a follower's ReplicaFetch (broker/replica_answer.py builds the answer)."""
        return await self._answers.fetch(req, run)

    def serve_stream(self, port: int) -> None:
        """Name this broker's replica stream port in every answer (broker/replica_stream.py)."""
        self._answers.stream_port = port
