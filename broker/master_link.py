"""The broker's link to the masters: register, heartbeat with stats, apply what comes back.

One background thread: register (retrying until a master answers), then heartbeat every
``heartbeat_interval_ms`` with per-partition stats (those that changed: broker/heartbeat_stats.py)
and the data dir's disk status (free bytes, reserve, whether appends are refused: ``tubeq broker
list`` shows it). Every response's topics, placements and deleted incarnations go to
:meth:`TopicManager.apply` on a thread of their own (broker/view_applier.py: opening hundreds
of stores must not hold the next heartbeat back), unless the master says the view is the one
this broker applied last (it names its digest; master/broker_views.py): converging on 10,000
unchanged topics each second cost more than the records. A response with a term lower than
the highest seen comes from a deposed master and is ignored; ``reregister`` starts over.
Nothing on the produce/fetch path ever waits for this thread.
"""
from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

from broker.heartbeat_stats import FULL_EVERY, StatsReporter
from broker.metrics import BrokerMetrics
from broker.offsets import OffsetsPlane
from broker.replication import IsrChange
from broker.term import TermWatermark
from broker.topics import PartitionRole, TopicManager, TopicSpec
from broker.view_applier import ViewApplier
from lib.auth import addresses as ip_rules
from lib.auth import quotas as quota_entries
from lib.auth.acl import Authorizer, from_pb
from lib.auth.addresses import AddressRules
from lib.auth.client import AUTH_HEADER
from lib.auth.identities import KeyRing
from lib.auth.quotas import QuotaBook
from lib.auth.refusals import RefusalLog
from lib.auth.settings import cluster_header
from lib.errors import TubeqError
from lib.logs import event
from lib.proto import master_pb2 as mpb
from lib.proto import master_pb2_grpc
from lib.rpc import MasterClient
from lib.tls import Tls

log = logging.getLogger(__name__)
DEFAULT_HEARTBEAT_MS = 1000


def specs_of(topics) -> dict[str, TopicSpec]:
    """Our plain TopicSpec for each protobuf TopicSettings of a response."""
    return {name: TopicSpec(partitions=s.partitions, stores=s.stores, durability=s.durability,
                            retention_ms=s.retention_ms, retention_bytes=s.retention_bytes,
                            max_message_bytes=s.max_message_bytes, topic_id=s.topic_id,
                            min_insync_replicas=s.min_insync_replicas or 1)
            for name, s in topics.items()}


HANDOFF_TIMEOUT_S = 3.0  # a clean stop waits at most this long for the master


def role_of(placement) -> PartitionRole:
    """Our plain PartitionRole for a placement that names its replica set."""
    return PartitionRole(leader=placement.leader, leader_epoch=placement.leader_epoch,
                         replicas=tuple(placement.replicas), isr=tuple(placement.isr),
                         leader_address=placement.leader_address,
                         target=tuple(placement.target_replicas))


