"""Broker administration: the brokers (every one ever registered, alive or not) and draining.

A drained broker takes no new partition (``master/placement.py`` skips it), and the same
command reassigns every replica it holds to another live broker that takes new partitions
(master/reassign.py): once the copies are in sync it holds nothing and can be retired. A
replica no broker can take now (too few brokers) stays; draining again retries those. The flag
is replicated state (``set_draining``, master/state_brokers.py), so every master holds it and
it survives failovers, restarts and snapshots; the live registry knows nothing of it.

A drain takes the placement lock of :class:`TopicOps`: a create or alter that computed its
placement before the drain is applied first, so once a drain has answered no new partition
lands on that broker. Draining twice (or undraining an undrained broker) changes nothing and
writes nothing but the moves still possible: the answer says ``changed`` false.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from lib.errors import UnknownBroker
from lib.proto import master_pb2 as mpb
from master import reassign
from master.brokers import BrokerRegistry, DiskState, wall_ms
from master.state import MetaState


class BrokerOps:
    def __init__(self, state: MetaState, registry: BrokerRegistry,
                 write: Callable[[dict[str, Any]], Any], placing: threading.Lock,
                 loads: Callable[[], dict[int, int]]) -> None:
        self.state, self.registry = state, registry
        self.write = write  # replicates a state command (Raft) and returns its result
        self._placing = placing
        self._loads = loads  # replicas per live broker (TopicOps)

    def list(self) -> list[mpb.BrokerInfo]:
        """Every broker ever registered (its latest address), by id."""
        live = {b: (addr, alive, hb, disk) for b, addr, alive, hb, disk in
                self.registry.snapshot()}
        known = {**self.state.brokers(), **{b: v[0] for b, v in live.items()}}
        draining = self.state.draining()
        infos = [self._info(b, live.get(b, (address, False, 0, None)), b in draining)
                 for b, address in sorted(known.items())]
        held: dict[int, int] = {}
        led: dict[int, int] = {}
        for record in self.state.topics().values():
            for p, replicas in enumerate(record["replicas"]):
                for b in replicas:
                    held[b] = held.get(b, 0) + 1
                led[record["placement"][p]] = led.get(record["placement"][p], 0) + 1
        for info in infos:
            info.rack = self.registry.rack(info.broker_id)
            info.replicas, info.leaders = held.get(info.broker_id, 0), led.get(info.broker_id, 0)
        return infos

    def info(self, broker_id: int) -> mpb.BrokerInfo:
        for info in self.list():
            if info.broker_id == broker_id:
                return info
        raise _unknown(broker_id)

    def set_draining(self, broker_id: int, draining: bool,
                     audit: dict[str, Any]) -> tuple[mpb.BrokerInfo, bool, int, int]:
        """Drain (no new partitions, its replicas move off) or undrain a broker; (its info
        now, whether it changed, partitions moving off, partitions that cannot move now).
        UnknownBroker when no broker with this id ever registered."""
        with self._placing:
            if broker_id not in self.state.brokers():
                raise _unknown(broker_id)
            changed = (broker_id in self.state.draining()) != draining
            moves, stuck = [], []
            if draining:
                moves, stuck = reassign.drain_moves(
                    self.state.topics(), broker_id, self._loads(),
                    self.state.draining() | {broker_id}, self.registry.racks())
            if changed or moves:
                action = "drain_broker" if draining else "undrain_broker"
                details = {"address": self.state.brokers()[broker_id], "draining": draining,
                           "moves": [[m["topic"], m["partition"], m["target"]] for m in moves],
                           "staying": stuck}
                self.write({"op": "set_draining", "time_ms": wall_ms(), "broker_id": broker_id,
                            "draining": draining, "reassign": moves,
                            "audit": {**audit, "action": action, "target": f"broker {broker_id}",
                                      "details": json.dumps(details, sort_keys=True)[:4000]}})
        return self.info(broker_id), changed, len(moves), len(stuck)

    @staticmethod
    def _info(broker_id: int, live: tuple[str, bool, int, DiskState | None],
              draining: bool) -> mpb.BrokerInfo:
        address, alive, heartbeat_ms, disk = live
        info = mpb.BrokerInfo(broker_id=broker_id, address=address, alive=alive,
                              last_heartbeat_ms=heartbeat_ms, draining=draining)
        if disk is not None:
            info.disk.free_bytes, info.disk.reserve_bytes = disk.free_bytes, disk.reserve_bytes
            info.disk.full = disk.full
        return info


def _unknown(broker_id: int) -> UnknownBroker:
    return UnknownBroker(f"unknown broker {broker_id}: no broker with this id ever registered",
                         broker_id=broker_id)
