"""Group membership with the master, and the offset calls consumers make to brokers.

:class:`OffsetClient` does the broker side: committed offsets (FetchOffsets, which also *claims*
the partitions for a member and generation), commits, ListOffsets, routes from the master.
:class:`Coordinator` does the master side: JoinGroup, a GroupHeartbeat every
``heartbeat_interval_ms`` in a background thread, LeaveGroup on close. Both the pull and the
push consumer use them (one implementation).

Rebalance, in the heartbeat thread, when the master answers with a new generation:
1. ``listener.on_revoke(revoked)``: the consumer commits what it consumed of the partitions it
   loses, still under the OLD generation (the broker accepts it unless the new owner already
   claimed them: then the commit is fenced and the new owner re-reads from the last commit, so
   nothing is skipped; at worst uncommitted records are delivered again);
2. the new assignment replaces the old; the new generation becomes ours;
   if partitions were added, wait one heartbeat interval + 300 ms (``handoff_ms``): by then
   their previous owners have heard of the new generation, committed and stopped, so we start
   where they stopped and no record we commit is still being delivered to them (a member that
   misses its heartbeats can break this; its commits are fenced all the same);
3. FetchOffsets with member_id + generation claims every partition now ours and gives the start
   position of the new ones (committed offset, else the reset policy);
4. ``listener.on_assign(added)``.
An UnknownMember answer (our session expired) revokes everything and joins again.

Broadcast (``mode="broadcast"``, docs/broadcast.md): the master gives every member every
partition and moves nothing when others come and go, so there is no hand-off to wait for and
no claim: offsets are read and committed under the member's own ``instance_id``
(``group@instance_id`` on the brokers). A join refused with InstanceInUse is retried until the
holder's session would have ended (a restart after a crash), then raised (a second process
with the same id).
"""
from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from lib import errors
from lib.config import require
from lib.consumer.subscription import SubscriptionState
from lib.logs import event
from lib.names import check_instance_id, check_name
from lib.proto import broker_pb2, broker_pb2_grpc, master_pb2, master_pb2_grpc
from lib.routes import RouteCache
from lib.rpc import ChannelPool, MasterClient, invoke
from lib.types import TopicPartition

log = logging.getLogger(__name__)
NO_MEMBER = ("", -1)  # identity of a consumer outside group coordination: never fenced


