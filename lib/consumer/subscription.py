"""Subscription state shared by the pull and push consumers: pure data, no I/O.

What a consumer owns (its assignment), where it is in each partition (``position``: the next
offset to hand to the application), what it last committed and what is paused (where each
partition lives is :class:`lib.routes.RouteCache`). The fetcher, the coordinator and the
application thread all touch it, so every method takes one lock; none of them blocks or calls
the network.

``epoch`` is bumped for a partition whenever its position jumps (seek, reset, re-assignment,
a fetch that no longer lines up): data fetched under an older epoch is dropped instead of
delivered, which is how a seek never lets stale prefetched records through. Epochs come from
one counter, so a partition that is revoked and assigned again never reuses an old epoch.
"""
from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from lib.errors import InvalidArgument, TubeqError
from lib.names import check_name
from lib.types import TopicPartition

RESET_POLICIES = ("earliest", "latest", "error")


@dataclass(slots=True)
class PartitionState:
    """One assigned partition. ``position`` None = not known yet (needs committed offset/reset)."""

    position: int | None = None
    committed: int | None = None
    paused: bool = False
    epoch: int = 0
    error: TubeqError | None = None  # raised by poll until the application seeks
    hold: int | None = None  # commits never pass this offset (a push handler failed here)


class SubscriptionState:
    """Assignment, positions and commits of one consumer. Thread-safe, never blocks."""

    def __init__(self, reset_policy: str = "latest") -> None:
        if reset_policy not in RESET_POLICIES:
            raise InvalidArgument(
                f"auto_offset_reset must be one of {RESET_POLICIES}, got {reset_policy!r}")
        self.reset_policy = reset_policy
        self.topics: tuple[str, ...] = ()
        self.tags: tuple[str, ...] = ()
        self.version = 0  # bumped on every assignment change (lets others cache derived views)
        self.moves = 0  # bumped on every seek or invalidation (the fetcher's in-flight check)
        self._lock = threading.Lock()
        self._parts: dict[TopicPartition, PartitionState] = {}
        self._epochs = itertools.count(1)

    # -- subscription and assignment ---------------------------------------------------------

    def set_topics(self, topics: Iterable[str] | str, tags: Iterable[str] | None = None) -> None:
        """Record the subscribed topics (names checked) and the tag filter."""
        self.set_tags(tags)
        self.topics = topic_names(topics)

    def set_tags(self, tags: Iterable[str] | None) -> None:
        if isinstance(tags, str):
            tags = [tags]
        clean = tuple(t for t in (tags or ()) if t)
        for t in clean:
            if not isinstance(t, str) or len(t.encode()) > 255:
                raise InvalidArgument(f"bad tag {t!r}: tags are strings of at most 255 bytes")
        self.tags = clean

    def assign(self, tps: Iterable[TopicPartition]) -> tuple[set[TopicPartition],
                                                               set[TopicPartition]]:
        """Make ``tps`` the assignment; returns (added, removed). Kept partitions keep state."""
        wanted = {TopicPartition(check_name(tp[0], "topic"), _partition(tp[1])) for tp in tps}
        with self._lock:
            current = set(self._parts)
            added, removed = wanted - current, current - wanted
            for tp in removed:
                del self._parts[tp]
            for tp in added:
                self._parts[tp] = PartitionState(epoch=next(self._epochs))
            if added or removed:
                self.version += 1
            return added, removed

    def revoke(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Drop ``tps`` in one step; returns their commit points not committed yet."""
        out: dict[TopicPartition, int] = {}
        with self._lock:
            for tp in tps:
                st = self._parts.pop(tp, None)
                if st is not None and st.position is not None:
                    point = _commit_point(st)
                    if point != st.committed:
                        out[tp] = point
            self.version += 1
        return out

    def assignment(self) -> set[TopicPartition]:
        with self._lock:
            return set(self._parts)

    def is_assigned(self, tp: TopicPartition) -> bool:
        return tp in self._parts

    # -- positions ---------------------------------------------------------------------------

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Move the position; prefetched data of the partition becomes stale (new epoch)."""
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidArgument(f"cannot seek {tp} to {offset!r}: offsets are integers >= 0",
                                  offset=str(offset))
        with self._lock:
            st = self._state(tp)
            st.position, st.error, st.hold = offset, None, None
            st.epoch = next(self._epochs)
            self.moves += 1

    def invalidate(self, tp: TopicPartition) -> None:
        """Prefetched data no longer lines up with the position: refetch from the position."""
        with self._lock:
            st = self._parts.get(tp)
            if st is not None:
                st.epoch = next(self._epochs)
                self.moves += 1

    def position(self, tp: TopicPartition) -> int | None:
        with self._lock:
            return self._state(tp).position

    def epoch(self, tp: TopicPartition) -> int | None:
        st = self._parts.get(tp)
        return None if st is None else st.epoch

    def advance(self, tp: TopicPartition, epoch: int, expected: int, new_position: int) -> bool:
        """Move from ``expected`` to ``new_position`` if nothing changed meanwhile."""
        with self._lock:
            st = self._parts.get(tp)
            if st is None or st.epoch != epoch or st.position != expected:
                return False
            st.position = new_position
            return True

    def missing_positions(self) -> list[TopicPartition]:
        """Partitions whose start position is still to be found (committed offset or reset)."""
        with self._lock:
            return [tp for tp, st in self._parts.items()
                    if st.position is None and st.error is None]

    def fetchable(self) -> list[tuple[TopicPartition, int, int]]:
        """(tp, position, epoch) of every partition data may be fetched for right now."""
        with self._lock:
            return [(tp, st.position, st.epoch) for tp, st in self._parts.items()
                    if st.position is not None and not st.paused and st.error is None]

    # -- commits -----------------------------------------------------------------------------

    def set_committed(self, tp: TopicPartition, offset: int) -> None:
        with self._lock:
            st = self._parts.get(tp)
            if st is not None:
                st.committed = offset

    def committed(self, tp: TopicPartition) -> int | None:
        with self._lock:
            return self._state(tp).committed

    def uncommitted(self) -> dict[TopicPartition, int]:
        """Commit points that differ from what was last committed (what a commit should send)."""
        with self._lock:
            out = {}
            for tp, st in self._parts.items():
                if st.position is not None:
                    point = _commit_point(st)
                    if point != st.committed:
                        out[tp] = point
            return out

    def hold(self, tp: TopicPartition, offset: int) -> None:
        """Never commit past ``offset`` of ``tp`` until the next seek (a handler failed there)."""
        with self._lock:
            st = self._parts.get(tp)
            if st is not None and (st.hold is None or offset < st.hold):
                st.hold = offset

    # -- pause and errors --------------------------------------------------------------------

    def pause(self, tps: Iterable[TopicPartition], paused: bool = True) -> None:
        with self._lock:
            for tp in tps:
                self._state(tp).paused = paused

    def is_paused(self, tp: TopicPartition) -> bool:
        st = self._parts.get(tp)
        return st is not None and st.paused

    def paused(self) -> set[TopicPartition]:
        with self._lock:
            return {tp for tp, st in self._parts.items() if st.paused}

    def fail(self, tp: TopicPartition, error: TubeqError) -> None:
        """Stop fetching ``tp``; poll raises ``error`` until the application seeks."""
        with self._lock:
            st = self._parts.get(tp)
            if st is not None:
                st.error = error

    def first_error(self) -> TubeqError | None:
        with self._lock:
            for st in self._parts.values():
                if st.error is not None:
                    return st.error
        return None

    def _state(self, tp: TopicPartition) -> PartitionState:
        st = self._parts.get(tp)
        if st is None:
            raise InvalidArgument(f"{tp.topic}[{tp.partition}] is not assigned to this consumer",
                                  topic=tp.topic, partition=tp.partition)
        return st


def topic_names(topics: Iterable[str] | str) -> tuple[str, ...]:
    """Checked, de-duplicated topic names (a single name may be given as a string)."""
    names = tuple(dict.fromkeys(check_name(t, "topic")
                                for t in ([topics] if isinstance(topics, str) else topics)))
    if not names:
        raise InvalidArgument("subscribe needs at least one topic")
    return names


def _commit_point(st: PartitionState) -> int:
    assert st.position is not None
    return st.position if st.hold is None else min(st.position, st.hold)


def _partition(p: object) -> int:
    if isinstance(p, bool) or not isinstance(p, int) or p < 0:
        raise InvalidArgument(f"bad partition {p!r}: partitions are integers >= 0")
    return p
