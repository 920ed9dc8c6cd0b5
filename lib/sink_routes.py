"""What the exactly-once sink client (lib/sink.py) needs to follow failovers: each partition's
leader *and* its in-sync replicas with their addresses (a task stages copies on them), and one
retry policy shared by stage and commit.

The producer's :class:`lib.routes.RouteCache` keeps only leaders; :class:`ReplicaRoutes` keeps
the master's whole ``TopicRoute`` per topic (the same ``GetRoutes`` call) and feeds the
``RouteCache`` it is given, so both views move together. Thread-safe: tasks of one Spark
worker process and the driver's commits share one client.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from lib.errors import RequestTimedOut, TubeqError, UnknownPartition, UnknownTopic
from lib.proto import master_pb2, master_pb2_grpc
from lib.routes import RouteCache
from lib.rpc import MasterClient

MAX_AGE_S = 30.0  # as the producer's routes: a moved placement is also found by its errors
BACKOFF_S = (0.1, 1.0)  # first retry delay, doubling up to the second
# Retries of an error that no route change can cure (staging full, a disk full): as before
# failovers were followed; waiting a whole request timeout for them helps nobody.
OTHER_RETRIES = 5


class ReplicaRoutes:
    """topic -> the master's ``TopicRoute`` (leader, replicas, ISR, replica addresses)."""

    def __init__(self, master: MasterClient, routes: RouteCache, timeout: float,
                 max_age_s: float = MAX_AGE_S) -> None:
        self._master = master
        self._routes = routes
        self.timeout = timeout
        self.max_age_s = max_age_s
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, master_pb2.TopicRoute]] = {}

    def get(self, topic: str, fresh: bool = False) -> master_pb2.TopicRoute:
        """``topic``'s route, from the cache unless ``fresh`` or older than ``max_age_s``."""
        with self._lock:
            entry = self._cache.get(topic)
        if not fresh and entry is not None and time.monotonic() - entry[0] < self.max_age_s:
            return entry[1]
        return self.refresh([topic])[topic]

    def refresh(self, topics: Iterable[str]) -> dict[str, master_pb2.TopicRoute]:
        """Ask the master for ``topics`` now; UnknownTopic for one it does not know."""
        wanted = sorted(set(topics))
        response = self._master.call(master_pb2_grpc.MasterStub, "GetRoutes",
                                     master_pb2.GetRoutesRequest(topics=wanted),
                                     timeout=self.timeout)
        now = time.monotonic()
        found = {r.topic: r for r in response.routes if r.topic in wanted}
        with self._lock:
            self._cache.update((name, (now, r)) for name, r in found.items())
        self._routes.update(found.values())
        for name in wanted:
            if name not in found:
                raise UnknownTopic(f"unknown topic {name!r}: the master has no such topic",
                                   topic=name)
        return found

    def addresses(self, topics: Iterable[str]) -> dict[int, str]:
        """Broker id -> address of every replica of ``topics`` (fresh from the master)."""
        out: dict[int, str] = {}
        for route in self.refresh(topics).values():
            for p in route.partitions:
                out.update((b, a) for b, a in zip(p.replicas, p.replica_addresses, strict=False)
                           if a)
                if p.address:
                    out[p.broker_id] = p.address
        return out

    @staticmethod
    def partition(route: master_pb2.TopicRoute, partition: int) -> master_pb2.PartitionRoute:
        for p in route.partitions:
            if p.partition == partition:
                return p
        raise UnknownPartition(f"topic {route.topic} has {len(route.partitions)} partitions, "
                               f"no partition {partition}", topic=route.topic,
                               partition=partition, partitions=len(route.partitions))


class Retry:
    """The retries of one stage or commit: every retriable error is retried (the caller asks
    the master for fresh routes first) until ``budget_s`` after the first failure, the
    producer's ``request_timeout_ms`` rule, with a backoff of 0.1 s doubling to 1 s. A failover
    takes the master a few seconds, so a fixed count of quick retries is not enough. Errors
    that do not point at the route (no ``refresh_metadata``, not a timeout) get
    ``OTHER_RETRIES`` retries at most."""

    def __init__(self, budget_s: float) -> None:
        self.budget_s = budget_s
        self.deadline: float | None = None
        self.delay = BACKOFF_S[0]
        self.others = 0

    def after(self, exc: TubeqError) -> None:
        """Sleep before the next attempt, or raise ``exc`` when it is final or time is up."""
        now = time.monotonic()
        if self.deadline is None:
            self.deadline = now + self.budget_s
        if not (exc.refresh_metadata or isinstance(exc, RequestTimedOut)):
            self.others += 1
        if not exc.retriable or now + self.delay >= self.deadline or \
                self.others > OTHER_RETRIES:
            raise exc
        time.sleep(self.delay)
        self.delay = min(BACKOFF_S[1], self.delay * 2)
