"""The brokers part of the master's state: every broker ever registered, with its last address,
the process incarnation it registered with and whether an admin drained it.

Commands: ``register_broker`` and ``set_draining`` (an admin drains or undrains a broker:
placement skips a draining one, and a drain reassigns its replicas in the same command, through
:meth:`~master.state_topics.TopicRecords.reassign`). The drain flag survives the broker's
re-registrations. Which brokers are alive right now is not replicated state: that is
master/brokers.py's registry.
"""
from __future__ import annotations

from typing import Any

from lib.errors import UnknownBroker
from master.state_tables import Context, Handler, dump, load, read_all
from master.state_topics import TopicRecords


class BrokerRecords:
    """Broker records by id (cached; the ``brokers`` database, keyed by the id in decimal)."""

    def __init__(self, env: Any, brokers_db: Any, topics: TopicRecords) -> None:
        """``topics``: where a drain's reassignments go."""
        self._db, self._topics = brokers_db, topics
        brokers = read_all(env, brokers_db)
        self._addresses: dict[int, str] = {int(k): v["address"] for k, v in brokers.items()}
        self._incarnations: dict[int, str] = {int(k): v.get("incarnation", "")
                                              for k, v in brokers.items()}
        self._draining: frozenset[int] = frozenset(int(k) for k, v in brokers.items()
                                                   if v.get("draining"))

    def handlers(self) -> dict[str, Handler]:
        """op -> the handler :class:`~master.state.MetaState` applies it with."""
        return {"register_broker": self._register_broker, "set_draining": self._set_draining}

    # -- reads ---------------------------------------------------------------------------

    def addresses(self) -> dict[int, str]:
        """broker id -> last registered address, for every broker ever registered."""
        return dict(self._addresses)

    def incarnation(self, broker_id: int) -> str:
        """The process incarnation the broker last registered with ("" unknown)."""
        return self._incarnations.get(broker_id, "")

    def draining(self) -> frozenset[int]:
        """Ids of the brokers an admin drained: no new partition goes there."""
        return self._draining

    # -- commands ------------------------------------------------------------------------

    def _register_broker(self, ctx: Context, cmd: dict[str, Any]) -> None:
        txn, staged = ctx
        bid, address = int(cmd["broker_id"]), str(cmd["address"])
        key = str(bid).encode()
        raw = txn.get(key, db=self._db)
        old = {} if raw is None else load(raw)  # keeps "draining" across a new address
        incarnation = str(cmd.get("incarnation", old.get("incarnation", "")))
        txn.put(key, dump({**old, "address": address, "time_ms": cmd["time_ms"],
                           "incarnation": incarnation}), db=self._db)
        staged.append(lambda: (self._addresses.__setitem__(bid, address),
                               self._incarnations.__setitem__(bid, incarnation)))

    def _set_draining(self, ctx: Context, cmd: dict[str, Any]) -> dict[str, Any]:
        txn, staged = ctx
        bid, draining = int(cmd["broker_id"]), bool(cmd["draining"])
        key = str(bid).encode()
        raw = txn.get(key, db=self._db)
        if raw is None:
            raise UnknownBroker(f"unknown broker {bid}: no broker with this id ever registered",
                                broker_id=bid)
        old = load(raw)
        changed = bool(old.get("draining")) != draining
        txn.put(key, dump({**old, "draining": draining}), db=self._db)
        now = self._draining | {bid} if draining else self._draining - {bid}
        staged.append(lambda: setattr(self, "_draining", now))
        moved = self._topics.reassign(ctx, cmd.get("reassign", []))
        return {"broker_id": bid, "draining": draining, "changed": changed, "moving": len(moved)}
