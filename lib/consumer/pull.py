"""PullConsumer: a facade over the subscription state, the coordinator and the fetcher.

Threads: the application calls every public method from one thread (like Kafka's consumer);
the fetcher's workers prefetch in the background and the coordinator heartbeats in its own
thread (rebalances happen there: revoked partitions are committed, if auto-commit is on, and
dropped; new ones are claimed on their brokers). ``commit_async`` runs commits in order on one
committer thread.

Delivery: ``poll`` returns records in offset order per partition and moves each partition's
position past what it returned. ``commit()`` (and auto-commit, every
``auto_commit_interval_ms`` inside ``poll`` and on ``close``) commits those positions, so a
record returned by ``poll`` counts as consumed: process a batch before the next ``poll`` for
at-least-once. A rebalance never returns a committed record again; what was returned but not
committed when a partition moved may be delivered again (to whoever owns it next).
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from lib import errors
from lib.auth.client import Credentials
from lib.config import require
from lib.consumer.base import ConsumerBase, as_config, check_retry
from lib.consumer.fetcher import Fetcher, FetcherConfig
from lib.consumer.instance import check_mode
from lib.consumer.subscription import topic_names
from lib.logs import event
from lib.names import check_name
from lib.records import Record
from lib.records.columns import FrameColumns
from lib.retry import RetryPolicy
from lib.tls import Tls
from lib.types import TopicPartition

T = TypeVar("T")

log = logging.getLogger(__name__)
CommitCallback = Callable[[dict[TopicPartition, int], errors.TubeqError | None], None]


@dataclass(frozen=True)
class ConsumerConfig:
    group: str = ""
    auto_offset_reset: Literal["latest", "earliest", "error"] = "latest"
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5000
    max_poll_records: int = 500
    fetch_max_bytes: int = 4 << 20
    fetch_max_wait_ms: int = 500
    prefetch_max_bytes: int = 64 << 20
    session_timeout_ms: int = 10_000
    client_id: str = ""
    rpc_timeout_s: float = 10.0
    # "read_committed": stop at each partition's last stable offset and never see aborted
    # transactions' records (docs/transactions.md); transaction markers are never seen.
    isolation_level: Literal["read_uncommitted", "read_committed"] = "read_uncommitted"
    # "broadcast": every instance of the group reads every partition, with its own offsets
    # under instance_id (default: client_id, else the host name). docs/broadcast.md
    mode: Literal["clustering", "broadcast"] = "clustering"
    instance_id: str = ""
    # nack() moves records to the group's retry / dead-letter topics (docs/retry.md): True for
    # the default RetryPolicy, or a RetryPolicy
    retry: RetryPolicy | bool | None = None

    def validate(self) -> None:
        check_mode(self.mode, self.group, self.instance_id)
        check_retry(self.retry)
        require(not (self.retry and self.mode == "broadcast"),
                "retry is for clustering groups: a broadcast instance's failures are its own")
        require(self.isolation_level in ("read_uncommitted", "read_committed"),
                f"isolation_level must be 'read_uncommitted' or 'read_committed', got "
                f"{self.isolation_level!r}")
        if self.group:
            check_name(self.group, "group")
        require(self.auto_commit_interval_ms >= 10,
                f"auto_commit_interval_ms must be >= 10, got {self.auto_commit_interval_ms}")
        require(1 <= self.max_poll_records <= 1_000_000,
                f"max_poll_records must be within 1..1000000, got {self.max_poll_records}")

    def fetcher(self) -> dict:
        """The FetcherConfig values these settings imply."""
        return dict(fetch_max_bytes=self.fetch_max_bytes,
                    fetch_max_wait_ms=self.fetch_max_wait_ms,
                    fetch_max_total_bytes=max(16 << 20, self.fetch_max_bytes),
                    prefetch_max_bytes=max(self.prefetch_max_bytes, self.fetch_max_bytes),
                    rpc_timeout_s=self.rpc_timeout_s,
                    read_committed=self.isolation_level == "read_committed")


class PullConsumer(ConsumerBase):
    """Pull records with :meth:`poll`; see the module docstring for threads and delivery."""

    def __init__(self, masters: str | Iterable[str], *, config: ConsumerConfig | None = None,
                 credentials: Credentials | None = None, tls: Tls | None = None,
                 **settings: Any) -> None:
        """``settings`` are :class:`ConsumerConfig` fields (``group=``, ``auto_offset_reset=``,
        ...), on top of ``config`` if given; either way they are validated. ``credentials``
        (else the environment's) log in."""
        self.config: ConsumerConfig = as_config(ConsumerConfig, config, settings)
        cfg = self.config
        fetch_cfg = as_config(FetcherConfig, None, cfg.fetcher())
        super().__init__(masters, cfg.group, cfg.auto_offset_reset, cfg.session_timeout_ms,
                         cfg.client_id, cfg.rpc_timeout_s, credentials, tls, cfg.mode,
                         cfg.instance_id, cfg.retry)
        self._auto_commit = cfg.enable_auto_commit
        self._fetcher = Fetcher(fetch_cfg, self._sub, self._offsets, lambda: self._group,
                                self._committed_topics)
        self._next_auto_commit = time.monotonic() + cfg.auto_commit_interval_ms / 1000
        self._async: queue.Queue | None = None
        self._async_thread: threading.Thread | None = None

    # -- subscription ------------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str] | str, group: str | None = None,
                  tags: Iterable[str] | None = None) -> None:
        """Consume ``topics``: in ``group`` (partitions split with its other members), or,
        without any group, every partition of the topics (no coordination, no commits)."""
        self._check_open()
        if group or self._group:
            self._start_group(topics, group, tags)
            return
        names = topic_names(topics)
        self._offsets.refresh_routes(names)
        routes = self._offsets.routes
        self.assign([TopicPartition(t, p) for t in names
                     for p in range(routes.partitions(t) or 0)], tags)

    def assign(self, tps: Iterable[TopicPartition], tags: Iterable[str] | None = None) -> None:
        """Consume exactly ``tps`` without group coordination (commits, if a group was given,
        use member "" / generation -1: never fenced)."""
        self._check_open()
        if self._coordinator is not None:
            raise errors.InvalidArgument("assign() cannot be mixed with a group subscribe()")
        if self._instance:
            raise errors.InvalidArgument("a broadcast consumer reads every partition of what it "
                                         "subscribes to: use subscribe(), not assign()")
        tps = [TopicPartition(*tp) for tp in tps]
        topics = sorted({tp.topic for tp in tps})
        if topics:
            self._offsets.refresh_routes(topic_names(topics))
        for tp in tps:
            count = self._offsets.routes.partitions(tp.topic) or 0
            if not 0 <= tp.partition < count:
                raise errors.UnknownPartition(
                    f"{tp.topic} has {count} partitions: no partition {tp.partition}",
                    topic=tp.topic, partition=tp.partition)
        if topics:
            self._sub.set_topics(topics, tags if tags is not None else self._sub.tags)
        removed = self._sub.assignment() - set(tps)
        if removed and self._group and self._auto_commit:
            self._commit_quietly(self._sub.revoke(removed), "assign")
        self._sub.assign(tps)
        self._fetcher.wakeup()

    def subscribe_tags(self, tags: Iterable[str] | None) -> None:
        """Change the tag filter (the broker returns only records with one of these tags)."""
        self._sub.set_tags(tags)

    def assignment(self) -> set[TopicPartition]:
        return self._sub.assignment()

    # -- polling -----------------------------------------------------------------------------

    def poll(self, max_records: int | None = None, timeout: float = 1.0) -> list[Record]:
        """Records ready now, else wait up to ``timeout`` seconds for some (``[]`` if none).

        Raises the error of a partition that cannot go on (OffsetOutOfRange with
        ``auto_offset_reset="error"``, UnknownTopic, CorruptRecord) until it is seeked.
        """
        return self._poll(self._fetcher.drain, max_records, timeout)

    def poll_columns(self, max_records: int | None = None,
                     timeout: float = 1.0) -> list[FrameColumns]:
        """:meth:`poll` for readers that want columns: runs of consecutive frames of one
        partition, checked like the broker checks a batch but decoded into no Record
        (``lib.records.columns``; the Spark source builds Arrow arrays from them). Positions,
        commits and errors are as with :meth:`poll`."""
        return self._poll(self._fetcher.drain_columns, max_records, timeout)

    def _poll(self, drain: Callable[[int], list[T]], max_records: int | None,
              timeout: float) -> list[T]:
        self._check_open()
        if max_records is not None and (isinstance(max_records, bool) or
                                        not isinstance(max_records, int) or max_records < 1):
            raise errors.InvalidArgument(
                f"max_records must be an integer >= 1 (or None), got {max_records!r}: the "
                "timeout is poll(timeout=...)")
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout != timeout:
            raise errors.InvalidArgument(f"timeout must be a number of seconds, got {timeout!r}")
        if not self._sub.topics:
            raise errors.InvalidArgument("poll() needs subscribe() or assign() first")
        limit = max_records or self.config.max_poll_records
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            self._raise_partition_error()
            self._prepare()
            records = drain(limit)
            left = deadline - time.monotonic()
            if records or left <= 0:
                break
            self._fetcher.wait(min(left, 0.2))
        if self._auto_commit and self._group and time.monotonic() >= self._next_auto_commit:
            self._next_auto_commit = time.monotonic() + self.config.auto_commit_interval_ms / 1000
            self.commit_async()
        return records

    def _raise_partition_error(self) -> None:
        err = self._sub.first_error()
        if err is not None:
            raise err

    def _prepare(self) -> None:
        """Find missing start positions and make sure every broker has a fetch worker."""
        if self._sub.missing_positions():
            try:
                if self._coordinator is not None:
                    self._coordinator.resolve_missing()
                else:
                    self._offsets.resolve(self._sub, self._sub.missing_positions(), self._group,
                                          instance=self._instance)
            except errors.TubeqError as exc:
                if not (exc.retriable or exc.refresh_metadata) or isinstance(
                        exc, errors.UnknownTopic):
                    raise
                event(log, "consumer.resolve_failed", logging.WARNING, error=str(exc))
            self._fetcher.wakeup()
        self._fetcher.ensure_workers()

    # -- positions ---------------------------------------------------------------------------

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Read ``tp`` from ``offset`` next (out of range: the reset policy applies)."""
        self._sub.seek(TopicPartition(*tp), offset)
        self._fetcher.wakeup()

    def seek_to_beginning(self, *tps: TopicPartition) -> None:
        """Next read of ``tps`` (default: all assigned) starts at their earliest offset."""
        for tp, po in self._offsets.list_offsets(self._targets(tps)).items():
            self.seek(tp, po.earliest)

    def seek_to_end(self, *tps: TopicPartition) -> None:
        """Next read of ``tps`` (default: all assigned) starts after their latest record."""
        for tp, po in self._offsets.list_offsets(self._targets(tps)).items():
            self.seek(tp, po.latest)

    def seek_to_time(self, timestamp_ms: int, *tps: TopicPartition) -> None:
        """Next read starts at the first record with timestamp >= ``timestamp_ms``."""
        if isinstance(timestamp_ms, bool) or not isinstance(timestamp_ms, int) \
                or timestamp_ms < 0:
            raise errors.InvalidArgument(f"bad timestamp {timestamp_ms!r}: milliseconds >= 0")
        for tp, po in self._offsets.list_offsets(self._targets(tps), timestamp_ms).items():
            self.seek(tp, po.for_time if po.for_time >= 0 else po.latest)

    def end_offsets(self, *tps: TopicPartition) -> dict[TopicPartition, int]:
        """Where reading ``tps`` (default: all assigned) ends now: the log end, or for a
        ``read_committed`` consumer the last stable offset (the first offset of the oldest
        open transaction), as Kafka's ``end_offsets``. A consumer whose ``position`` reached
        it has read everything it can see."""
        committed = self.config.isolation_level == "read_committed"
        return {tp: po.last_stable if committed else po.latest
                for tp, po in self._offsets.list_offsets(self._targets(tps)).items()}

    def _targets(self, tps: tuple[TopicPartition, ...]) -> list[TopicPartition]:
        self._check_open()
        targets = [TopicPartition(*tp) for tp in tps] or sorted(self._sub.assignment())
        for tp in targets:
            if not self._sub.is_assigned(tp):
                raise errors.InvalidArgument(f"{tp.topic}[{tp.partition}] is not assigned",
                                             topic=tp.topic, partition=tp.partition)
        return targets

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record ``poll`` returns for ``tp``."""
        tp = TopicPartition(*tp)
        if self._sub.position(tp) is None:
            self._prepare()
            self._raise_partition_error()
        pos = self._sub.position(tp)
        if pos is None:
            raise errors.Unavailable(f"no position for {tp.topic}[{tp.partition}] yet")
        return pos

    def committed(self, tp: TopicPartition) -> int | None:
        """The group's committed offset of ``tp`` on its broker (None: nothing committed); a
        broadcast consumer's: its instance's."""
        if not self._group:
            return None
        tp = TopicPartition(*tp)
        return self._offsets.committed(self._group, [tp], instance=self._instance).get(tp)

    def pause(self, *tps: TopicPartition) -> None:
        """Stop returning (and fetching) ``tps`` until :meth:`resume`."""
        self._sub.pause([TopicPartition(*tp) for tp in tps] or self._sub.assignment())

    def resume(self, *tps: TopicPartition) -> None:
        self._sub.pause([TopicPartition(*tp) for tp in tps] or self._sub.assignment(), False)
        self._fetcher.wakeup()

    def paused(self) -> set[TopicPartition]:
        return self._sub.paused()

    # -- commits -----------------------------------------------------------------------------

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commit now (default: the position of every partition, i.e. all ``poll`` returned).

        Raises Fenced if a partition has moved to another member meanwhile.
        """
        self._check_open()
        self._commit(self._sub.uncommitted() if offsets is None else
                     {TopicPartition(*tp): off for tp, off in offsets.items()})

    def nack(self, record: Record, delay: float | None = None,
             error: BaseException | str | None = None) -> str:
        """Give up on ``record`` for now: with the next commit (the same transaction) it
        moves to the group's retry topic, to come back after ``delay`` seconds (None: the
        retry policy's backoff), or to its dead-letter topic once it has failed
        ``max_attempts`` times; returns which topic. Needs ``retry=`` and a group; Fenced
        when its partition is no longer assigned here (docs/retry.md)."""
        self._check_open()
        return self._nack(record, delay, error)

    def commit_async(self, callback: CommitCallback | None = None) -> None:
        """Commit the current positions in the background; ``callback(offsets, error)``."""
        self._check_open()
        if not self._group:
            raise errors.InvalidArgument("commit needs a consumer group")
        if self._async is None:
            self._async = queue.Queue()
            self._async_thread = threading.Thread(target=self._async_loop, daemon=True,
                                                  name="tubeq-commit")
            self._async_thread.start()
        self._async.put((self._sub.uncommitted(), callback))

    def _async_loop(self) -> None:
        assert self._async is not None
        while True:
            item = self._async.get()
            if item is None:
                return
            offsets, callback = item
            error = None
            try:
                self._commit(offsets)
            except errors.TubeqError as exc:
                error = exc
                if callback is None:
                    event(log, "consumer.commit_failed", logging.WARNING, error=str(exc))
            if callback is not None:
                try:
                    callback(offsets, error)
                except Exception:
                    log.exception("consumer.commit_callback_failed")

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Stop fetching, commit the positions (auto-commit), leave the group."""
        if self._closed:
            return
        self._closed = True
        if self._coordinator is not None:
            self._coordinator.stop()
        self._fetcher.close()
        if self._async_thread is not None:
            self._async.put(None)
            self._async_thread.join(timeout=self.config.rpc_timeout_s)
        if self._auto_commit and self._group:
            self._commit_quietly(self._sub.uncommitted(), "close")
        if self._redelivery is not None:
            self._redelivery.close()
        if self._coordinator is not None:
            self._coordinator.leave()
        self._masters.close()
        self._pool.close()