class MasterLink:
    def __init__(self, broker_id: int, address: str, masters: list[str], topics: TopicManager,
                 metrics: BrokerMetrics, term: TermWatermark, attempt_timeout: float = 1.0,
                 on_deleted: Callable[[str], None] | None = None,
                 offsets: OffsetsPlane | None = None, cluster_secret: str = "",
                 keyring: KeyRing | None = None, acls: Authorizer | None = None,
                 refusals: RefusalLog | None = None, tls: Tls | None = None,
                 quotas: QuotaBook | None = None,
                 addresses: AddressRules | None = None, rack: str = "",
                 kafka_address: str = "") -> None:
        self.broker_id = broker_id
        self.address = address
        self.kafka_address = kafka_address  # the Kafka listener's, when it has one
        self.rack = rack
        self.incarnation = uuid.uuid4().hex  # this process: the master tells restarts apart
        self.topics = topics
        self.metrics = metrics
        metrics.watch_space(topics.space)  # the disk the heartbeat reports, also on /metrics
        self.term = term
        self.on_deleted = on_deleted
        self.offsets = offsets  # reports the (group, topic) pairs committed here
        self._metadata = cluster_header(cluster_secret)  # who we are to the masters
        self.keyring = keyring  # the token signing keys, from every response
        self.acls = acls  # the ACL entries, from responses when their version changed
        self.quotas = quotas  # the byte-rate quotas, as the ACLs
        self.addresses = addresses  # the IP allow/deny lists, as the ACLs
        self.refusals = refusals  # refused calls, summarised, for the masters' audit log
        # A master answers a heartbeat in milliseconds; one that does not within a second is
        # down or stopped, and the next one on the list is asked (failover).
        self.client = MasterClient(masters, timeout=5 * attempt_timeout,
                                   attempt_timeout=attempt_timeout, tls=tls)
        self.interval = DEFAULT_HEARTBEAT_MS / 1e3
        self.reporter = StatsReporter(topics, metrics)
        self.applier = ViewApplier(lambda view: self._apply(*view))
        self._beats = 0  # heartbeats answered: every FULL_EVERY-th asks for the whole view
        self.registered = threading.Event()
        self._stop = threading.Event()
        self._soon = threading.Event()  # heartbeat now, not at the next interval
        # Leaders this broker cannot fetch from (broker/replica_fetcher.py), for the master.
        self.unreachable: Callable[[], list[int]] = list
        # Work of this thread after each heartbeat (the hanging-transaction check).
        self.after_heartbeat: Callable[[], None] = lambda: None
        self._thread = threading.Thread(target=self._run, daemon=True, name="master-link")

    def start(self) -> None:
        self._thread.start()

    def heartbeat_soon(self) -> None:
        """Send the next heartbeat now (a leader became unreachable: the master should know
        at once)."""
        self._soon.set()

    def stop(self) -> None:
        self._stop.set()
        self._soon.set()
        self._thread.join(timeout=2)  # a call in flight ends on its own deadline; apply()
        # after TopicManager.close() is a no-op
        self.applier.stop()
        self.client.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if not self.registered.is_set() and not self._register():
                    self._stop.wait(min(self.interval, 1.0))
                    continue
                self._soon.wait(self.interval)
                self._soon.clear()
                if self._stop.is_set():
                    return
                self._heartbeat()
            except Exception:  # noqa: BLE001 - a bug here must not end the heartbeats
                # (the master would declare this broker dead for good): logged, then the
                # next beat, after a pause so that a repeating failure does not spin
                log.exception("master.link_error")
                self._stop.wait(min(self.interval, 1.0))

    def _register(self) -> bool:
        req = mpb.RegisterBrokerRequest(broker_id=self.broker_id, address=self.address,
                                        rack=self.rack, incarnation=self.incarnation,
                                        kafka_address=self.kafka_address)
        try:
            res = self.client.call(master_pb2_grpc.MasterStub, "RegisterBroker", req,
                                   metadata=self._metadata)
        except TubeqError as err:
            event(log, "master.register_failed", logging.WARNING, error=err.message)
            return False
        if not self.term.observe(res.term):
            event(log, "master.stale_term_ignored", logging.WARNING, term=res.term,
                  highest=self.term.highest)
            return False
        self.interval = (res.heartbeat_interval_ms or DEFAULT_HEARTBEAT_MS) / 1e3
        self._apply_keys(res.signing_keys)
        # applied beside the heartbeats, which start now: a restart that reopens 10,000 stores
        # must not look dead to the master (the first heartbeat brings the deletions)
        self.applier.offer((res.topics, res.placements, ()),
                           after=lambda: self._apply_policies(res))
        self._beats = 0
        self.reporter.forget()
        if self.offsets is not None:
            self.offsets.report_again()  # this master may be new: tell it everything once
        self.registered.set()
        event(log, "master.registered", master=self.client.current, term=res.term,
              topics=len(res.topics), placements=len(res.placements))
        return True

    def _heartbeat(self) -> None:
        pairs = self.offsets.unreported() if self.offsets is not None else []
        report = self.reporter.prepare()
        req = mpb.BrokerHeartbeatRequest(
            broker_id=self.broker_id, stats=report.stats, stats_partial=report.partial,
            metadata_digest=self.applier.digest if self._beats % FULL_EVERY else b"",
            disk=self.disk(),
            committed=[mpb.GroupTopic(group=g, topic=t) for g, t in pairs],
            acl_version=self.acls.version if self.acls is not None else -1,
            quota_version=self.quotas.version if self.quotas is not None else -1,
            ip_version=self.addresses.version if self.addresses is not None else -1,
            unreachable_brokers=self.unreachable(),
            refusals=[mpb.Refusal(principal=r.principal, method=r.method, reason=r.reason,
                                  peer=r.peer, count=r.count, first_ms=r.first_ms)
                      for r in (self.refusals.drain() if self.refusals is not None else ())])
        try:
            res = self.client.call(master_pb2_grpc.MasterStub, "BrokerHeartbeat", req,
                                   metadata=self._metadata)
        except TubeqError as err:
            event(log, "master.heartbeat_failed", logging.WARNING, error=err.message)
            return
        if not self.term.observe(res.term):
            event(log, "master.stale_term_ignored", logging.WARNING, term=res.term,
                  highest=self.term.highest)
            return
        if res.reregister:
            event(log, "master.reregister", term=res.term)
            self.registered.clear()
            return
        self.reporter.answered(report)
        self._beats += 1
        self._apply_keys(res.signing_keys)
        view = None if res.metadata_unchanged else (res.topics, res.placements, res.deleted)
        self.applier.offer(view, res.metadata_digest, lambda: self._apply_policies(res))
        if self.offsets is not None:
            self.offsets.reported(pairs)
        try:
            self.after_heartbeat()
        except Exception:  # the link must survive it
            log.exception("master.after_heartbeat_failed")

    def _apply_keys(self, signing_keys) -> None:
        if self.keyring is not None and signing_keys:  # none: auth = "none" on the master
            self.keyring.replace({k.key_id: k.secret for k in signing_keys})

    def _apply(self, topics, placements, deleted) -> bool:
        """Converge on a view (the applier's thread); False when a topic failed to apply
        (the view is asked for whole again)."""
        mine = [pl for pl in placements if pl.broker_id == self.broker_id]
        placed = [(pl.topic, pl.partition) for pl in mine]
        roles = {(pl.topic, pl.partition): role_of(pl) for pl in mine if pl.replicas}
        gone = [(d.topic, d.topic_id) for d in deleted]
        dropped = self.topics.apply(specs_of(topics), placed, gone, roles, self.broker_id)
        if self.on_deleted is not None:
            for name in dropped:
                self.on_deleted(name)
        return not self.topics.apply_failures

    def _apply_policies(self, res) -> None:
        """The ACLs, quotas and IP lists a response carries: each only when the version we
        hold is not the master's."""
        for field, holder, parse in (("acls", self.acls, from_pb),
                                     ("quotas", self.quotas, quota_entries.from_pb),
                                     ("ip_rules", self.addresses, ip_rules.from_pb)):
            if holder is None or not res.HasField(field):
                continue
            message = getattr(res, field)
            try:
                entries = [parse(e) for e in message.entries]
            except TubeqError as err:  # a master validates every entry: never expected
                event(log, "master.bad_policy", logging.ERROR, kind=field, error=err.message)
                continue
            holder.replace(entries, message.version)
            event(log, "broker.policy", kind=field, version=message.version,
                  entries=len(entries))

    def hand_off(self) -> None:
        """Stopping cleanly: ask the master to move our leaderships to in-sync followers and
        take us out of the ISRs, then adopt the new roles at once (one heartbeat), so clients
        are sent to the new leaders instead of writing here. Best effort: a master that does
        not answer leaves it to the broker timeout."""
        if not self.registered.is_set() or not (self.topics.leading()
                                                 or self.topics.followed()):
            return  # nothing replicated here: nothing to hand off
        try:
            res = self.client.call(master_pb2_grpc.MasterStub, "BrokerShutdown",
                                   mpb.BrokerShutdownRequest(broker_id=self.broker_id),
                                   timeout=HANDOFF_TIMEOUT_S, metadata=self._metadata)
        except TubeqError as err:
            event(log, "broker.handoff_failed", logging.WARNING, error=err.message)
            return
        event(log, "broker.handed_off", still_led=res.still_led)
        self._heartbeat()
        self.applier.wait_idle(HANDOFF_TIMEOUT_S)

    def alter_isr(self, change: IsrChange) -> mpb.AlterIsrResponse:
        """Ask the active master to record a partition's new ISR (we lead it), or to finish
        its reassignment; returns the partition as recorded. TubeqError (Fenced: we no longer
        lead it) when it refuses. A change of replicas or leader is heard at once: the next
        heartbeat goes now."""
        req = mpb.AlterIsrRequest(broker_id=self.broker_id, topic=change.topic,
                                  topic_id=change.topic_id, partition=change.partition,
                                  leader_epoch=change.leader_epoch, isr=list(change.isr),
                                  complete_reassignment=change.complete)
        res = self.client.call(master_pb2_grpc.MasterStub, "AlterIsr", req,
                               metadata=self._metadata)
        if res.leader_epoch != change.leader_epoch or tuple(res.replicas) != change.replicas:
            self.heartbeat_soon()
        return res

    def open_txns(self, queries: list[tuple[int, int, str, int]]) -> list[bool]:
        """Whether the coordinator will still end each transaction (producer id, epoch,
        topic, partition) this broker holds open (broker/hanging_txns.py)."""
        req = mpb.CheckOpenTxnsRequest(queries=[
            mpb.OpenTxnQuery(producer_id=pid, producer_epoch=epoch, topic=topic,
                             partition=partition)
            for pid, epoch, topic, partition in queries])
        res = self.client.call(master_pb2_grpc.MasterStub, "CheckOpenTxns", req,
                               metadata=self._metadata)
        if len(res.open) != len(queries):
            raise TubeqError(f"CheckOpenTxns answered {len(res.open)} of {len(queries)}")
        return list(res.open)

    def call(self, stub: Callable[..., Any], method: str, request: Any,
             token: str = "") -> Any:
        """Any master call as the cluster, or with ``token`` as the user it names (the Kafka
        port's metadata, producer ids, logins and admin calls: broker/kafka/); blocking, so
        callers on the event loop run it in the executor."""
        metadata = ((AUTH_HEADER, f"Bearer {token}"),) if token else self._metadata
        return self.client.call(stub, method, request, metadata=metadata)

    def disk(self) -> mpb.DiskStatus:
        """Free space of the data dir and whether appends are being refused for lack of it."""
        status = self.topics.space.status()
        return mpb.DiskStatus(free_bytes=max(0, status.free_bytes),
                              reserve_bytes=status.reserve_bytes, full=status.full)
