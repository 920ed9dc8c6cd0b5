"""Planning a batch read on the driver: which topic partitions, from which offset to which.

The cluster is asked once (``AdminClient``: the topics and their live earliest/latest offsets;
a timestamp start also asks the brokers' time index once, see :func:`resolve_times`); what
follows is pure: options + topic descriptions -> offset ranges -> ranges split for
``minPartitions``. Every problem found here is an :class:`OptionError` naming the option, so it
reaches the user from the driver before any task runs.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from lib.admin import AdminClient
from lib.consumer.pull import PullConsumer
from lib.errors import TubeqError, UnknownTopic
from lib.types import TopicInfo, TopicPartition
from spark_sink.options import (
    EARLIEST,
    LATEST,
    Connection,
    OffsetSpec,
    OptionError,
    ReadOptions,
)

OFFSETS_WAIT_S = 5.0


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``start`` (inclusive) to ``end`` (exclusive) of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


@contextmanager
def admin_client(conn: Connection) -> Iterator[AdminClient]:
    """An AdminClient for planning: a cluster that does not answer is reported against the
    ``masters`` option (catch UnknownTopic inside: it also asks for fresh metadata)."""
    with masters_errors(conn), new_admin(conn) as admin:
        yield admin


def new_admin(conn: Connection) -> AdminClient:
    return AdminClient(conn.masters, **conn.clients("admin"))


@contextmanager
def masters_errors(conn: Connection) -> Iterator[None]:
    """A cluster that does not answer becomes an OptionError against ``masters``."""
    try:
        yield
    except (OptionError, UnknownTopic):
        raise
    except TubeqError as exc:
        if not (exc.retriable or exc.refresh_metadata):
            raise
        raise OptionError("masters", f"no tubeq master answered at {conn.masters}: "
                                     f"{exc.message}") from exc


def plan_read(opts: ReadOptions) -> list[OffsetRange]:
    """The ranges a read covers, split for ``minPartitions``; asks the masters once."""
    if opts.group_id:
        raise OptionError("groupId", "a batch read commits no progress: groupId is for "
                                     "spark.readStream")
    with admin_client(opts.conn) as admin:
        topics = describe_topics(admin, opts)
    ranges = offset_ranges(resolve_times(opts, topics), topics)
    return split_ranges(ranges, opts.min_partitions or 0)


def describe_topics(admin: AdminClient, opts: ReadOptions) -> dict[str, TopicInfo]:
    """The topics the options name (a pattern matches whole names, as Java's ``matches``)."""
    if opts.subscribe_pattern is not None:
        pattern = re.compile(opts.subscribe_pattern)
        names = [t.name for t in admin.list_topics() if pattern.fullmatch(t.name)]
        option = "subscribePattern"
    else:
        names = list(opts.subscribe or (opts.assign or {}))
        option = "subscribe" if opts.subscribe else "assign"
    out = {}
    for name in names:
        try:
            out[name] = _described(admin, name)
        except UnknownTopic:
            raise OptionError(option, f"unknown topic {name!r}") from None
    if opts.isolation_level == "read_committed":
        out = stable_ends(opts.conn, out)
    return out


def stable_ends(conn: Connection, topics: dict[str, TopicInfo]) -> dict[str, TopicInfo]:
    """``topics`` with each partition's ``latest`` turned into its last stable offset, as its
    broker says it now (-1 when none answered): a read_committed read ends there, before the
    first record of the oldest open transaction (Kafka's read_committed end offsets)."""
    tps = [TopicPartition(t, p.partition) for t, info in topics.items()
           for p in info.partitions if p.latest >= 0]
    ends: dict[TopicPartition, int] = {}
    if tps:
        try:
            with PullConsumer(conn.masters, enable_auto_commit=False, client_id="tubeq-spark",
                              isolation_level="read_committed",
                              **conn.clients("consumer")) as c:
                c.assign(tps)
                ends = c.end_offsets()
        except TubeqError:
            ends = {}
    return {t: dataclasses.replace(info, partitions=[
        dataclasses.replace(p, latest=ends.get(TopicPartition(t, p.partition), -1))
        for p in info.partitions]) for t, info in topics.items()}


def _described(admin: AdminClient, name: str, wait_s: float = OFFSETS_WAIT_S) -> TopicInfo:
    """The topic once every partition reports its offsets: a broker learns that it hosts a
    new topic's partitions from its next heartbeat reply, and says -1 until then."""
    deadline = time.monotonic() + wait_s
    while True:
        info = admin.describe_topic(name)
        if all(p.earliest >= 0 and p.latest >= 0 for p in info.partitions) \
                or time.monotonic() > deadline:
            return info
        time.sleep(0.1)


def offset_ranges(opts: ReadOptions, topics: dict[str, TopicInfo]) -> list[OffsetRange]:
    """One range per chosen partition (empty ones dropped), in topic then partition order."""
    for option, spec in (("startingOffsets", opts.starting_offsets or "earliest"),
                         ("endingOffsets", opts.ending_offsets)):
        check_spec_names(option, spec, topics)
    ranges = []
    for name in sorted(topics):
        info = topics[name]
        wanted = (opts.assign or {}).get(name)
        for p in wanted or range(info.partition_count):
            if p >= info.partition_count:
                raise OptionError("assign", f"topic {name!r} has {info.partition_count} "
                                            f"partitions: no partition {p}")
            part = next(x for x in info.partitions if x.partition == p)
            if part.earliest < 0 or part.latest < 0:
                raise OptionError("masters", f"{name}[{p}]: its broker {part.broker_id} did "
                                             "not report its offsets (is it down?)")
            r = _range(opts, name, p, part.earliest, part.latest)
            if r.size > 0:
                ranges.append(r)
    return ranges


def resolve_times(opts: ReadOptions, topics: dict[str, TopicInfo]) -> ReadOptions:
    """``opts`` with a timestamp start (``startingTimestamp`` / ``startingOffsetsByTimestamp``)
    turned into the ``startingOffsets`` it means; unchanged without one.

    Each partition starts at its first offset whose timestamp is >= the given one, or at its
    latest offset if there is none (Kafka's rule). The brokers answer from their time index
    (ListOffsets with a timestamp, through a consumer's ``seek_to_time``): no record is read.
    Partitions that ``startingOffsetsByTimestamp`` leaves out start at their earliest offset,
    as with ``startingOffsets`` JSON.
    """
    if opts.starting_timestamps is None and opts.starting_timestamp is None:
        return opts
    read = covered(opts, topics)
    if opts.starting_timestamps is not None:
        check_spec_names("startingOffsetsByTimestamp", opts.starting_timestamps, topics)
        times = {(t, p): ms for t, parts in opts.starting_timestamps.items()
                 for p, ms in parts.items() if (t, p) in read}
    else:
        times = dict.fromkeys(read, opts.starting_timestamp)
    spec: dict[str, dict[int, int]] = {}
    for (t, p), offset in sorted(offsets_for_times(opts.conn, times).items()):
        spec.setdefault(t, {})[p] = offset
    return replace(opts, starting_offsets=spec or "earliest")


def covered(opts: ReadOptions, topics: dict[str, TopicInfo]) -> set[tuple[str, int]]:
    """Every (topic, partition) the read covers (only the assigned ones with ``assign``)."""
    return {(t, p.partition) for t, info in topics.items() for p in info.partitions
            if opts.assign is None or p.partition in opts.assign.get(t, ())}


def offsets_for_times(conn: Connection, times: dict[tuple[str, int], int],
                      ) -> dict[tuple[str, int], int]:
    """The first offset at or after each partition's timestamp, else its latest offset."""
    if not times:
        return {}
    by_time: dict[int, list[TopicPartition]] = {}
    for (t, p), ms in times.items():
        by_time.setdefault(ms, []).append(TopicPartition(t, p))
    # No group and nothing polled: assign + seek only set positions, no fetch starts.
    with PullConsumer(conn.masters, enable_auto_commit=False, client_id="tubeq-spark",
                      **conn.clients("consumer")) as c:
        c.assign([TopicPartition(t, p) for t, p in times])
        for ms, tps in by_time.items():
            c.seek_to_time(ms, *tps)
        return {(t, p): c.position(TopicPartition(t, p)) for t, p in times}


def broker_latest(conn: Connection, tps: set[tuple[str, int]],
                  isolation_level: str = "read_uncommitted") -> dict[tuple[str, int], int]:
    """Each partition's latest offset (its last stable offset for read_committed) as its own
    broker says it now; partitions whose broker does not answer are left out. (The masters'
    describe falls back to the last heartbeat's stats, up to a heartbeat old, for a broker
    that does not answer them.)"""
    if not tps:
        return {}
    try:
        with PullConsumer(conn.masters, enable_auto_commit=False, client_id="tubeq-spark",
                          isolation_level=isolation_level, **conn.clients("consumer")) as c:
            c.assign([TopicPartition(t, p) for t, p in tps])
            return {(tp.topic, tp.partition): end for tp, end in c.end_offsets().items()}
    except TubeqError:
        return {}


def split_ranges(ranges: list[OffsetRange], min_partitions: int) -> list[OffsetRange]:
    """Cut big ranges so there are at least ``min_partitions`` (Kafka's rule: each range gets
    pieces in proportion to its size, so one hot partition does not make one slow task)."""
    total = sum(r.size for r in ranges)
    if min_partitions <= len(ranges) or total == 0:
        return ranges
    out = []
    for r in ranges:
        pieces = min(r.size, max(1, math.ceil(r.size * min_partitions / total)))
        cuts = [r.start + r.size * i // pieces for i in range(pieces + 1)]
        out += [OffsetRange(r.topic, r.partition, a, b) for a, b in itertools.pairwise(cuts)]
    return out


def _range(opts: ReadOptions, topic: str, p: int, earliest: int, latest: int) -> OffsetRange:
    where = f"{topic}[{p}]"
    spec = opts.starting_offsets or "earliest"
    start = resolve_offset(spec, topic, p, earliest, latest, EARLIEST)
    end = resolve_offset(opts.ending_offsets, topic, p, earliest, latest, LATEST)
    if start < earliest:
        if opts.fail_on_data_loss:
            raise OptionError("startingOffsets", f"{where} starts at {start} but its earliest "
                                                 f"offset is {earliest} (deleted by retention); "
                                                 "set failOnDataLoss=false to skip the gap")
        start = earliest
    if start > latest:
        raise OptionError("startingOffsets", f"{where} starts at {start}, past its latest "
                                             f"offset {latest}")
    if end > latest:
        raise OptionError("endingOffsets", f"{where} ends at {end}, past its latest offset "
                                           f"{latest}")
    if end < start:
        raise OptionError("endingOffsets", f"{where} ends at {end}, before its start {start}")
    return OffsetRange(topic, p, start, end)


def resolve_offset(spec: OffsetSpec, topic: str, p: int, earliest: int, latest: int,
            default: int) -> int:
    if isinstance(spec, str):
        return earliest if spec == "earliest" else latest
    value = spec.get(topic, {}).get(p, default)
    return {EARLIEST: earliest, LATEST: latest}.get(value, value)


def check_spec_names(option: str, spec: OffsetSpec, topics: dict[str, TopicInfo]) -> None:
    if isinstance(spec, str):
        return
    for topic, parts in spec.items():
        if topic not in topics:
            raise OptionError(option, f"names topic {topic!r}, which this read does not "
                                      f"cover (reading: {', '.join(sorted(topics)) or 'none'})")
        count = topics[topic].partition_count
        bad = sorted(p for p in parts if p >= count)
        if bad:
            raise OptionError(option, f"topic {topic!r} has {count} partitions: no "
                                      f"partition {bad[0]}")
