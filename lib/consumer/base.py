"""What the pull and push consumers share: connections, the subscription state, the group
member (coordinator), commits and the rebalance listener. Each consumer adds its own data path:
``pull.py`` (prefetching fetcher, ``poll``) and ``push.py`` (broker push streams, handlers).
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from lib import errors
from lib.auth.client import Credentials
from lib.closing import Closeable
from lib.config import T, settle
from lib.consumer.coordinator import NO_MEMBER, Coordinator, CoordinatorConfig, OffsetClient
from lib.consumer.instance import default_instance_id
from lib.consumer.retry import Later, Redelivery
from lib.consumer.subscription import SubscriptionState, topic_names
from lib.logs import event
from lib.memory import keep_freed_memory
from lib.names import check_name
from lib.records import Record
from lib.retry import RetryPolicy
from lib.routes import RouteCache
from lib.rpc import MasterClient, client_pool
from lib.tls import Tls
from lib.types import GroupMetadata, TopicPartition

log = logging.getLogger(__name__)


def as_config(cls: type[T], config: T | None, settings: dict[str, Any]) -> T:
    """:func:`lib.config.settle`, turning ConfigError into the InvalidArgument a caller
    expects."""
    try:
        return settle(cls, config, settings)
    except errors.ConfigError as exc:
        raise errors.InvalidArgument(str(exc)) from None


def check_retry(retry: object) -> None:
    """A consumer config's ``retry``: None/False (off), True (the default policy) or a
    valid RetryPolicy."""
    policy = retry_policy(retry)
    if policy is not None:
        policy.validate()


def retry_policy(retry: object) -> RetryPolicy | None:
    """The policy a ``retry`` setting means (a dict: a policy through ``asdict``)."""
    if retry is None or retry is False:
        return None
    if retry is True:
        return RetryPolicy()
    if isinstance(retry, dict):
        given = dict(retry)
        if "backoff_s" in given:
            given["backoff_s"] = tuple(given["backoff_s"])
        try:
            return RetryPolicy(**given)
        except TypeError as exc:
            raise errors.ConfigError(f"retry: {exc}") from None
    if not isinstance(retry, RetryPolicy):
        raise errors.ConfigError(f"retry must be True, False or a lib.retry.RetryPolicy, got "
                                 f"{type(retry).__name__}")
    return retry


class ConsumerBase(Closeable):
    """What the pull and push consumers share: connections, subscription, group, commits."""

    def __init__(self, masters: str | Iterable[str], group: str, reset: str,
                 session_timeout_ms: int, client_id: str, rpc_timeout_s: float,
                 credentials: Credentials | None = None, tls: Tls | None = None,
                 mode: str = "clustering", instance_id: str = "",
                 retry: RetryPolicy | bool | None = None) -> None:
        masters = masters if isinstance(masters, str) else list(masters)
        self._masters_given = masters
        self._client_auth = {"credentials": credentials, "tls": tls}
        self._retry_policy = retry_policy(retry)
        self._redelivery: Redelivery | None = None
        # Topics read read_committed whatever isolation_level says: the group's retry topic,
        # whose records come from transactions (an aborted copy must not come back twice).
        self._committed_topics: set[str] = set()
        keep_freed_memory()  # fetch responses reuse pages (lib/memory.py)
        self._pool = client_pool(masters, credentials, rpc_timeout_s, tls)
        self._masters = MasterClient(masters, self._pool, timeout=rpc_timeout_s)
        self._sub = SubscriptionState(reset)
        routes = RouteCache(self._masters, timeout=rpc_timeout_s)
        self._offsets = OffsetClient(self._pool, self._masters, routes, rpc_timeout_s)
        self._group = group
        self._session_timeout_ms = session_timeout_ms
        self._client_id = client_id
        # Broadcast (docs/broadcast.md): this instance's id, the same across its restarts.
        self._instance = (instance_id or default_instance_id(client_id)) \
            if mode == "broadcast" else ""
        self._coordinator: Coordinator | None = None
        self._commit_lock = threading.Lock()
        self._closed = False

    def _start_group(self, topics: Iterable[str] | str, group: str | None,
                     tags: Iterable[str] | None) -> None:
        """Subscribe ``topics`` as a member of ``group`` (joins now: bad input raises here)."""
        if self._coordinator is not None or self._sub.assignment():
            raise errors.InvalidArgument("this consumer is already subscribed or assigned")
        self._group = check_name(group or self._group, "group")
        names = topic_names(topics)
        if self._retry_policy is not None:
            self._redelivery = Redelivery(self._retry_policy, self._group, self._masters_given,
                                          self._masters, self._client_auth)
            retry = self._redelivery.ensure_topics()
            names = names if retry in names else (*names, retry)
            self._committed_topics.add(retry)
        self._offsets.refresh_routes(names)
        self._sub.set_topics(names, tags)
        cfg = as_config(CoordinatorConfig, None, {"group": self._group,
                                                  "session_timeout_ms": self._session_timeout_ms,
                                                  "client_host": self._client_id,
                                                  "mode": "broadcast" if self._instance
                                                  else "clustering",
                                                  "instance_id": self._instance})
        coordinator = Coordinator(cfg, self._offsets, self._sub, self)
        self._coordinator = coordinator  # set first: the join's rebalance calls back into us
        try:
            coordinator.start()
        except BaseException:
            self._coordinator, self._sub.topics = None, ()
            raise

    @property
    def _identity(self) -> tuple[str, int]:
        return self._coordinator.identity if self._coordinator else NO_MEMBER

    @property
    def instance_id(self) -> str:
        """A broadcast consumer's instance id ("" in clustering mode)."""
        return self._instance

    def group_metadata(self) -> GroupMetadata:
        """This consumer's group and member identity now, for a transactional producer's
        ``send_offsets`` (consume-transform-produce: docs/transactions.md)."""
        if not self._group:
            raise errors.InvalidArgument("group_metadata needs a consumer group: pass "
                                         "group=... to the consumer or to subscribe()")
        if self._instance:
            raise errors.InvalidArgument("send_offsets is not supported for broadcast "
                                         "consumers: their offsets are per instance "
                                         "(docs/broadcast.md)")
        member, generation = self._identity
        return GroupMetadata(self._group, member, generation)

    @property
    def retried(self) -> int:
        """Records this consumer moved to its group's retry topic (committed)."""
        return self._redelivery.retried if self._redelivery is not None else 0

    @property
    def dead_lettered(self) -> int:
        """Records this consumer moved to its group's dead-letter topic (committed)."""
        return self._redelivery.dead if self._redelivery is not None else 0

    def _nack(self, record: Record, delay: float | None, error: BaseException | str | None,
              failures: int | None = None) -> str:
        """Owe a move of ``record`` to the retry or dead-letter topic, made with the next
        commit (lib/consumer/retry.py)."""
        if self._redelivery is None:
            raise errors.InvalidArgument(
                "nack needs retries: pass retry=True (or a lib.retry.RetryPolicy) to the "
                "consumer, and subscribe in a group")
        tp = TopicPartition(record.topic, record.partition)
        if not self._sub.is_assigned(tp):
            raise errors.Fenced(
                f"{tp.topic}[{tp.partition}] is no longer assigned to this consumer (the group "
                f"rebalanced): offset {record.offset} is delivered again to its new owner, so "
                "it cannot be nacked here", topic=tp.topic, partition=tp.partition)
        return self._redelivery.nack(record, delay, error, failures)

    def _nack_failed(self, record: Record, failed: Later | BaseException,
                     failures: int | None = None) -> None:
        """:meth:`_nack` for a handler's failure (an exception or the Later it returned);
        refused (revoked meanwhile: its new owner reads it again) is only logged."""
        later = isinstance(failed, Later)
        try:
            self._nack(record, failed.delay if later else None,
                       failed.reason if later else failed, failures)
        except errors.TubeqError as exc:
            event(log, "consumer.nack_refused", logging.WARNING, topic=record.topic,
                  partition=record.partition, offset=record.offset, error=str(exc))

    def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        if not self._group:
            raise errors.InvalidArgument("commit needs a consumer group: pass group=... to the "
                                         "consumer or to subscribe()")
        for tp, off in offsets.items():
            if isinstance(off, bool) or not isinstance(off, int) or off < 0:
                raise errors.InvalidArgument(f"cannot commit offset {off!r} for {tp}: "
                                             "offsets are integers >= 0")
        moves = self._redelivery is not None and self._redelivery.pending()
        if not offsets and not moves:
            return
        with self._commit_lock:
            if moves:  # one transaction: the moves and the offsets past them
                self._redelivery.commit(offsets, self.group_metadata())
            else:
                identity = self._coordinator.broker_identity if self._coordinator else NO_MEMBER
                self._offsets.commit(self._group, offsets, identity, instance=self._instance)
            for tp, off in offsets.items():
                self._sub.set_committed(tp, off)

    def _commit_quietly(self, offsets: dict[TopicPartition, int], why: str) -> None:
        try:
            self._commit(offsets)
        except errors.TubeqError as exc:
            event(log, "consumer.commit_failed", logging.WARNING, group=self._group, why=why,
                  error=str(exc), partitions=len(offsets))

    def _check_open(self) -> None:
        if self._closed:
            raise errors.ClientClosed("the consumer is closed: it takes no more calls")

    # -- RebalanceListener -------------------------------------------------------------------

    def on_revoke(self, tps: set[TopicPartition]) -> None:
        """Commit what was consumed of partitions about to move (auto-commit only)."""
        points = self._sub.revoke(tps)
        if (points or (self._redelivery and self._redelivery.pending())) and self._auto_commit:
            self._commit_quietly(points, "revoke")
        if self._redelivery is not None:  # what failed: the new owners read it again
            self._redelivery.forget(self._sub.is_assigned)

    def on_assign(self, tps: set[TopicPartition]) -> None:
        pass

    _auto_commit = True
