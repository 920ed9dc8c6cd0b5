"""The broker's table of topics: which partitions it hosts and leads, their replica sets, the
stores holding them, new-data signals; and converging that table on the master's picture.

The master is the source of truth: :meth:`TopicManager.apply` takes its full picture (every
topic's settings, the partitions placed on this broker with their replica sets, deleted topic
incarnations) from each register/heartbeat response and converges the local stores on it. A
partition is hosted here when this broker holds a copy; clients' calls are served only for the
partitions it leads (:meth:`TopicManager.store_for`), replication reads and writes any copy
(:meth:`TopicManager.replica_store`). Data of a topic that merely
disappears from the picture is kept (only ``deleted`` with a matching ``topic_id`` erases it).
A partition that leaves the picture while its topic stays (reassignment: this broker no longer
holds a copy) has its copy removed (:meth:`Store.remove_partition`), and so has a copy found
when a store opens that the master does not place here (removed while the broker was down):
placed here again, a partition starts empty and copies its leader afresh. A store left with no
partition is closed and its directory deleted. This module decides what to open, claim, remove
or erase; broker/topic_dirs.py does it on disk (a topic's directory per incarnation, opening a
store with its recovery checks, removing copies and stores).

Threading: one lock guards the topic table; store I/O (open, close, delete) is done outside it
where it can be, so lookups on the produce/fetch path only ever wait for a dict swap. Copies
are removed after :meth:`TopicManager.apply` took them out of the table (lookups never see a
hosted partition without its store), outside the table's lock but before apply returns. Each topic
has a :class:`~broker.signals.Signal` that appends bump and long polls and push streams wait on
(threads or coroutines on the broker's event loop).
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from broker.config import topic_store_config
from broker.signals import Signal
from broker.topic_dirs import Leaving, TopicDirs
from lib.errors import PartitionNotHosted, UnknownPartition, UnknownTopic
from lib.lockfree import copied
from lib.logs import event
from lib.names import check_name
from storage.config import StoreConfig
from storage.flusher_pool import DEFAULT_THREADS
from storage.store import Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicSpec:
    """A topic as the master describes it (proto3 zeros mean "default")."""

    partitions: int
    stores: int = 1
    durability: str = ""
    retention_ms: int = 0
    retention_bytes: int = 0
    max_message_bytes: int = 0
    topic_id: int = 0
    min_insync_replicas: int = 1  # acks=all needs this many in-sync replicas

    def store_settings(self) -> tuple[str, int, int, int]:
        return (self.durability, self.retention_ms, self.retention_bytes, self.max_message_bytes)


@dataclass(frozen=True)
class PartitionRole:
    """A partition's replica set as the master last described it."""

    leader: int
    leader_epoch: int = 0
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    leader_address: str = ""  # where a follower fetches from
    target: tuple[int, ...] = ()  # a reassignment in progress moves it there (master/reassign)

    @property
    def replicated(self) -> bool:
        """More than one copy: appends carry the leader epoch, reads stop at the high
        watermark (broker/replication.py)."""
        return len(self.replicas) > 1


@dataclass
class Topic:
    """One topic in the table: the master's spec and roles, what is hosted and led here, the
    open stores (by store id) and the topic's new-data signal."""

    name: str
    spec: TopicSpec
    config: StoreConfig
    hosted: frozenset[int] = frozenset()  # every partition with a copy here
    led: frozenset[int] = frozenset()  # those this broker leads: clients' calls go there
    roles: dict[int, PartitionRole] = field(default_factory=dict)
    stores: dict[int, Store] = field(default_factory=dict)
    signal: Signal = field(default_factory=Signal)