class OffsetClient:
    """Offset RPCs to the brokers owning each partition, grouped by (broker, topic).

    Calls that fail because routes are stale (PartitionNotHosted, Unavailable) refresh the routes
    from the master and retry until ``timeout`` passes. Thread-safe.
    """

    def __init__(self, pool: ChannelPool, masters: MasterClient, routes: RouteCache,
                 timeout: float = 10.0) -> None:
        self.pool, self.masters, self.routes, self.timeout = pool, masters, routes, timeout

    def stub(self, address: str) -> broker_pb2_grpc.BrokerStub:
        return broker_pb2_grpc.BrokerStub(self.pool.get(address))

    def refresh_routes(self, topics: Iterable[str]) -> None:
        self.routes.refresh(topics, placed=True)

    def committed(self, group: str, tps: Iterable[TopicPartition],
                  identity: tuple[str, int] = NO_MEMBER,
                  instance: str = "") -> dict[TopicPartition, int]:
        """Committed offsets of ``tps`` (absent: none); with a member identity, claims them;
        with ``instance``, a broadcast instance's own."""
        out: dict[TopicPartition, int] = {}

        def call(stub: Any, topic: str, parts: list[int]) -> None:
            req = broker_pb2.FetchOffsetsRequest(group=group, topic=topic, partitions=parts,
                                                  member_id=identity[0], generation=identity[1],
                                                  instance_id=instance)
            resp = invoke(stub.FetchOffsets, req, self.timeout)
            for c in resp.offsets:
                if c.offset >= 0 and c.partition in parts:
                    out[TopicPartition(topic, c.partition)] = c.offset
        self.per_broker(tps, call)
        return out

    def commit(self, group: str, offsets: dict[TopicPartition, int],
               identity: tuple[str, int] = NO_MEMBER,
               producer: tuple[int, int] | None = None, instance: str = "") -> None:
        """Commit ``offsets`` (next offset to read, per partition); Fenced if we lost one.
        ``producer`` (id, epoch): a transactional producer's, held pending by the brokers
        until its transaction's marker (broker/offsets.py). ``instance``: a broadcast
        instance's own offsets."""
        pid, epoch = producer or (0, 0)

        def call(stub: Any, topic: str, parts: list[int]) -> None:
            items = [broker_pb2.OffsetCommit(partition=p, offset=offsets[TopicPartition(topic, p)])
                     for p in parts]
            req = broker_pb2.CommitOffsetsRequest(group=group, topic=topic, member_id=identity[0],
                                                  generation=identity[1], offsets=items,
                                                  producer_id=pid, producer_epoch=epoch,
                                                  instance_id=instance)
            invoke(stub.CommitOffsets, req, self.timeout)
        self.per_broker(offsets, call)

    def list_offsets(self, tps: Iterable[TopicPartition], timestamp_ms: int = -1,
                     ) -> dict[TopicPartition, broker_pb2.PartitionOffsets]:
        """earliest/latest (and the first offset at or after ``timestamp_ms``) per partition."""
        out: dict[TopicPartition, broker_pb2.PartitionOffsets] = {}

        def call(stub: Any, topic: str, parts: list[int]) -> None:
            req = broker_pb2.ListOffsetsRequest(topic=topic, partitions=parts,
                                                timestamp_ms=timestamp_ms,
                                                topic_id=self.routes.topic_id(topic))
            for po in invoke(stub.ListOffsets, req, self.timeout).partitions:
                out[TopicPartition(topic, po.partition)] = po
        self.per_broker(tps, call)
        return out

    def resolve(self, sub: SubscriptionState, tps: Iterable[TopicPartition], group: str | None,
                identity: tuple[str, int] = NO_MEMBER, instance: str = "") -> None:
        """Give ``tps`` a start position: the committed offset, else the reset policy."""
        tps = [tp for tp in tps if sub.is_assigned(tp)]
        committed = self.committed(group, tps, identity, instance) if group and tps else {}
        for tp, off in committed.items():
            if sub.is_assigned(tp):
                sub.seek(tp, off)
                sub.set_committed(tp, off)
        self.reset(sub, [tp for tp in tps if tp not in committed])

    def reset(self, sub: SubscriptionState, tps: list[TopicPartition],
              policy: str | None = None) -> None:
        """Apply the reset policy (earliest/latest/error) to ``tps``."""
        if not tps:
            return
        policy = policy or sub.reset_policy
        for tp, po in self.list_offsets(tps).items():
            if not sub.is_assigned(tp):
                continue
            if policy == "error":
                sub.fail(tp, errors.OffsetOutOfRange(
                    f"{tp.topic}[{tp.partition}] has no valid position and "
                    "auto_offset_reset='error'", topic=tp.topic, partition=tp.partition,
                    earliest=po.earliest, latest=po.latest))
            else:
                sub.seek(tp, po.earliest if policy == "earliest" else po.latest)

    def per_broker(self, tps: Iterable[TopicPartition],
                   call: Callable[[Any, str, list[int]], None]) -> None:
        """Run ``call(stub, topic, partitions)`` per (broker, topic), retrying stale routes
        and offsets a transaction holds pending (UnstableOffsetCommit) until ``timeout``."""
        todo = list(dict.fromkeys(tps))
        deadline = time.monotonic() + self.timeout
        while todo:
            grouped, missing = self.routes.by_broker(todo)
            failed: list[TopicPartition] = list(missing)
            last: errors.TubeqError | None = None
            for address, group in grouped.items():
                for topic, parts in _by_topic(group).items():
                    try:
                        call(self.stub(address), topic, parts)
                    except errors.TubeqError as exc:
                        # A broker's UNKNOWN_TOPIC may only mean it has not learned a new
                        # topic yet: the route refresh below asks the master, who decides.
                        if not exc.refresh_metadata and \
                                not isinstance(exc, errors.UnstableOffsetCommit):
                            raise
                        last = exc
                        failed += [TopicPartition(topic, p) for p in parts]
            if not failed:
                return
            if time.monotonic() >= deadline:
                raise last or errors.Unavailable(
                    f"no live broker for {_names(failed)} within {self.timeout} s")
            time.sleep(0.1)
            self.refresh_routes({tp.topic for tp in failed})
            todo = failed


