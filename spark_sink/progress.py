"""A streaming query's progress reported to a tubeq consumer group (the ``groupId`` option).

Only a report, for ``tubeq group describe`` and lag alerts: Spark's checkpoint decides where a
query resumes, and nothing here is ever read back. So a commit that fails is a warning in the
log, never a failed query; the next micro-batch's commit carries the newer offsets anyway.

How it commits without being a group member: a ``PullConsumer`` with the group but no
subscription commits as member "" (a manual assignment), which the brokers never fence and
which takes no part in the group's rebalances. The master, though, learns a group's topics only
when a member joins or an admin resets the group's offsets, and ``describe_group`` lists only
the topics it learned. So the first commit of a topic that the group's description does not
show yet also goes through ``AdminClient.reset_group_offsets`` (to the same offsets): that
records the topic with the master, once per group and topic; it needs the group to have no
live members, which a group used only by Spark queries has not.

One instance per stream reader, on the driver, used by one thread (Spark calls ``commit`` and
``stop`` in order); ``close`` ends its client.
"""
from __future__ import annotations

import logging
from collections import defaultdict

from lib.admin import AdminClient
from lib.closing import Closeable
from lib.consumer.pull import PullConsumer
from lib.types import TopicPartition

log = logging.getLogger(__name__)

Flat = dict[tuple[str, int], int]  # (topic, partition) -> next offset to read


class GroupProgress(Closeable):
    """Commits a query's finished offsets to ``group``; never raises from :meth:`commit`."""

    def __init__(self, masters: str, group: str) -> None:
        self.masters, self.group = masters, group
        self._consumer: PullConsumer | None = None
        self._recorded: set[str] = set()  # topics the master lists for the group
        self._last: Flat = {}  # what was committed last (not again: triggers repeat it)

    def commit(self, offsets: Flat) -> None:
        """Commit ``offsets`` (next offset to read per partition) to the group."""
        if not offsets or offsets == self._last:
            return
        # Any failure is only logged (Exception, not just TubeqError): a report must never
        # fail the query. The next commit tries again.
        try:
            if self._consumer is None:
                self._consumer = PullConsumer(self.masters, group=self.group,
                                              enable_auto_commit=False,
                                              client_id="tubeq-spark")
            self._consumer.commit({TopicPartition(t, p): o for (t, p), o in offsets.items()})
            self._last = dict(offsets)
        except Exception as exc:
            self._warn("could not commit the stream's offsets to group %r", exc)
            return
        try:
            self._record_topics(offsets)
        except Exception as exc:
            self._warn("committed to group %r, but the master could not record the stream's "
                       "topics for it (describe_group will not list them)", exc)

    def _warn(self, what: str, exc: Exception) -> None:
        log.warning("tubeq: " + what + " (lag reporting only; the query goes on): %s",
                    self.group, exc, extra={"fields": {"group": self.group, "error": str(exc)}})

    def _record_topics(self, offsets: Flat) -> None:
        """Make the master list every topic of ``offsets`` for the group (see the module)."""
        new = {t for t, _ in offsets} - self._recorded
        if not new:
            return
        with AdminClient(self.masters) as admin:
            self._recorded |= {row.topic for row in admin.describe_group(self.group).partitions}
            for topic in sorted(new - self._recorded):
                same: dict[int, list[int]] = defaultdict(list)  # offset -> partitions
                for (t, p), o in offsets.items():
                    if t == topic:
                        same[o].append(p)
                for offset, parts in sorted(same.items()):
                    admin.reset_group_offsets(self.group, topic, to_offset=offset,
                                              partitions=parts)
                self._recorded.add(topic)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