class TopicManager:
    """Owns every Store of this broker under ``<data_dir>/topics`` and the table that finds
    them (lookups take no lock)."""

    def __init__(self, data_dir: str | Path, defaults: StoreConfig | None = None,
                 flusher_threads: int = DEFAULT_THREADS) -> None:
        self.defaults = defaults or StoreConfig()
        self.dirs = TopicDirs(data_dir, self.defaults, flusher_threads)
        self.root = self.dirs.root
        self.space = self.dirs.space  # shared by every store (the heartbeat reports it)
        self.checkpoints = self.dirs.checkpoints
        self._lock = threading.RLock()  # guards the table; lookups take no lock
        self._apply_lock = threading.Lock()  # one apply() at a time, its removals included
        self._topics: dict[str, Topic] = {}
        self._closed = False
        self._dropped: list[str] = []
        self.apply_failures = 0  # topics the last apply() could not converge on
        # Moves on after every change of a topic's roles, hosted or led partitions: leading()
        # and followed() are asked several times a second, and at 10,000 topics walking
        # them all each time cost more than the replication it serves.
        self._roles_version = 0
        self._lists: dict[str, tuple[int, list[tuple[str, int, Any]]]] = {}
        self._leaving: list[Leaving] = []
        self._removed: list[tuple[str, int]] = []

    def on_store_opened(self, check: Callable[[str, Store], None]) -> None:
        """Call ``check(topic, store)`` for every store opened (recovered) from now on,
        before it serves anything."""
        self.dirs.on_store_opened(check)

    # ------------------------------------------------------------------ lookups (hot path)

    def store_for(self, topic: str, partition: int, topic_id: int = 0) -> Store:
        """The store of a partition this broker leads (clients produce, fetch and commit
        there), or UnknownTopic / UnknownPartition / PartitionNotHosted (also for a partition
        it holds a follower copy of: the message names the leader). ``topic_id``, the
        incarnation the caller's routes name: this broker still holding an older one (it has
        not heard of the re-creation yet) is PartitionNotHosted too, for what it would append
        there would be erased with it, and what it would serve is gone. A caller naming an
        older incarnation is served by name (a topic's name is its address)."""
        t = self.topic(topic)
        if topic_id > t.spec.topic_id:
            raise PartitionNotHosted(
                f"topic {topic} was re-created (incarnation {topic_id}); this broker still "
                f"holds incarnation {t.spec.topic_id} until the master's next word: retry",
                topic=topic, partition=partition, topic_id=t.spec.topic_id)
        if partition not in t.led:
            self._not_led(t, partition)
        return self.replica_store(topic, partition)

    def replica_store(self, topic: str, partition: int) -> Store:
        """The store of a partition with a copy here, leader or follower (replication)."""
        t = self.topic(topic)
        if not 0 <= partition < t.spec.partitions:
            raise UnknownPartition(
                f"topic {topic} has partitions 0..{t.spec.partitions - 1}, not {partition}",
                topic=topic, partition=partition, partitions=t.spec.partitions)
        store = t.stores.get(partition % max(1, t.spec.stores)) if partition in t.hosted else None
        if store is None:
            raise PartitionNotHosted(
                f"partition {topic}/{partition} is not hosted on this broker: refresh routes",
                topic=topic, partition=partition)
        return store

    def _not_led(self, t: Topic, partition: int) -> None:
        role = t.roles.get(partition)
        if partition in t.hosted and role is not None:
            raise PartitionNotHosted(
                f"partition {t.name}/{partition} is led by broker {role.leader} (leader epoch "
                f"{role.leader_epoch}); this broker holds a follower copy: refresh routes",
                topic=t.name, partition=partition, leader=role.leader,
                leader_epoch=role.leader_epoch)
        self.replica_store(t.name, partition)  # raises the error that fits

    def role(self, topic: str, partition: int) -> PartitionRole | None:
        """The partition's replica set, when the master sent one (None: not hosted here)."""
        t = self._topics.get(topic)
        return None if t is None else t.roles.get(partition)

    def leading(self) -> list[tuple[str, int, PartitionRole]]:
        """(topic, partition, role) of every replicated partition this broker leads (do
        not mutate: it is shared until the roles change)."""
        return self._listed("leading", lambda: [
            (name, p, t.roles[p]) for name, t in copied(self._topics).items()
            for p in sorted(t.led) if p in t.roles and t.roles[p].replicated])

    def _listed(self, kind: str, build: Callable[[], list[tuple[str, int, Any]]]
                ) -> list[tuple[str, int, Any]]:
        """``build()``'s list, remembered until the roles change (the version is read
        before building: a change made meanwhile makes the next call build again)."""
        version = self._roles_version
        cached = self._lists.get(kind)
        if cached is not None and cached[0] == version:
            return cached[1]
        listed = build()
        self._lists[kind] = (version, listed)
        return listed

    def set_isr(self, topic: str, partition: int, leader_epoch: int,
                isr: list[int]) -> bool:
        """Adopt an ISR the master recorded for a partition led here at ``leader_epoch``;
        False when the role moved on meanwhile."""
        with self._lock:
            t = self._topics.get(topic)
            role = None if t is None else t.roles.get(partition)
            if role is None or role.leader_epoch != leader_epoch:
                return False
            t.roles = {**t.roles, partition: replace(role, isr=tuple(isr))}
            self._roles_version += 1
            return True

    def followed(self) -> list[tuple[str, int, PartitionRole]]:
        """(topic, partition, role) of every partition this broker holds a follower copy of
        (do not mutate: shared as :meth:`leading`'s)."""
        return self._listed("followed", lambda: [
            (name, p, t.roles[p]) for name, t in copied(self._topics).items()
            for p in sorted(t.hosted - t.led) if p in t.roles])

    def topic(self, topic: str) -> Topic:
        t = self._topics.get(topic)
        if t is None:
            check_name(topic)
            raise UnknownTopic(f"unknown topic {topic!r} on this broker", topic=topic)
        return t

    def hosted(self, topic: str) -> list[int]:
        return sorted(self.topic(topic).hosted)

    def led(self, topic: str) -> list[int]:
        """The partitions of ``topic`` this broker leads (what clients may ask it about)."""
        return sorted(self.topic(topic).led)

    def signal(self, topic: str) -> Signal:
        return self.topic(topic).signal

    def wakes_deferred(self) -> AbstractContextManager[None]:
        """The flusher wakes of the appends inside the block, applied together at its end
        (storage/flusher_pool.py): for a call appending to many stores without waiting."""
        return self.dirs.flushers.wakes_deferred()

    def notify(self, topic: str) -> None:
        t = self._topics.get(topic)
        if t is not None:
            t.signal.bump()

    def snapshot(self) -> list[tuple[str, int, Store]]:
        """(topic, partition, store) of every hosted partition (for heartbeat stats; shared
        as :meth:`leading`'s)."""
        def build() -> list[tuple[str, int, Store]]:
            out = []
            for name, t in copied(self._topics).items():
                for p in sorted(t.hosted):
                    store = t.stores.get(p % max(1, t.spec.stores))
                    if store is not None:
                        out.append((name, p, store))
            return out
        return self._listed("snapshot", build)

    # ------------------------------------------------------------------ applying the master

    def apply(self, topics: Mapping[str, TopicSpec], placed: Iterable[tuple[str, int]],
              deleted: Iterable[tuple[str, int]] = (),
              roles: Mapping[tuple[str, int], PartitionRole] | None = None,
              broker_id: int | None = None) -> list[str]:
        """Converge on the master's picture: ``placed`` lists (topic, partition) hosted here;
        ``roles`` their replica sets, where the master sent them: this broker (``broker_id``)
        leads a partition when it is the role's leader, or when no role came (one copy).

        Returns the topics whose local data was dropped (deleted or re-created), so the caller
        can forget their committed offsets and producer state too; the partitions whose copies
        were removed are in :meth:`removed_partitions`.
        """
        with self._apply_lock:
            with self._lock:
                try:
                    dropped = self._converge(topics, placed, deleted, roles or {}, broker_id)
                finally:
                    self._roles_version += 1
                leaving, self._leaving = self._leaving, []
            self._removed = self.dirs.remove(leaving)
            return dropped

    def removed_partitions(self) -> list[tuple[str, int]]:
        """(topic, partition) of the copies the last :meth:`apply` removed from this broker,
        so the caller can forget their per-partition state too."""
        return list(self._removed)

    def _converge(self, topics: Mapping[str, TopicSpec], placed: Iterable[tuple[str, int]],
                  deleted: Iterable[tuple[str, int]],
                  roles: Mapping[tuple[str, int], PartitionRole],
                  broker_id: int | None) -> list[str]:
        """The table's part of :meth:`apply` (the lock held); copies to remove are queued."""
        wanted: dict[str, set[int]] = {}
        for name, p in placed:
            if name in topics and 0 <= p < topics[name].partitions:
                wanted.setdefault(name, set()).add(p)
        self._dropped = []
        self.apply_failures = 0
        if self._closed:
            return []
        for name, topic_id in deleted:
            if name not in topics or topics[name].topic_id != topic_id:
                self._delete(name, topic_id)
        for name in [n for n in self._topics if n not in topics]:
            self._forget(name)
        for name, spec in topics.items():
            hosted = frozenset(wanted.get(name, ()))
            mine = {p: roles[(name, p)] for p in hosted if (name, p) in roles}
            led = frozenset(p for p in hosted if p not in mine or mine[p].leader == broker_id)
            try:
                self._apply_topic(check_name(name), spec, hosted, led, mine)
            except Exception as exc:  # noqa: BLE001 - one bad topic must not stop the rest
                self.apply_failures += 1
                event(log, "topic.apply_failed", logging.ERROR, topic=name, error=repr(exc))
        return self._dropped

    def _apply_topic(self, name: str, spec: TopicSpec, hosted: frozenset[int],
                     led: frozenset[int], roles: dict[int, PartitionRole]) -> None:
        t = self._topics.get(name)
        if t is not None and t.spec.topic_id != spec.topic_id:
            self._delete(name, t.spec.topic_id)  # re-created: the old incarnation is gone
            t = None
        if t is None:
            if hosted:  # else nothing of it lives here: no directory, no stores
                self._open_new(name, spec, hosted, led, roles)
            return
        if t.spec.store_settings() != spec.store_settings():
            self._reopen(t, spec)
        t.spec = spec
        self._open_stores(t, hosted)
        # Lookups take no lock: a partition gained is hosted before it is led, and its store
        # is open before either; one lost is removed from its store only after neither.
        t.roles, t.hosted, t.led = roles, hosted, led
        self._queue_removals(t)

    def _open_new(self, name: str, spec: TopicSpec, hosted: frozenset[int],
                  led: frozenset[int], roles: dict[int, PartitionRole]) -> None:
        """Open a new topic's stores, then publish it: lookups take no lock, and a topic they
        could see before its stores open would answer PartitionNotHosted for partitions the
        master says are here (clients would refresh routes that are not stale)."""
        if self.dirs.claim(name, spec.topic_id):
            self._dropped.append(name)  # an older incarnation's data was there
        t = Topic(name, spec, self._config_for(spec))
        try:
            self._open_stores(t, hosted)
        except BaseException:
            for store in t.stores.values():
                store.close()
            raise
        t.roles, t.hosted, t.led = roles, hosted, led
        self._topics[name] = t
        event(log, "topic.opened", topic=name, topic_id=spec.topic_id)
        self._queue_removals(t)

    def _config_for(self, spec: TopicSpec) -> StoreConfig:
        return topic_store_config(self.defaults, *spec.store_settings())

    def _open_stores(self, t: Topic, hosted: frozenset[int]) -> None:
        stores = max(1, t.spec.stores)
        for p in sorted(hosted):
            sid = p % stores
            store = t.stores.get(sid)
            if store is None:
                parts = [q for q in hosted if q % stores == sid]
                t.stores[sid] = self.dirs.open_store(t.name, t.spec.topic_id, sid, parts, stores,
                                                     t.config)
            elif p not in store.partitions:
                store.add_partition(p)

    def _queue_removals(self, t: Topic) -> None:
        """Queue the copies ``t``'s stores hold that are not hosted (any more) for
        :meth:`TopicDirs.remove`; a store left with none hosted leaves ``t.stores`` now."""
        stores = max(1, t.spec.stores)
        for sid, store in list(t.stores.items()):
            gone = tuple(p for p in store.partitions if p not in t.hosted)
            whole = not any(p % stores == sid for p in t.hosted)
            if whole:
                del t.stores[sid]
            if gone or whole:
                self._leaving.append(Leaving(t.name, t.spec.topic_id, store, gone, whole))

    def _reopen(self, t: Topic, spec: TopicSpec) -> None:
        """Settings changed: close the stores and reopen them with the new config."""
        old, t.stores = t.stores, {}
        t.config = self._config_for(spec)
        for store in old.values():
            store.close()  # in-flight appends on it get StoreClosed (retriable)
        event(log, "topic.reconfigured", topic=t.name, durability=t.config.durability,
              retention_ms=t.config.retention_ms, max_message_bytes=t.config.max_message_bytes)

    def _forget(self, name: str) -> None:
        t = self._topics.pop(name)
        t.signal.close()
        for store in t.stores.values():
            store.close()
        event(log, "topic.unhosted", topic=name)

    def _delete(self, name: str, topic_id: int) -> None:
        """Drop the data of one incarnation of a topic (only when its topic_id matches)."""
        t = self._topics.get(name)
        if t is not None and t.spec.topic_id == topic_id:
            self._forget(name)
        if name not in self._topics and self.dirs.erase(name, topic_id):
            self._dropped.append(name)

    def wake_all(self) -> None:
        """Close every topic's signal: long polls return and push streams end (shutdown)."""
        for t in copied(self._topics).values():
            t.signal.close()

    def close(self) -> None:
        """Close every store (each flushes and fsyncs) and wake every long poll."""
        with self._lock:
            self._closed = True
            topics, self._topics = list(self._topics.values()), {}
            self._roles_version += 1
        for t in topics:
            t.signal.close()
            for store in t.stores.values():
                try:
                    store.close()
                except Exception as exc:  # noqa: BLE001 - close the others anyway
                    event(log, "store.close_failed", logging.ERROR, topic=t.name, error=repr(exc))
        self.dirs.close()  # after the stores: their last checkpoints go in too

