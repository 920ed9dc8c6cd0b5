"""``Master(config)``: the Raft node, the state machine, live registries and gRPC services.

Every master runs the same Raft log and applies it to its own LMDB state (hot standby). The
one Raft elects becomes *active* once its ``lead`` command (epoch + 1) is applied: then, and
only then, it forgets any live state it had, lets brokers and group members re-register
(``failover_grace_ms``), and serves. A master that loses leadership stops serving at once.

Start order: state, Raft, in-memory parts, gRPC server, leadership watcher. Stop order is the
reverse: stop taking requests, stop the watcher and reaper, close broker channels, Raft, LMDB.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from lib.auth.identities import Authenticator, certificate_identities
from lib.auth.refusals import LoginBackoff, RefusalLog
from lib.auth.server import ServerAuth
from lib.auth.settings import announce_auth_off
from lib.decoding import StrictDecoding
from lib.errors import TubeqError
from lib.logs import event
from lib.process import free_ports
from lib.rpc import SERVER_OPTIONS
from lib.tls import server_tls
from master import admin, election, security, service
from master.broker_calls import BrokerCalls
from master.broker_ops import BrokerOps
from master.brokers import BrokerRegistry, wall_ms
from master.config import MasterConfig
from master.group_ops import GroupOps
from master.groups import GroupCoordinator, SessionLimits
from master.guard import Leadership
from master.metrics import MasterMetrics
from master.producer_ids import ProducerIdBlocks
from master.raft import RaftLog, RaftSettings, resolve_password
from master.routes import RouteBook
from master.sealing import Sealer
from master.state import MetaState
from master.topic_ops import TopicOps
from master.transactions import TransactionCoordinator, TxnSettings
from master.txn_markers import MarkerWriter

log = logging.getLogger(__name__)
KEY_SETTLE_HEARTBEATS = 3  # a new signing key signs after this many broker heartbeats
SERVICES = ("tubeq.master.Master", "tubeq.admin.Admin", "tubeq.security.Security")


class Master:
    def __init__(self, config: MasterConfig) -> None:
        self.config = config
        c = config
        self.state = MetaState(Path(c.data_dir) / "meta", c.lmdb_map_size, c.tombstones_kept,
                               c.audit_entries_kept, Sealer(c.resolved_cluster_secret))
        self._wake = threading.Event()
        self.raft = RaftLog(raft_settings(c), self.state, on_role_change=self._wake.set)
        self.metrics = MasterMetrics()
        self.registry = BrokerRegistry(c.broker_timeout_ms)
        self.groups = GroupCoordinator(
            self.state.epoch, self._partitions_of,
            SessionLimits(c.group_session_timeout_ms, c.group_min_session_timeout_ms,
                          c.group_max_session_timeout_ms),
            c.group_reaper_interval_ms, on_rebalance=self._rebalanced)
        self.leadership = Leadership(self.raft, self.state)
        self.refusals = RefusalLog(c.audit_refusal_window_s, c.audit_refusal_kinds)
        # Read (and checked) at start, so that a bad file stops a new cluster at once.
        self._admin_password = (security.read_admin_password(c.admin_password_file)
                                if c.admin_password_file and not self.state.principals.users()
                                else "")
        self.tls = server_tls(c)
        self.calls = BrokerCalls(c.broker_call_timeout_ms / 1000,
                                 cluster_secret=c.resolved_cluster_secret,
                                 tls=self.tls.as_client(),
                                 marker_timeout_s=c.transaction_marker_timeout_ms / 1000)
        self.routes = RouteBook(self.state, self.registry)
        topic_ops = TopicOps(c, self.state, self.registry, self.groups, self.routes, self.calls,
                             self.write)
        self._topic_ops = topic_ops
        group_ops = GroupOps(self.state, self.groups, self.routes, self.calls, self.write)
        broker_ops = BrokerOps(self.state, self.registry, self.write, topic_ops.placing,
                               lambda: topic_ops.loads()[0])
        self.health = health.HealthServicer()
        self._server = grpc.server(futures.ThreadPoolExecutor(c.grpc_workers,
                                                              thread_name_prefix="master-rpc"),
                                   options=SERVER_OPTIONS,
                                   interceptors=[StrictDecoding(), self._auth()])
        producer_ids = ProducerIdBlocks(self._reserve_producer_ids,
                                        lambda: self.leadership.epoch)
        self.txns = TransactionCoordinator(
            txn_settings(c), self.state, self.write, producer_ids,
            MarkerWriter(self.state, self._leader_address, self.calls.write_markers,
                         self.calls.each), self.leadership.is_leader)
        service.add_to(self._server, service.MasterService(
            c, self.state, self.registry, self.groups, self.routes, self.leadership,
            self.write, producer_ids, self.txns, topic_ops))
        admin.add_to(self._server, admin.AdminService(
            self.state, self.registry, topic_ops, group_ops, broker_ops, self.leadership,
            self.status, self.txns))
        security.add_to(self._server, security.SecurityService(
            self.state, self.leadership, self.write, c.token_ttl_s,
            key_settle_ms=KEY_SETTLE_HEARTBEATS * c.broker_heartbeat_interval_ms,
            refusals=self.refusals, backoff=LoginBackoff(c.login_backoff_after),
            cluster_secret=c.resolved_cluster_secret))
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._server)
        self._gauges()
        self.address = ""
        self.metrics_address = ""
        self._stopped = threading.Event()
        self._elected_for: tuple = ()  # (live brokers, applied index) of the last election
        self._watcher = threading.Thread(target=self._watch_leadership, daemon=True,
                                         name="master-leadership")

    def _auth(self) -> ServerAuth:
        """Who may call what (lib/auth/server.py); ``auth = "none"`` is said loudly."""
        if self.config.auth == "none":
            announce_auth_off(log)
            return ServerAuth(None)
        # through self.state each time: a snapshot install replaces the principals
        return ServerAuth(Authenticator(lambda: self.state.principals.keyring(),
                                        self.config.resolved_cluster_secret),
                          authorizer=security.acl_authorizer(self.state),
                          refusals=self.refusals, certificates=certificate_identities(self.tls),
                          addresses=security.address_rules(self.state))

    @property
    def epoch(self) -> int:
        return self.state.epoch

    def write(self, cmd: dict[str, Any]) -> Any:
        """Replicate a state command and return its result (only while active)."""
        self.leadership.check()
        cmd = {**cmd, "epoch": self.leadership.epoch}  # refused if applied after a failover
        return self.raft.submit(cmd, self.config.command_timeout_ms / 1000)

    def _reserve_producer_ids(self, count: int) -> int:
        """Reserve the next ``count`` producer ids in the replicated state; the first one."""
        block = self.write({"op": "reserve_producer_ids", "time_ms": wall_ms(), "count": count})
        return int(block["first"])

    def _leader_address(self, topic: str, partition: int) -> str:
        """Where the partition's leader listens now ("" unknown)."""
        record = self.state.topic(topic)
        if record is None or partition >= len(record["placement"]):
            return ""
        return self.routes.address(record["placement"][partition])

    def status(self) -> dict[str, Any]:
        s = self.raft.status()
        role = "leader" if self.leadership.is_leader() else \
            "standby" if s["leader"] else "candidate"
        return {**s, "address": self.address, "role": role, "epoch": self.state.epoch,
                "leader_address": self.address if role == "leader"
                else self.leadership.leader_address()}

    # -- leadership ------------------------------------------------------------------------

    def _watch_leadership(self) -> None:
        while not self._stopped.is_set():
            self._wake.wait(0.1)
            self._wake.clear()
            try:
                self._follow_raft()
            except TubeqError as err:  # e.g. lost the majority before "lead" committed
                event(log, "master.lead_failed", logging.WARNING, error=err.message)
            except Exception:  # the watcher must survive anything
                log.exception("master.leadership_watch_failed")
            self._audit_refusals()
            self._fail_over()

    def _fail_over(self) -> None:
        """Elect new leaders for the partitions whose leader's broker is down (active master
        only, and not while brokers may still be re-registering after a failover)."""
        if not self.leadership.is_leader() or self.groups.in_grace():
            return
        suspects = self.registry.suspects(self.config.broker_heartbeat_interval_ms * 3 // 2)
        alive = [b for b in self.registry.alive_ids() if b not in suspects]
        seen = (tuple(alive), self.state.applied_index)
        if seen == self._elected_for:
            return  # nothing changed since the last look: no walk over every partition
        changes = election.elections(self.state.topics(), alive, allow_unclean=True)
        if not changes:
            self._elected_for = seen
            return
        clean = [c for c in changes if not c.get("unclean")]
        unclean = [c for c in changes if c.get("unclean")]
        for batch, action in ((clean, "elect_leaders"), (unclean, "unclean_leader_election")):
            if batch:
                self._elect(batch, action)

    def _elect(self, changes: list[dict[str, Any]], action: str) -> None:
        """Write one ``elect_leaders`` command, audited as ``action`` (an unclean election
        is audited apart: records only the old in-sync replicas held may be lost)."""
        target = f"{len(changes)} partition(s)"
        if action == "unclean_leader_election":
            target += (": no in-sync replica was alive; records only the old in-sync "
                       "replicas held are lost")
        try:
            applied = self.write({
                "op": "elect_leaders", "time_ms": wall_ms(), "changes": changes,
                "audit": {"principal": "controller", "peer": self.address, "action": action,
                          "target": target,
                          "details": json.dumps(changes, sort_keys=True)[:4000]}})
        except TubeqError as err:
            event(log, "master.election_failed", logging.WARNING, error=err.message)
            return
        for change in applied:
            event(log, "partition.leader_elected",
                  logging.WARNING if change.get("unclean") else logging.INFO,
                  topic=change["topic"], partition=change["partition"],
                  leader=change["leader"], was=change["from_leader"],
                  leader_epoch=change["leader_epoch"], isr=change["isr"],
                  unclean=bool(change.get("unclean")))

    def _audit_refusals(self) -> None:
        """Log, then audit, the summaries of a refusal window that ended.

        The active master writes them to the audit log itself. A standby cannot write, so it
        hands them to the active master through Raft (pysyncobj forwards a follower's command
        to the leader), as brokers send theirs with their heartbeats; its own log keeps a line
        per summary either way, in case the forward fails (no leader, lost quorum)."""
        summaries = self.refusals.drain()
        if not summaries:
            return
        leading = self.leadership.is_leader()
        server = f"master {self.address}" + ("" if leading else " (standby)")
        for r in summaries:
            event(log, "master.refused", principal=r.principal or "-", method=r.method,
                  reason=r.reason, peer=r.peer, count=r.count, standby=not leading,
                  window_s=self.config.audit_refusal_window_s)
        if not leading:
            for r in summaries:
                self.raft.forward(security.refusal_audit(r, server), self._forwarded(r))
            return
        try:
            for refusal in summaries:
                self.write(security.refusal_audit(refusal, server))
        except TubeqError as err:
            event(log, "master.audit_failed", logging.WARNING, error=err.message,
                  lost=len(summaries))

    @staticmethod
    def _forwarded(refusal: Any) -> Callable[[str | None], None]:
        def done(error: str | None) -> None:  # on pysyncobj's thread: log, nothing more
            if error is not None:
                event(log, "master.audit_forward_failed", logging.WARNING, error=error,
                      method=refusal.method, count=refusal.count)
        return done

    def _follow_raft(self) -> None:
        raft_leads, active = self.raft.is_leader(), self.leadership.epoch is not None
        if raft_leads and not active:
            epoch = self.raft.submit({"op": "lead", "time_ms": wall_ms(),
                                      "node": self.raft.settings.node, "address": self.address,
                                      "after": self.state.epoch},
                                     self.config.command_timeout_ms / 1000)
            self.registry.clear()
            # The first leadership ever has nobody to wait for; later ones do (failover).
            self.groups.reset(epoch, self.config.failover_grace_ms if epoch > 1 else 0)
            self.leadership.activate(epoch)
            self.txns.wake()  # resume the transactions a failover left PREPARE_*
            self.metrics.leader_changes.inc()
            event(log, "master.active", epoch=epoch, address=self.address,
                  topics=len(self.state.topics()))
        elif active and not raft_leads:
            self.leadership.deactivate()
            self.groups.reset(self.state.epoch, 0)
            self.registry.clear()
            event(log, "master.standby", leader=self.leadership.leader_address())
        if self.leadership.is_leader():  # a no-op once done; retried if a write failed
            security.bootstrap(self.state, self.write, self.config.data_dir,
                               self._admin_password)

    def _partitions_of(self, topic: str) -> int | None:
        record = self.state.topic(topic)
        return None if record is None else record["settings"]["partitions"]

    def _rebalanced(self, group: str, reason: str, generation: int) -> None:
        self.metrics.rebalances.labels(reason).inc()
        event(log, "group.rebalanced", group=group, reason=reason, generation=generation)

    def _health(self) -> tuple[int, int]:
        if not self.leadership.is_leader():
            return 0, 0  # a standby has no live broker registry: the active one reports
        return election.partition_health(self.state.topics(), self.registry.alive_ids())

    def _gauges(self) -> None:
        m = self.metrics
        m.gauge("tubeq_master_brokers_alive", "Brokers alive",
                lambda: len(self.registry.alive_ids()))
        m.gauge("tubeq_master_topics", "Topics", lambda: len(self.state.topics()))
        m.gauge("tubeq_master_groups_live", "Groups with live members",
                lambda: len(self.groups.live_groups()))
        m.gauge("tubeq_master_epoch", "Leadership epoch (brokers' term)", lambda: self.epoch)
        m.gauge("tubeq_master_partitions_under_replicated",
                "Partitions with fewer in-sync replicas than replicas (active master)",
                lambda: self._health()[0])
        m.gauge("tubeq_master_partitions_offline",
                "Partitions whose leader is not alive (active master)",
                lambda: self._health()[1])
        m.gauge("tubeq_master_is_leader", "1 on the active master",
                lambda: int(self.leadership.is_leader()))
        m.gauge("tubeq_master_raft_commit_index", "Raft commit index",
                lambda: self.raft.status()["commit_index"])
        m.gauge("tubeq_master_applied_index", "Raft index applied to the LMDB state",
                lambda: self.state.applied_index)
        m.group_topics(self._group_topic_records)

    def _group_topic_records(self) -> list[tuple[str, str, int]]:
        """(group, role, records appended) of every group-owned topic (active master)."""
        if not self.leadership.is_leader():
            return []
        out = []
        for name, record in self.state.topics().items():
            owner = record.get("owner")
            if owner:
                info = self._topic_ops.describe(name, live=False)
                out.append((owner["group"], owner["role"],
                            sum(max(0, p.latest) for p in info.partitions)))
        return out

    def start(self) -> Master:
        c = self.config
        try:
            port = self.tls.bind(self._server, f"{c.host}:{c.port}")
        except RuntimeError:
            port = 0
        if port == 0:
            raise TubeqError(f"cannot listen on {c.host}:{c.port}")
        self._server.start()
        self.address = c.advertised_address or f"{c.host}:{port}"
        if c.metrics_port >= 0:
            self.metrics_address = self.metrics.serve(c.host, c.metrics_port)
        self.groups.start()
        self._watcher.start()
        self.txns.start()
        for name in ("", *SERVICES):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        event(log, "master.started", address=self.address, metrics=self.metrics_address,
              raft=self.raft.settings.node, peers=list(self.raft.settings.peers),
              epoch=self.epoch, topics=len(self.state.topics()))
        return self

    def wait_active(self, timeout: float) -> bool:
        """True once this master serves, its cluster's first admin and signing key made (a
        lone master elects itself within a second): a login right after start succeeds."""
        deadline = time.monotonic() + timeout
        while not self._serving() and time.monotonic() < deadline:
            time.sleep(0.05)
        return self._serving()

    def _serving(self) -> bool:
        return self.leadership.is_leader() and security.bootstrapped(self.state)

    def stop(self) -> None:
        """Idempotent."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.health.enter_graceful_shutdown()
        self._server.stop(self.config.stop_grace_s).wait()
        self._wake.set()
        self._watcher.join(timeout=10)
        self.txns.stop()
        self.groups.stop()
        self.calls.close()
        self.metrics.stop()
        self.raft.close()
        self.state.close()
        event(log, "master.stopped", epoch=self.epoch)

    @property
    def stopped(self) -> threading.Event:
        """Set once :meth:`stop` has begun."""
        return self._stopped


def txn_settings(c: MasterConfig) -> TxnSettings:
    return TxnSettings(c.transaction_timeout_ms, c.transaction_max_timeout_ms,
                       c.transactional_id_expiration_ms, c.transaction_check_interval_ms,
                       c.transaction_end_wait_ms, c.transaction_check_back_after_ms,
                       c.transaction_check_back_interval_ms, c.transaction_check_back_max)


def raft_settings(c: MasterConfig) -> RaftSettings:
    port = c.raft_port or free_ports(1, c.host)[0]  # validated: 0 only for a lone master
    # A lone master has nobody to split votes with or to send entries to: it elects itself
    # at once (pysyncobj needs the timeout above 3 append periods, which only pace peers).
    election = (c.raft_election_min_ms / 1000, c.raft_election_max_ms / 1000) if c.peers \
        else (0.07, 0.08)
    # Named by the host the peers dial; bound on the configured host only (pysyncobj's
    # default is every interface, whatever the node's name).
    return RaftSettings(
        node=f"{c.advertised_host}:{port}", bind=f"{c.host}:{port}", peers=c.peers,
        password=resolve_password(c.raft_password, c.peers),
        data_dir=c.data_dir, election_min_s=election[0], election_max_s=election[1],
        append_period_s=0.1 if c.peers else 0.02,
        leader_fallback_s=c.raft_leader_fallback_ms / 1000,
        compaction_entries=c.raft_compaction_entries, compaction_min_s=c.raft_compaction_min_s)

