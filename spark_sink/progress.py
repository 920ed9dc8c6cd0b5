"""A streaming query's progress reported to a tubeq consumer group (the ``groupId`` option).

Only a report, for ``tubeq group describe`` and lag alerts: Spark's checkpoint decides where a
query resumes, and nothing here is ever read back. So a commit that fails is a warning in the
log, never a failed query; the next micro-batch's commit carries the newer offsets anyway.

How it commits without being a group member: a ``PullConsumer`` with the group but no
subscription commits as member "" (a manual assignment), which the brokers never fence and
which takes no part in the group's rebalances. The brokers report the (group, topic) pairs they
see commits for in their next heartbeat, so ``describe_group`` lists the stream's topics a
heartbeat interval after the first commit, whether or not the group has live members.

One instance per stream reader, on the driver, used by one thread (Spark calls ``commit`` and
``stop`` in order); ``close`` ends its client.
"""
from __future__ import annotations

import logging

from lib.closing import Closeable
from lib.consumer.pull import PullConsumer
from lib.types import TopicPartition
from spark_sink.options import Connection

log = logging.getLogger(__name__)

Flat = dict[tuple[str, int], int]  # (topic, partition) -> next offset to read


class GroupProgress(Closeable):
    """Commits a query's finished offsets to ``group``; never raises from :meth:`commit`."""

    def __init__(self, conn: Connection, group: str) -> None:
        self.conn, self.group = conn, group
        self._consumer: PullConsumer | None = None
        self._last: Flat = {}  # what was committed last (not again: triggers repeat it)

    def commit(self, offsets: Flat) -> None:
        """Commit ``offsets`` (next offset to read per partition) to the group."""
        if not offsets or offsets == self._last:
            return
        # Any failure is only logged (Exception, not just TubeqError): a report must never
        # fail the query. The next commit tries again.
        try:
            if self._consumer is None:
                self._consumer = PullConsumer(self.conn.masters, group=self.group,
                                              enable_auto_commit=False, client_id="tubeq-spark",
                                              **self.conn.clients("consumer"))
            self._consumer.commit({TopicPartition(t, p): o for (t, p), o in offsets.items()})
            self._last = dict(offsets)
        except Exception as exc:
            log.warning("tubeq: could not commit the stream's offsets to group %r (lag "
                        "reporting only; the query goes on): %s", self.group, exc,
                        extra={"fields": {"group": self.group, "error": str(exc)}})

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
