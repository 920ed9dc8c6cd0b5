"""The topics part of the master's state: each topic's record (settings, replicas, leaders, ISR,
leader epochs, reassignment targets), the tombstones of deleted ones, and the replicated
commands that change them.

Commands: ``create_topic``, ``alter_topic``, ``delete_topic``, ``alter_isr`` (a partition's
leader shrinks or expands its ISR, or finishes its reassignment), ``elect_leaders`` (failover:
new leaders under the next leader epoch, master/election.py) and ``reassign`` (partitions move
to target replicas, master/reassign.py). A drain reassigns through :meth:`TopicRecords.reassign`
too (master/state_brokers.py). They run inside :class:`~master.state.MetaState`'s transaction
and are deterministic, so every master raises the same errors and writes the same records.

Records are replaced, never mutated: readers may keep what they were given.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from lib.errors import Fenced, InvalidArgument, TopicExists, UnknownTopic
from master import reassign
from master.settings import SINGLE_COPY
from master.state_tables import Context, Handler, SeqLog, dump, load, read_all

# Process-wide, so a TopicRecords rebuilt after a snapshot restore never repeats a version.
_VERSIONS = itertools.count(1)

# Leader epochs count from 1: the stores read 0 as "no epoch", what the records of a topic
# created before replication existed carry (storage/epochs.py).
FIRST_LEADER_EPOCH = 1


def with_replicas(record: dict[str, Any], replicas: list[list[int]],
                  first_epoch: int = FIRST_LEADER_EPOCH) -> dict[str, Any]:
    """``record`` with partitions ``replicas`` (preferred leader first): a partition it already
    had keeps its leader, epoch and ISR; a new one starts led by its first replica at
    ``first_epoch`` with every replica in sync (all are empty)."""
    leaders, isr, epochs = [], [], []
    for p, reps in enumerate(replicas):
        if p < len(record.get("replicas", ())):
            leaders.append(record["placement"][p])
            isr.append(list(record["isr"][p]))
            epochs.append(record["leader_epochs"][p])
        else:
            leaders.append(reps[0])
            isr.append(list(reps))
            epochs.append(first_epoch)
    return {**record, "replicas": [list(r) for r in replicas], "placement": leaders,
            "isr": isr, "leader_epochs": epochs}


def upgraded(record: dict[str, Any]) -> dict[str, Any]:
    """A topic record as every master reads it: one written before replication existed (a
    ``placement`` list only) becomes one copy per partition, led by that broker, epoch 0."""
    if "replicas" in record:
        return record
    settings = {**SINGLE_COPY, **record["settings"]}
    return with_replicas({**record, "settings": settings},
                         [[b] for b in record["placement"]], first_epoch=0)


def _put(items: list, i: int, value: Any) -> list:
    """A copy of ``items`` with ``items[i] = value`` (records are replaced, never mutated)."""
    return [*items[:i], value, *items[i + 1:]]


def _replicas_of(cmd: dict[str, Any]) -> list[list[int]]:
    """Replica lists of a create/alter command (one written before replication: ``placement``,
    one broker per partition)."""
    if "replicas" in cmd:
        replicas = [list(r) for r in cmd["replicas"]]
    else:
        replicas = [[b] for b in cmd["placement"]]
    for reps in replicas:
        if not reps or len(set(reps)) != len(reps):
            raise InvalidArgument(f"bad replica list {reps!r}: needs distinct brokers")
    return replicas


def _moved(record: dict[str, Any], changes: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """``record`` with the reassignments ``changes`` started (master/reassign.py)."""
    for change in changes:
        p, target = int(change["partition"]), [int(b) for b in change["target"]]
        if not 0 <= p < len(record["replicas"]) or not target \
                or len(set(target)) != len(target):
            raise InvalidArgument(f"bad reassignment of {record['topic']}/{p} to {target}: "
                                  "needs distinct brokers")
        record = reassign.start(record, p, target)
    return record


class TopicRecords:
    """Topic records by name (cached; the ``topics`` database) and the tombstones log."""

    def __init__(self, env: Any, topics_db: Any, meta_db: Any, tombstones: SeqLog) -> None:
        """``meta_db`` holds the next topic id (``next_topic_id``)."""
        self._topics_db, self._meta_db, self._tombstones = topics_db, meta_db, tombstones
        self._topics: dict[str, dict[str, Any]] = {
            name: upgraded(record) for name, record in read_all(env, topics_db).items()}
        self.version = next(_VERSIONS)  # moves on with every change of a record (on this master)

    def handlers(self) -> dict[str, Handler]:
        """op -> the handler :class:`~master.state.MetaState` applies it with."""
        return {"create_topic": self._create_topic, "alter_topic": self._alter_topic,
                "delete_topic": self._delete_topic, "alter_isr": self._alter_isr,
                "elect_leaders": self._elect_leaders, "reassign": self._reassign}

    # -- reads ---------------------------------------------------------------------------

    def all(self) -> dict[str, dict[str, Any]]:
        """name -> record (a new dict; the records themselves are shared, do not mutate)."""
        return dict(self._topics)

    def get(self, name: str) -> dict[str, Any] | None:
        return self._topics.get(name)

    def tombstones(self) -> list[dict[str, Any]]:
        """Deleted topic incarnations, oldest first: {topic, topic_id, time_ms}."""
        return self._tombstones.entries()

    # -- commands ------------------------------------------------------------------------

    def reassign(self, ctx: Context, changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Start the reassignments ``changes`` in the command's transaction; a change for a
        topic since re-created (another topic id) or deleted is skipped. Returns the changes
        applied."""
        applied = []
        for name in dict.fromkeys(c["topic"] for c in changes):
            old = self._topics.get(name)
            mine = [c for c in changes if c["topic"] == name
                    and old is not None and c["topic_id"] == old["topic_id"]]
            if mine:
                self._put_topic(ctx, _moved(old, mine))
                applied += mine
        return applied

    def _create_topic(self, ctx: Context, cmd: dict[str, Any]) -> dict[str, Any]:
        txn, _staged = ctx
        name = cmd["topic"]
        if name in self._topics:
            if cmd.get("request_id") and self._topics[name].get("request_id") == \
                    cmd["request_id"]:
                return self._topics[name]  # the same create, retried (a lost answer)
            raise TopicExists(f"topic {name!r} already exists", topic=name)
        limit = int(cmd.get("max_topics", 0))
        if limit and len(self._topics) >= limit:
            raise InvalidArgument(f"cannot create topic {name!r}: the cluster already has "
                                  f"{len(self._topics)} topics (max_topics={limit})",
                                  limit=limit)
        raw = txn.get(b"next_topic_id", db=self._meta_db)
        topic_id = 1 if raw is None else int(load(raw))
        txn.put(b"next_topic_id", dump(topic_id + 1), db=self._meta_db)
        replicas = _replicas_of(cmd)
        if len(replicas) != cmd["settings"]["partitions"]:
            raise InvalidArgument("placement does not cover every partition")
        record = with_replicas(
            {"topic": name, "topic_id": topic_id, "created_ms": cmd["time_ms"],
             "settings": {**SINGLE_COPY, **cmd["settings"]}, "placement": [],
             "request_id": str(cmd.get("request_id", "")),
             **({"owner": dict(cmd["owner"])} if cmd.get("owner") else {})}, replicas)
        self._put_topic(ctx, record)
        return record

    def _alter_topic(self, ctx: Context, cmd: dict[str, Any]) -> dict[str, Any]:
        old = self._existing(cmd["topic"])
        replicas = _replicas_of(cmd)
        if replicas[:len(old["replicas"])] != old["replicas"]:
            raise InvalidArgument(f"alter of {cmd['topic']!r} would move existing partitions",
                                  topic=cmd["topic"])
        if len(replicas) != cmd["settings"]["partitions"]:
            raise InvalidArgument("placement does not cover every partition")
        record = with_replicas({**old, "settings": {**SINGLE_COPY, **cmd["settings"]}},
                               replicas)
        record = _moved(record, cmd.get("reassign", ()))
        self._put_topic(ctx, record)
        return record

    def _delete_topic(self, ctx: Context, cmd: dict[str, Any]) -> dict[str, Any]:
        txn, staged = ctx
        old = self._existing(cmd["topic"])
        txn.delete(old["topic"].encode(), db=self._topics_db)
        self._tombstones.append(txn, {"topic": old["topic"], "topic_id": old["topic_id"],
                                      "time_ms": cmd["time_ms"]})
        staged.append(lambda: self._changed(self._topics.pop, old["topic"], None))
        return old

    def _alter_isr(self, ctx: Context, cmd: dict[str, Any]) -> dict[str, Any]:
        """A leader's new ISR for one partition; refused (Fenced) unless it comes from the
        partition's current leader at its current epoch, and it must hold the leader."""
        old = self._existing(cmd["topic"])
        p, isr = int(cmd["partition"]), [int(b) for b in cmd["isr"]]
        if old["topic_id"] != cmd["topic_id"] or not 0 <= p < len(old["replicas"]):
            raise UnknownTopic(f"no partition {cmd['topic']}/{p} of topic id {cmd['topic_id']}",
                               topic=cmd["topic"])
        leader, epoch = old["placement"][p], old["leader_epochs"][p]
        if cmd["broker_id"] != leader or cmd["leader_epoch"] != epoch:
            raise Fenced(f"ISR change for {cmd['topic']}/{p} from broker {cmd['broker_id']} "
                         f"at leader epoch {cmd['leader_epoch']} refused: the leader is broker "
                         f"{leader} at epoch {epoch}", topic=cmd["topic"], partition=p)
        if leader not in isr or len(set(isr)) != len(isr) \
                or not set(isr) <= set(old["replicas"][p]):
            raise InvalidArgument(f"ISR {isr} of {cmd['topic']}/{p} must hold its leader "
                                  f"{leader} and only its replicas {old['replicas'][p]}")
        record = reassign.finish({**old, "isr": _put(old["isr"], p, isr)}, p,
                                 leader_may_leave=bool(cmd.get("complete")))
        self._put_topic(ctx, record)
        return record

    def _reassign(self, ctx: Context, cmd: dict[str, Any]) -> list[dict[str, Any]]:
        """Partitions to new target replicas (master/reassign.py); see :meth:`reassign`."""
        return self.reassign(ctx, cmd["changes"])

    def _elect_leaders(self, ctx: Context, cmd: dict[str, Any]) -> list[dict[str, Any]]:
        """New leaders (master/election.py); a change computed from an epoch that is no
        longer the partition's (or for a topic since re-created) is skipped, the same way on
        every master. Returns the changes applied."""
        records, applied = {}, []
        for change in cmd["changes"]:
            name, p = change["topic"], int(change["partition"])
            old = records.get(name) or self._topics.get(name)
            if old is None or old["topic_id"] != change["topic_id"] \
                    or not 0 <= p < len(old["replicas"]) \
                    or old["leader_epochs"][p] != change["from_epoch"] \
                    or change["leader"] not in old["replicas"][p] \
                    or change["leader"] not in change["isr"]:
                continue
            records[name] = {
                **old, "placement": _put(old["placement"], p, int(change["leader"])),
                "leader_epochs": _put(old["leader_epochs"], p, int(change["leader_epoch"])),
                "isr": _put(old["isr"], p, [int(b) for b in change["isr"]])}
            applied.append(change)
        for record in records.values():
            self._put_topic(ctx, record)
        return applied

    def _existing(self, name: str) -> dict[str, Any]:
        old = self._topics.get(name)
        if old is None:
            raise UnknownTopic(f"unknown topic {name!r}", topic=name)
        return old

    def _put_topic(self, ctx: Context, record: dict[str, Any]) -> None:
        txn, staged = ctx
        txn.put(record["topic"].encode(), dump(record), db=self._topics_db)
        staged.append(lambda: self._changed(self._topics.__setitem__, record["topic"], record))

    def _changed(self, change, *args) -> None:
        change(*args)
        self.version = next(_VERSIONS)
