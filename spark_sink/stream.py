"""Streaming read (``spark.readStream.format("tubeq")``): micro-batches of offset ranges.

Spark keeps the progress as our offsets, ``{"topic": {"partition": next_offset}}`` (partition
numbers as strings: the offsets travel as JSON), writes them to the checkpoint before a
micro-batch runs and hands them back on restart, so a restarted query reads on from where the
last finished micro-batch ended. Each micro-batch is planned like a batch read (same ranges, same
tasks, same pooled consumers): ``latestOffset`` asks the masters where every partition ends,
``partitions`` turns start/end into ranges. Topics and partitions that appear later (a pattern
that matches a new topic, a topic that grows) are read from their earliest offset.

Data loss (``failOnDataLoss``, as Kafka's): a micro-batch whose start retention has deleted,
or a partition that now ends before the query's position (its topic was re-created, or its
broker lost acknowledged records; only the broker's own answer counts, never the masters'
heartbeat stats), fails the query naming every such partition; with ``failOnDataLoss=false``
the first skips to the earliest offset and the second goes on from the partition's new end,
with a warning in the driver's log.

This object lives on the driver for the whole query (Spark's streaming runner keeps it), which is
where the ``Trigger.AvailableNow`` target and the ``groupId`` client are kept; ``read`` runs on
the executors. ``startingTimestamp`` / ``startingOffsetsByTimestamp`` only decide the offsets of
a new query (as Kafka's): once Spark has checkpointed offsets, those win.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from lib.admin import AdminClient
from lib.errors import OffsetOutOfRange
from lib.types import TopicInfo
from spark_sink.options import EARLIEST, OptionError, ReadOptions
from spark_sink.plan import (
    OffsetRange,
    broker_latest,
    check_spec_names,
    covered,
    describe_topics,
    masters_errors,
    new_admin,
    resolve_offset,
    resolve_times,
    split_ranges,
)
from spark_sink.progress import GroupProgress
from spark_sink.reader import RangePartition, read_batches

Offsets = dict[str, dict[str, int]]  # what Spark checkpoints: topic -> "partition" -> next
Flat = dict[tuple[str, int], int]
log = logging.getLogger(__name__)


class TubeqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets and planning on the driver, reads on the executors."""

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        if opts.ending_given:
            raise OptionError("endingOffsets", "a stream has no end: use a batch read, or "
                                               "Trigger.AvailableNow to stop at what is there")
        self.opts = opts
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        self._target: Flat | None = None  # Trigger.AvailableNow: never read past these
        self._progress: GroupProgress | None = None  # built at the first commit (driver only)
        # Spark asks for the latest offsets at every trigger (idle: every 10 ms): one client
        # for the query's life, not a channel (and a login) per question
        self._admin: AdminClient | None = None

    def initialOffset(self) -> Offsets:
        topics = self._describe()
        spec = resolve_times(self.opts, topics).starting_offsets or "latest"
        check_spec_names("startingOffsets", spec, topics)
        read = covered(self.opts, topics)
        return _nested({(t, p.partition): resolve_offset(spec, t, p.partition, p.earliest,
                                                         p.latest, EARLIEST)
                        for t, info in topics.items() for p in info.partitions
                        if (t, p.partition) in read})

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {tp: latest for tp, (_, latest) in self._bounds().items()
                        if latest >= 0}

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        # Spark asks for the next batch only once the previous one is done (or, first, with
        # the initial or restored offsets): ``start`` is where the query has got to.
        self._report(start)
        first = _flat(start)
        bounds = self._bounds()
        begin = {tp: first.get(tp, max(earliest, 0)) for tp, (earliest, _) in bounds.items()}
        # An end behind the query's position counts only once the broker itself says so:
        # for a broker that does not answer them, the masters report its last heartbeat's.
        now = broker_latest(self.opts.conn, {tp for tp, (_, latest) in bounds.items()
                                                if 0 <= latest < begin[tp]},
                            self.opts.isolation_level)
        end = {tp: now[tp] if now.get(tp, begin[tp]) < begin[tp]
               else self._end(tp, begin[tp], latest) for tp, (_, latest) in bounds.items()}
        if isinstance(limit, ReadMaxRows):
            end = cap({tp: min(b, end[tp]) for tp, b in begin.items()}, end, limit.max_rows)
        return _nested(end)

    def _end(self, tp: tuple[str, int], begin: int, latest: int) -> int:
        """Where a batch from ``begin`` ends: at the partition's end, no further than the
        AvailableNow target; at ``begin`` while its broker does not report (-1)."""
        if self._target is not None:
            latest = min(latest, self._target.get(tp, begin))
        return max(begin, latest)

    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        bounds = self._bounds()
        first = _flat(start)
        ranges, lost, back = [], [], []
        for (topic, p), stop in sorted(_flat(end).items()):
            earliest = max(bounds.get((topic, p), (0, 0))[0], 0)
            begin = first.get((topic, p), earliest)
            if stop < begin:  # went back (see latestOffset): Kafka's rule, go on from ``stop``
                back.append((topic, p, begin, stop))
                continue
            if begin < earliest:
                lost.append((topic, p, begin, earliest))
                begin = earliest
            if stop > begin:
                ranges.append(OffsetRange(topic, p, begin, stop))
        if (lost or back) and self.opts.fail_on_data_loss:
            raise data_lost(lost, back)
        if lost or back:
            log.warning("tubeq: %s (failOnDataLoss=false: skipped)", _gaps(lost, back))
        ranges = split_ranges(ranges, self.opts.min_partitions or 0)
        return [RangePartition.of(r, self.opts) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_batches(partition, self.arrow_schema)

    def commit(self, end: Offsets) -> None:
        """A micro-batch finished: with ``groupId``, report ``end`` to the group."""
        self._report(end)

    def _report(self, done: Offsets) -> None:
        """With ``groupId``, commit ``done`` (offsets the query has finished reading up to) to
        that group, so ``tubeq group describe`` shows the query's lag.

        A report only: Spark's checkpoint stays the one truth of where the query resumes (the
        group's offsets are never read back), and a failed commit is a warning in the log,
        never a failed query. Besides ``commit`` this runs from ``latestOffset``: Spark calls
        ``commit(end)`` of a batch only when it plans the next batch with data, so the last
        batch of a Trigger.AvailableNow run (or before a quiet spell) would never be reported;
        the ``start`` of ``latestOffset`` is that same finished position, asked at every
        trigger. Unchanged offsets are not committed again.
        """
        if self.opts.group_id is None:
            return
        if self._progress is None:
            self._progress = GroupProgress(self.opts.conn, self.opts.group_id)
        self._progress.commit(_flat(done))

    def stop(self) -> None:
        """The query ends: close its clients."""
        if self._progress is not None:
            self._progress.close()
            self._progress = None
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_admin": None, "_progress": None}  # live clients stay here

    def _describe(self) -> dict[str, TopicInfo]:
        with masters_errors(self.opts.conn):
            if self._admin is None:
                self._admin = new_admin(self.opts.conn)
            return describe_topics(self._admin, self.opts)

    def _bounds(self) -> dict[tuple[str, int], tuple[int, int]]:
        """(earliest, latest) of every partition the query covers now; -1 for a partition
        whose broker did not report."""
        return {(t, p.partition): (p.earliest, p.latest)
                for t, info in self._describe().items() for p in info.partitions
                if (self.opts.assign is None or p.partition in self.opts.assign.get(t, ()))}


Gap = tuple[str, int, int, int]  # topic, partition, the query's position, the partition's bound


def data_lost(lost: list[Gap], back: list[Gap]) -> OffsetOutOfRange:
    """The error of a micro-batch that cannot read on from where the query got to: offsets
    retention deleted (``lost``: position, earliest) or a partition that now ends before the
    position (``back``: position, latest). Every such partition is named, with the way on."""
    topic, p, begin, bound = (lost or back)[0]
    return OffsetOutOfRange(
        f"data loss: {_gaps(lost, back)}. Restart the query with failOnDataLoss=false to "
        "skip the lost offsets and read on (or start a new query on a new checkpoint)",
        topic=topic, partition=p, offset=begin, **{"earliest" if lost else "latest": bound})


def _gaps(lost: list[Gap], back: list[Gap]) -> str:
    return "; ".join(
        [f"{t}[{p}]: offsets {b}..{e - 1} were deleted by retention before this query read "
         f"them (the partition now starts at {e})" for t, p, b, e in lost]
        + [f"{t}[{p}]: this query had read up to offset {b} but the partition now ends at "
           f"{e} (re-created, or its broker lost records it had acknowledged): its records "
           f"below {e} may be ones this query never read" for t, p, b, e in back])


def cap(begin: Flat, end: Flat, max_rows: int) -> Flat:
    """``end`` moved back so at most ``max_rows`` records are read, shared in proportion to
    each partition's backlog (Kafka's maxOffsetsPerTrigger rule); never below ``begin``."""
    lag = {tp: end[tp] - begin[tp] for tp in end}
    total = sum(lag.values())
    if total <= max_rows:
        return end
    share = {tp: n * max_rows // total for tp, n in lag.items()}
    left = max_rows - sum(share.values())
    for tp in sorted(lag, key=lambda tp: share[tp] - lag[tp]):  # biggest unmet backlog first
        if left == 0:
            break
        if share[tp] < lag[tp]:
            share[tp] += 1
            left -= 1
    return {tp: begin[tp] + share[tp] for tp in end}


def _flat(offsets: Offsets) -> Flat:
    return {(t, int(p)): int(o) for t, parts in (offsets or {}).items() for p, o in parts.items()}


def _nested(flat: Flat) -> Offsets:
    out: Offsets = {}
    for (t, p), o in sorted(flat.items()):
        out.setdefault(t, {})[str(p)] = o
    return out
