"""StatsReporter on a real TopicManager: a heartbeat sends the partitions whose stats moved
since the last one a master answered, and the whole list when it must (first, after a
registration, when the hosted set changed, every FULL_EVERY)."""
from __future__ import annotations

import pytest

from broker.heartbeat_stats import FULL_EVERY, StatsReporter
from broker.metrics import BrokerMetrics
from broker.topics import TopicManager, TopicSpec
from storage.config import StoreConfig
from tests.helpers import batch_of


@pytest.fixture
def tm(tmp_path):
    m = TopicManager(tmp_path, StoreConfig(cache_flush_interval_ms=10))
    m.apply({"t": TopicSpec(partitions=3, topic_id=1)}, [("t", 0), ("t", 1), ("t", 2)])
    yield m
    m.close()


def sent(report) -> dict[tuple[str, int], int]:
    return {(s.topic, s.partition): s.latest for s in report.stats}


def test_only_what_moved_goes_after_the_first_answered_heartbeat(tm):
    metrics = BrokerMetrics()
    reporter = StatsReporter(tm, metrics)
    first = reporter.prepare()
    assert not first.partial and sent(first) == {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    assert not reporter.prepare().partial, "not answered yet: the whole list again"
    reporter.answered(first)
    quiet = reporter.prepare()
    assert quiet.partial and quiet.stats == []
    tm.store_for("t", 1).append(1, batch_of([b"a", b"b"]))
    metrics.produced("t", 2, 10, 1)  # a counter moving counts too
    moved = reporter.prepare()
    assert moved.partial and sent(moved) == {("t", 1): 2, ("t", 2): 0}
    assert [s.messages_in for s in moved.stats if s.partition == 2] == [1]
    reporter.answered(moved)
    assert reporter.prepare().stats == []


def test_the_whole_list_goes_when_the_hosted_set_changes_after_forget_and_every_so_often(tm):
    reporter = StatsReporter(tm, BrokerMetrics())
    reporter.answered(reporter.prepare())
    tm.apply({"t": TopicSpec(partitions=3, topic_id=1)}, [("t", 0), ("t", 2)])
    shrunk = reporter.prepare()
    assert not shrunk.partial and sent(shrunk) == {("t", 0): 0, ("t", 2): 0}
    reporter.answered(shrunk)
    reporter.forget()  # registered again: a master may know nothing
    assert not reporter.prepare().partial
    reporter.answered(reporter.prepare())
    for _ in range(FULL_EVERY - 1):
        report = reporter.prepare()
        assert report.partial
        reporter.answered(report)
    assert not reporter.prepare().partial, f"whole again after {FULL_EVERY} heartbeats"


def test_a_row_is_computed_again_only_when_its_partition_moved(tm, monkeypatch):
    """Computing every row each second (disk bytes, offsets, stable offset under the store's
    lock) cost a busy broker at 10,000 partitions a fifth of its CPU."""
    reporter = StatsReporter(tm, BrokerMetrics())
    reporter.answered(reporter.prepare())
    store = tm.store_for("t", 0)  # one store holds all three partitions
    asked: list[int] = []
    real = store.disk_bytes
    monkeypatch.setattr(store, "disk_bytes", lambda p: asked.append(p) or real(p))
    reporter.answered(reporter.prepare())
    assert asked == []
    store.append(2, batch_of([b"x"]))
    assert sent(reporter.prepare()) == {("t", 2): 1} and asked == [2]


def test_a_broker_hosting_many_partitions_walks_them_every_few_heartbeats(tm, monkeypatch):
    """Walking 10,000 partitions each second cost the master link a tenth of a busy broker's
    CPU: past PARTITIONS_PER_BEAT, stats go every hosted / PARTITIONS_PER_BEAT heartbeats
    (here 3), and at once when the hosted set changes."""
    monkeypatch.setattr("broker.heartbeat_stats.PARTITIONS_PER_BEAT", 1)
    reporter = StatsReporter(tm, BrokerMetrics())
    reporter.answered(reporter.prepare())  # walked: the next two are not
    tm.store_for("t", 0).append(1, batch_of([b"a"]))
    skipped = [reporter.prepare(), None]
    reporter.answered(skipped[0])
    skipped[1] = reporter.prepare()
    reporter.answered(skipped[1])
    assert all(r.partial and r.stats == [] for r in skipped)
    walked = reporter.prepare()
    assert sent(walked) == {("t", 1): 1}
    reporter.answered(walked)
    tm.apply({"t": TopicSpec(partitions=3, topic_id=1)}, [("t", 0), ("t", 1)])
    changed = reporter.prepare()
    assert not changed.partial and sent(changed) == {("t", 0): 0, ("t", 1): 1}
