"""The one client-side cache of topic routes (producer and consumers): which broker hosts
each partition, and the topic settings a client checks.

Routes come from the active master (``Master.GetRoutes``, or the routes a group heartbeat
carries: :meth:`RouteCache.update`). The producer's :meth:`RouteCache.get` fetches an entry on
first use, again after ``max_age_s`` (so new partitions and moved placements are picked up
without errors), and again on demand: a caller that got an error with ``refresh_metadata``
calls :meth:`RouteCache.invalidate` and the next ``get`` asks the master. An entry that
only aged is fetched again together with every other aged one (up to ``AGED_PER_CALL``): a
producer writing to 10,000 topics made one master call per topic every ``max_age_s``, in its
sending thread, and that was most of its time. Entries past half their age go along, so
topics first fetched one by one come to share their refreshes; and the aged ones are found
from the oldest on (``_by_age``), not by a walk of every entry per refresh (at 10,000 topics
fetched one by one, those walks were a seventh of a producer's samples). Consumers look
partitions up by :class:`TopicPartition` (:meth:`address`, :meth:`by_broker`); ``version``
grows whenever an address changes, so fetchers know when to regroup partitions by broker.

A topic the master does not know raises UnknownTopic (from the master); a known topic whose
partitions are not placed yet has ``count`` 0 and every caller treats it as Unavailable
(retriable), not as unknown.

Thread-safety: every method may be called from any thread. Reads of a fresh entry take no
master call; one lock serialises master calls so a burst of invalidations from many in-flight
batches turns into one GetRoutes, not one per batch.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from lib.errors import PartitionNotHosted, TubeqError, Unavailable, UnknownTopic
from lib.proto import master_pb2, master_pb2_grpc
from lib.records import DEFAULT_MAX_MESSAGE_BYTES
from lib.rpc import MasterClient
from lib.types import TopicPartition


@dataclass(frozen=True, slots=True)
class PartitionRoute:
    """Where one partition lives; ``available`` is false while its broker is down."""

    partition: int
    broker_id: int
    address: str
    available: bool


@dataclass(frozen=True, slots=True)
class TopicRoutes:
    """All partitions of one topic plus the settings a producer checks before sending."""

    topic: str
    partitions: tuple[PartitionRoute, ...]
    available: tuple[int, ...]  # partition numbers whose broker is up
    max_message_bytes: int
    topic_id: int
    fetched_at: float  # time.monotonic() of the master's answer
    retention_ms: int = 0  # the delay topic's gives the longest delay (lib/delay.py)
    tps: tuple[TopicPartition, ...] = ()  # TopicPartition(topic, i) at i: made once, not per send

    @property
    def count(self) -> int:
        return len(self.partitions)

    def address(self, partition: int) -> str:
        return self.partitions[partition].address

    def leader(self, partition: int) -> str:
        """The partition's broker address; "" when none is known or it has no such
        partition."""
        return self.partitions[partition].address if 0 <= partition < self.count else ""


def topic_routes(route: master_pb2.TopicRoute, now: float) -> TopicRoutes:
    """Convert one ``TopicRoute`` message (partitions sorted by number)."""
    parts = tuple(sorted(
        (PartitionRoute(p.partition, p.broker_id, p.address, p.available)
         for p in route.partitions),
        key=lambda p: p.partition))
    settings = route.settings
    return TopicRoutes(
        topic=route.topic,
        partitions=parts,
        available=tuple(p.partition for p in parts if p.available and p.address),
        max_message_bytes=settings.max_message_bytes or DEFAULT_MAX_MESSAGE_BYTES,
        topic_id=settings.topic_id,
        fetched_at=now,
        retention_ms=settings.retention_ms,
        tps=tuple(TopicPartition(route.topic, i) for i in range(len(parts))),
    )


AGED_PER_CALL = 2000  # aged topics refreshed by one GetRoutes (the master takes 10,000)


class RouteCache:
    """topic -> :class:`TopicRoutes`, fetched from the master and refreshed when stale."""

    def __init__(self, master: MasterClient, max_age_s: float = 30.0,
                 timeout: float | None = None) -> None:
        self._master = master
        self.max_age_s = max_age_s
        self.timeout = timeout
        self._lock = threading.Lock()  # guards _routes, _stale, _addr and version
        self._fetch_lock = threading.Lock()  # one GetRoutes at a time
        self._routes: dict[str, TopicRoutes] = {}
        self._by_age: OrderedDict[str, None] = OrderedDict()  # topics, oldest fetch first
        self._stale: set[str] = set()
        # Changed in place under the lock (readers only get() from it, never iterate): a copy
        # per update made a producer's first sends to 10,000 topics quadratic.
        self._addr: dict[TopicPartition, str] = {}
        self._addressed: dict[str, list[TopicPartition]] = {}  # topic -> its keys in _addr
        self.version = 0

    # -- by topic (producer) -------------------------------------------------------------

    def get(self, topic: str) -> TopicRoutes:
        """Routes of ``topic``, from the cache when fresh; raises UnknownTopic if none."""
        entry = self._routes.get(topic)
        if entry is not None and topic not in self._stale and \
                time.monotonic() - entry.fetched_at < self.max_age_s:
            return entry
        return self._fetch_one(topic)

    def cached(self, topic: str) -> TopicRoutes | None:
        """The cached entry even if stale (never calls the master)."""
        return self._routes.get(topic)

    def invalidate(self, topic: str) -> None:
        """Mark ``topic`` stale: the next :meth:`get` asks the master."""
        with self._lock:
            self._stale.add(topic)

    def refresh(self, topics: Iterable[str], placed: bool = False) -> dict[str, TopicRoutes]:
        """Ask the master for ``topics`` now (UnknownTopic if it knows one not); with
        ``placed``, a topic without placed partitions raises Unavailable."""
        wanted = sorted(set(topics))
        request = master_pb2.GetRoutesRequest(topics=wanted)
        response = self._master.call(master_pb2_grpc.MasterStub, "GetRoutes", request,
                                     timeout=self.timeout)
        found = self.update(r for r in response.routes if r.topic in wanted)
        with self._lock:
            for name in wanted:
                self._stale.discard(name)
        if placed:
            for name in wanted:
                if name in found and not found[name].count:
                    raise Unavailable(f"topic {name} has no partitions placed yet", topic=name)
        return found

    def _fetch_one(self, topic: str) -> TopicRoutes:
        requested_at = time.monotonic()
        with self._fetch_lock:
            entry = self._routes.get(topic)
            # Another thread may have fetched while this one waited for the lock.
            if entry is not None and entry.fetched_at >= requested_at and \
                    topic not in self._stale:
                return entry
            aged = self._aged(topic, requested_at) if entry is not None else []
            found = self._refresh_with_aged(topic, aged)
        if topic not in found:
            raise UnknownTopic(f"unknown topic {topic!r}: the master has no such topic",
                               topic=topic)
        return found[topic]

    def _refresh_with_aged(self, topic: str, aged: list[str]) -> dict[str, TopicRoutes]:
        """:meth:`refresh` of ``topic`` and ``aged``; an aged topic deleted since it was
        cached (the master refuses the whole call naming it) is forgotten, and the call made
        again without it (at most 3 times, then ``topic`` alone)."""
        for _ in range(3):
            try:
                return self.refresh([topic, *aged])
            except UnknownTopic as err:
                gone = err.details.get("topic")
                if not aged or gone == topic or gone not in aged:
                    raise
                self._forget([gone])
                aged = [name for name in aged if name != gone]
        return self.refresh([topic])

    def _aged(self, topic: str, now: float) -> list[str]:
        """Other cached topics past half of ``max_age_s``, oldest first, to refresh in the
        same call (module docstring)."""
        oldest = now - self.max_age_s / 2
        aged = []
        with self._lock:
            for name in self._by_age:
                if self._routes[name].fetched_at >= oldest or len(aged) >= AGED_PER_CALL - 1:
                    break
                if name != topic:
                    aged.append(name)
        return aged

    def _forget(self, topics: list[str]) -> None:
        """Drop topics the master no longer knows (deleted since they were cached)."""
        with self._lock:
            for name in topics:
                self._routes.pop(name, None)
                self._by_age.pop(name, None)
                for tp in self._addressed.pop(name, ()):
                    self._addr.pop(tp, None)
                    self.version += 1

    # -- by partition (consumers) --------------------------------------------------------

    def update(self, routes: Iterable[master_pb2.TopicRoute]) -> dict[str, TopicRoutes]:
        """Merge ``TopicRoute`` messages; unavailable partitions lose their address."""
        now = time.monotonic()
        found = {r.topic: topic_routes(r, now) for r in routes}
        if not found:
            return found
        with self._lock:
            self._routes.update(found)
            for name in found:
                self._by_age[name] = None
                self._by_age.move_to_end(name)
            changed = False
            for route in found.values():
                new = {TopicPartition(route.topic, p.partition): p.address
                       for p in route.partitions if p.available and p.address}
                for tp in self._addressed.get(route.topic, ()):
                    if tp not in new:
                        del self._addr[tp]
                        changed = True
                for tp, a in new.items():
                    if self._addr.get(tp) != a:
                        self._addr[tp] = a
                        changed = True
                self._addressed[route.topic] = list(new)
            if changed:
                self.version += 1
        return found

    def address(self, tp: TopicPartition) -> str | None:
        return self._addr.get(tp)

    def partitions(self, topic: str) -> int | None:
        """Number of partitions of ``topic`` known from routes (None: never seen)."""
        entry = self._routes.get(topic)
        return None if entry is None else entry.count

    def max_message_bytes(self, topic: str) -> int | None:
        """The topic's largest message (from its settings), None when not known."""
        entry = self._routes.get(topic)
        return None if entry is None else entry.max_message_bytes

    def topic_id(self, topic: str) -> int:
        """The topic's incarnation as the cached routes know it (0: not known). Requests carry
        it so that a broker still holding an older incarnation refuses them."""
        entry = self._routes.get(topic)
        return 0 if entry is None else entry.topic_id

    def by_broker(self, tps: Iterable[TopicPartition]) -> tuple[dict[str, list[TopicPartition]],
                                                               list[TopicPartition]]:
        """Group ``tps`` by broker address; also returns those without a known address."""
        grouped: dict[str, list[TopicPartition]] = {}
        missing = []
        addr = self._addr
        for tp in tps:
            a = addr.get(tp)
            if a is None:
                missing.append(tp)
            else:
                grouped.setdefault(a, []).append(tp)
        return grouped, missing


def confirm_unknown(topic: str, error: TubeqError, ask_master: Callable[[], object]) -> TubeqError:
    """A broker learns a new topic at its next heartbeat, so its UNKNOWN_TOPIC right after a
    create is transient: only the master can say a topic does not exist.

    ``ask_master`` fetches the topic's routes from the master; its error (UnknownTopic: final,
    Unavailable: retriable) is returned, else a retriable PartitionNotHosted.
    """
    try:
        ask_master()
    except TubeqError as exc:
        return exc
    return PartitionNotHosted(f"{error.message} (the master knows {topic}: the broker has not "
                              "learned it yet)", topic=topic)
