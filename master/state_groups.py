"""The groups part of the master's state: every consumer group ever recorded and the topics it
joined for or committed offsets of, so listing and describing groups finds them after their
members left. The command is ``record_group``, which adds topics to a group (it never removes
one). Members and generations are not here (the coordinator, master/groups.py, keeps them in
memory), nor offsets (the brokers keep those).
"""
from __future__ import annotations

from typing import Any

from master.state_tables import Context, Handler, dump, read_all


class GroupRecords:
    """Group records by name (cached; the ``groups`` database)."""

    def __init__(self, env: Any, groups_db: Any) -> None:
        self._db = groups_db
        self._groups: dict[str, dict[str, Any]] = read_all(env, groups_db)

    def handlers(self) -> dict[str, Handler]:
        """op -> the handler :class:`~master.state.MetaState` applies it with."""
        return {"record_group": self._record_group}

    def all(self) -> dict[str, dict[str, Any]]:
        """group -> {topics, created_ms, updated_ms} of every group ever recorded."""
        return dict(self._groups)

    def _record_group(self, ctx: Context, cmd: dict[str, Any]) -> dict[str, Any]:
        txn, staged = ctx
        name = cmd["group"]
        old = self._groups.get(name, {"created_ms": cmd["time_ms"], "topics": []})
        record = {"created_ms": old["created_ms"], "updated_ms": cmd["time_ms"],
                  "topics": sorted(set(old["topics"]) | set(cmd["topics"]))}
        txn.put(name.encode(), dump(record), db=self._db)
        staged.append(lambda: self._groups.__setitem__(name, record))
        return record