def _by_topic(tps: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tp in tps:
        out.setdefault(tp.topic, []).append(tp.partition)
    return out


def _names(tps: list[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}[{tp.partition}]" for tp in tps[:5])


class RebalanceListener(Protocol):
    def on_revoke(self, tps: set[TopicPartition]) -> None:
        """Commit what was consumed of ``tps`` (they are about to be taken away)."""

    def on_assign(self, tps: set[TopicPartition]) -> None:
        """``tps`` are now ours and have start positions (or a pending error)."""


@dataclass(frozen=True)
class CoordinatorConfig:
    group: str
    session_timeout_ms: int = 10_000
    client_host: str = ""
    handoff_ms: int = -1  # wait before claiming new partitions; -1: one heartbeat + 300 ms
    mode: str = "clustering"  # or "broadcast": every partition, offsets under instance_id
    instance_id: str = ""

    def validate(self) -> None:
        check_name(self.group, "group")
        require(self.mode in ("clustering", "broadcast"),
                f"mode must be 'clustering' or 'broadcast', got {self.mode!r}")
        if self.mode == "broadcast":
            check_instance_id(self.instance_id)
        require(1_000 <= self.session_timeout_ms <= 600_000,
                f"session_timeout_ms must be within 1000..600000, got {self.session_timeout_ms}")


class Coordinator:
    """Membership of one consumer in one group (see the module docstring for the protocol)."""

    def __init__(self, config: CoordinatorConfig, offsets: OffsetClient, sub: SubscriptionState,
                 listener: RebalanceListener) -> None:
        self.config = config
        self.offsets, self.sub, self.listener = offsets, sub, listener
        self.identity: tuple[str, int] = NO_MEMBER  # (member_id, generation), swapped whole
        self._interval = config.session_timeout_ms / 3000
        self._stop = threading.Event()
        self._lock = threading.RLock()  # one rebalance at a time
        self.lock = self._lock  # for consumers that must not interleave with a rebalance
        self._thread: threading.Thread | None = None
        # A broadcast instance's offsets are its own: read and committed under its instance
        # id, never claimed (see the module docstring).
        self.instance = config.instance_id if config.mode == "broadcast" else ""

    @property
    def broker_identity(self) -> tuple[str, int]:
        """The (member, generation) offset calls carry: none for a broadcast instance."""
        return NO_MEMBER if self.instance else self.identity

    def start(self) -> None:
        """Join now (bad group/topic raise here); the assignment is taken and the heartbeats
        sent in the background thread."""
        state = self._first_join()
        self.identity = (state.member_id, -1)  # known for leave(); generation not taken yet
        self._thread = threading.Thread(target=self._run, args=(state,), daemon=True,
                                        name=f"tubeq-hb-{self.config.group}")
        self._thread.start()

    def stop(self) -> None:
        """Stop heartbeating (the membership stays until :meth:`leave` or the session ends)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def leave(self) -> None:
        """Leave the group so the master rebalances the others at once (errors are logged)."""
        member = self.identity[0]
        if not member:
            return
        try:
            self.offsets.masters.call(
                master_pb2_grpc.MasterStub, "LeaveGroup",
                master_pb2.LeaveGroupRequest(group=self.config.group, member_id=member),
                timeout=3.0)
        except errors.TubeqError as exc:
            event(log, "group.leave_failed", logging.WARNING, group=self.config.group,
                  error=str(exc))
        self.identity = NO_MEMBER

    def _first_join(self) -> master_pb2.GroupState:
        """Join; a broadcast instance id still held is waited for until the holder's session
        would have ended (a restart after a crash), then refused (another live process)."""
        deadline = None
        while True:
            try:
                return self._join()
            except errors.InstanceInUse as exc:
                if deadline is None:
                    left_s = float(exc.details.get("expires_in_ms", 0)) / 1000
                    deadline = time.monotonic() + min(left_s, 600) + 1.0
                if time.monotonic() >= deadline or self._stop.is_set():
                    raise
                event(log, "group.instance_in_use", group=self.config.group,
                      instance=self.instance, error=str(exc))
                time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))

    def resolve_missing(self) -> None:
        """Start positions for assigned partitions whose claim failed in a rebalance.

        Does nothing while a rebalance is running (it gives those partitions their positions).
        """
        if not self._lock.acquire(blocking=False):
            return
        try:
            missing = self.sub.missing_positions()
            if missing and self.identity[1] >= 0:
                self.offsets.resolve(self.sub, missing, self.config.group, self.broker_identity,
                                     self.instance)
        finally:
            self._lock.release()

    def _join(self) -> master_pb2.GroupState:
        owned = _by_topic(self.sub.assignment()) if self.identity[0] else {}
        req = master_pb2.JoinGroupRequest(
            group=self.config.group, topics=list(self.sub.topics), member_id=self.identity[0],
            client_host=self.config.client_host or socket.gethostname(),
            session_timeout_ms=self.config.session_timeout_ms,
            owned=[master_pb2.Assignment(topic=t, partitions=ps) for t, ps in owned.items()],
            mode="broadcast" if self.instance else "", instance_id=self.instance)
        return self.offsets.masters.call(master_pb2_grpc.MasterStub, "JoinGroup", req)

    def _heartbeat(self) -> master_pb2.GroupState:
        member, generation = self.identity
        req = master_pb2.GroupHeartbeatRequest(group=self.config.group, member_id=member,
                                               generation=generation)
        return self.offsets.masters.call(master_pb2_grpc.MasterStub, "GroupHeartbeat", req,
                                         timeout=max(1.0, self.config.session_timeout_ms / 2000))

    def _run(self, first: master_pb2.GroupState) -> None:
        delay = self._step(lambda: first)
        while not self._stop.wait(delay):
            delay = self._step(lambda: self._heartbeat() if self.identity[0] else self._join())

    def _step(self, ask: Callable[[], master_pb2.GroupState]) -> float:
        """One heartbeat (or join) and its rebalance; returns the wait before the next one."""
        try:
            self._apply(ask())
            return self._interval
        except (errors.UnknownMember, errors.Fenced) as exc:
            event(log, "group.rejoin", group=self.config.group, reason=str(exc))
            if not exc.details.get("rejoin"):
                self._lose_membership()
                return 0.0
            try:  # a new active master: keep consuming what we own while we rejoin
                self._apply(self._join())
                return self._interval
            except errors.TubeqError as again:
                event(log, "group.rejoin_failed", logging.WARNING, group=self.config.group,
                      error=str(again))
                self._lose_membership()
                return 0.0
        except errors.TubeqError as exc:
            event(log, "group.heartbeat_failed", logging.WARNING, group=self.config.group,
                  error=str(exc))
        except Exception:  # the heartbeat thread must survive a listener bug
            log.exception("group.heartbeat_crashed")
        return min(self._interval, 0.5)

    def _lose_membership(self) -> None:
        with self._lock:
            self._revoke(self.sub.assignment())
            self.identity = NO_MEMBER

    def _revoke(self, tps: set[TopicPartition]) -> None:
        try:
            self.listener.on_revoke(tps)
        except Exception:
            log.exception("group.on_revoke_failed")
        self.sub.revoke(tps)

    def _apply(self, state: master_pb2.GroupState) -> None:
        """Take the master's answer: routes always, the assignment when it changed."""
        with self._lock:
            while state is not None:
                state = self._take(state)

    def _take(self, state: master_pb2.GroupState) -> master_pb2.GroupState | None:
        """One rebalance step; returns a newer state if the master moved on during the hand-off."""
        self.offsets.routes.update(state.routes)
        if state.heartbeat_interval_ms:
            self._interval = state.heartbeat_interval_ms / 1000
        new = {TopicPartition(a.topic, p) for a in state.assignments for p in a.partitions}
        current = self.sub.assignment()
        if (state.member_id, state.generation) == self.identity and new == current:
            return None
        self._revoke(current - new)
        added, _ = self.sub.assign(new)
        self.identity = (state.member_id, state.generation)
        event(log, "group.assigned", group=self.config.group, member=state.member_id,
              generation=state.generation, partitions=len(new), added=len(added))
        if added and not self.instance:
            # Hand-off: the previous owners learn of the new generation at their next
            # heartbeat, commit what they consumed and stop. Claiming only after that starts
            # us where they stopped, and no record we deliver and commit is still being
            # delivered to them. Then make sure the generation is still the current one.
            if self._stop.wait(self._handoff_s()):
                return None  # closing: the positions are not needed any more
            fresh = self._heartbeat()
            if (fresh.member_id, fresh.generation) != self.identity:
                return fresh
        self._claim(new, set(self.sub.missing_positions()) & new)
        try:
            self.listener.on_assign(added)
        except Exception:
            log.exception("group.on_assign_failed")
        return None

    def _handoff_s(self) -> float:
        if self.config.handoff_ms >= 0:
            return self.config.handoff_ms / 1000
        return self._interval + 0.3

    def _claim(self, new: set[TopicPartition], added: set[TopicPartition]) -> None:
        """Claim every partition under the new generation; start those without a position."""
        try:
            committed = self.offsets.committed(self.config.group, new, self.broker_identity,
                                               self.instance)
        except errors.TubeqError as exc:
            # Positions stay unknown: the consumer retries through OffsetClient.resolve.
            event(log, "group.claim_failed", logging.WARNING, group=self.config.group,
                  error=str(exc))
            return
        for tp in added:
            if tp in committed:
                self.sub.seek(tp, committed[tp])
                self.sub.set_committed(tp, committed[tp])
        try:
            self.offsets.reset(self.sub, [tp for tp in added if tp not in committed])
        except errors.TubeqError as exc:
            event(log, "group.reset_failed", logging.WARNING, group=self.config.group,
                  error=str(exc))
