"""The per-partition stats a broker's heartbeats carry, sent as changes.

Every heartbeat (each second) used to carry every hosted partition's offsets, traffic counters
and disk bytes: at 10,000 partitions, 10,000 messages built, sent and parsed a second, most of
them what the master already had. Now a heartbeat lists only the partitions whose stats moved
since the last heartbeat a master answered (``stats_partial``); the whole list goes after a
registration, whenever the set of hosted partitions changed (so the master drops the ones that
left), and every ``FULL_EVERY`` heartbeats (a master that somehow missed one is set right).
A partition's row is computed again only when its store's progress (earliest, next, flushed)
or its traffic counters moved: computing 10,000 rows a second took a fifth of a busy broker's
CPU. Walking the partitions at all costs 5-8 us each, so a broker hosting more than
:data:`PARTITIONS_PER_BEAT` sends its stats every ``hosted / PARTITIONS_PER_BEAT`` heartbeats
(10,000 partitions: every 5th), the heartbeats between carrying none; the whole list still
goes at once when the hosted set changes (at 10,000 busy partitions the master link took
2.52-2.57 s of the broker's 26 s of CPU in 30 s of a produce burst, 1.63 s with this).
"""
from __future__ import annotations

from typing import NamedTuple

from broker.metrics import BrokerMetrics
from broker.topics import TopicManager
from lib.errors import TubeqError
from lib.proto import master_pb2 as mpb

FULL_EVERY = 60  # heartbeats: the whole list at least once a minute at the default interval
PARTITIONS_PER_BEAT = 2_000  # partitions walked per heartbeat, on average (module docstring)


class Row(NamedTuple):
    earliest: int
    latest: int
    bytes_in: int
    messages_in: int
    bytes_out: int
    messages_out: int
    disk_bytes: int
    last_stable: int


def _pb(topic: str, partition: int, r: Row) -> mpb.PartitionStats:
    return mpb.PartitionStats(
        topic=topic, partition=partition, earliest=r.earliest, latest=r.latest,
        bytes_in=r.bytes_in, messages_in=r.messages_in, bytes_out=r.bytes_out,
        messages_out=r.messages_out, disk_bytes=r.disk_bytes, last_stable=r.last_stable)


class Report(NamedTuple):
    """One heartbeat's stats: what to send, whether it is partial, and every row (kept as
    sent once a master answered)."""

    stats: list[mpb.PartitionStats]
    partial: bool
    rows: dict[tuple[str, int], Row]


class StatsReporter:
    """Computes each heartbeat's :class:`Report` against the rows last answered."""

    def __init__(self, topics: TopicManager, metrics: BrokerMetrics) -> None:
        self.topics, self.metrics = topics, metrics
        self._sent: dict[tuple[str, int], Row] = {}
        self._answered = 0
        self._next_full = 0  # the answered count at which the whole list goes again
        # (topic, partition) -> (its store's progress, its row) as last computed
        self._computed: dict[tuple[str, int], tuple[tuple[int, int, int], Row]] = {}
        self._walked: list | None = None  # the hosted list the last walk went over
        self._skipped = 0  # heartbeats since the last walk

    def prepare(self) -> Report:
        hosted = self.topics.snapshot()  # the same list object until the hosted set changes
        every = max(1, len(hosted) // PARTITIONS_PER_BEAT)
        if self._sent and hosted is self._walked and self._skipped + 1 < every:
            self._skipped += 1
            return Report([], True, self._sent)
        self._walked, self._skipped = hosted, 0
        periodic = self._answered >= self._next_full
        if periodic:
            self._computed = {}  # every row computed afresh, not only those that moved
        rows = self._rows(hosted)
        full = periodic or not self._sent or rows.keys() != self._sent.keys()
        sent = self._sent
        send = rows if full else {k: r for k, r in rows.items() if sent[k] != r}
        return Report([_pb(t, p, r) for (t, p), r in send.items()], not full, rows)

    def answered(self, report: Report) -> None:
        """A master took ``report``: the next one is counted against it."""
        self._sent = report.rows
        self._answered += 1
        if not report.partial:
            self._next_full = self._answered + FULL_EVERY - 1

    def forget(self) -> None:
        """A master may not know what was sent (a registration): send everything next."""
        self._sent, self._answered, self._next_full = {}, 0, 0

    def _rows(self, hosted: list) -> dict[tuple[str, int], Row]:
        out, computed = {}, {}
        touched = self.metrics.drain_touched()
        for topic, p, store in hosted:
            key = (topic, p)
            progress = store.progress(p)  # before the row: a move meanwhile shows next time
            last = self._computed.get(key)
            if last is not None and last[0] == progress and key not in touched:
                out[key], computed[key] = last[1], last
                continue
            try:
                earliest, latest = store.earliest(p), store.latest(p)
                disk_bytes = store.disk_bytes(p)
                stable = store.producers.last_stable(p)
            except (TubeqError, OSError):
                continue  # the store is being reopened, closed or trimmed: report it next time
            c = self.metrics.partition(topic, p)
            out[key] = row = Row(earliest, latest, c.bytes_in, c.messages_in, c.bytes_out,
                                 c.messages_out, disk_bytes, stable)
            if progress is not None:
                computed[key] = (progress, row)
        self._computed = computed
        return out
