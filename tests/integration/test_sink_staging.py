"""Exactly-once sink staging (broker/sinks.py, lib/sink.py) against real broker processes."""
from __future__ import annotations

import time

import pytest

from broker.sinks import EXIT_AFTER_APPENDS_ENV
from lib.errors import (
    CorruptRecord,
    InvalidArgument,
    InvalidName,
    SinkStagingFull,
    SinkStagingLost,
    TubeqError,
    UnknownTopic,
)
from lib.proto import broker_pb2 as pb
from lib.proto.broker_pb2_grpc import BrokerStub
from lib.rpc import invoke
from lib.sink import SinkClient
from tests.integration.test_producer_cluster import create, fetch_topic

pytestmark = pytest.mark.shared_cluster


def values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i:05d}".encode() for i in range(n)]


def stored_values(cluster, topic: str) -> dict[int, list[bytes]]:
    return {p: [r.value for r in recs] for p, recs in fetch_topic(cluster, topic).items()}


def test_staged_records_appear_only_at_commit_and_a_replayed_commit_adds_nothing(cluster):
    create(cluster, "eos", partitions=2)  # two brokers: one partition each
    with SinkClient(cluster.master_addresses, batch_bytes=4096) as sinks:
        a = sinks.task("q1", 0, "0.0")
        a.add("eos", 0, values("a", 500))
        a.add("eos", 1, values("b", 300), keys=values("k", 300), tags=["t"] * 300)
        b = sinks.task("q1", 0, "1.0")
        b.add("eos", 0, values("c", 200))
        assert a.staged.records == 800 and len(a.staged.pieces) == 2
        assert stored_values(cluster, "eos") == {0: [], 1: []}  # staged: invisible
        assert sinks.commit("q1", 0, [b.finish(), a.finish()]) == 1000
        # Spark replays micro-batch 0 after a crash: the tasks stage it again, and the commit
        # finds it committed on every broker.
        again = sinks.task("q1", 0, "0.1")
        again.add("eos", 0, values("a", 500))
        assert again.committed_before
        assert sinks.commit("q1", 0, [again.finish()]) == 0
    got = stored_values(cluster, "eos")
    assert got[0] == values("a", 500) + values("c", 200)  # task order, then piece order
    assert got[1] == values("b", 300)
    records = fetch_topic(cluster, "eos")[1]
    assert (records[0].key, records[0].tag) == (b"k-00000", "t")


def test_only_the_tasks_a_commit_names_are_applied_and_abort_drops_the_rest(cluster):
    create(cluster, "eos-tasks", partitions=1)
    with SinkClient(cluster.master_addresses) as sinks:
        failed = sinks.task("q2", 5, "0.0")  # an attempt that failed after staging
        failed.add("eos-tasks", 0, values("lost", 50))
        won = sinks.task("q2", 5, "0.1")
        won.add("eos-tasks", 0, values("won", 40))
        assert sinks.commit("q2", 5, [won.finish()]) == 40
        aborted = sinks.task("q2", 6, "0.0")
        aborted.add("eos-tasks", 0, values("aborted", 30))
        sinks.abort("q2", 6, [aborted.finish()])
        with pytest.raises(SinkStagingLost, match="task 0.0 staged 1 batch"):
            sinks.commit("q2", 6, [aborted.finish()])
        assert stored_values(cluster, "eos-tasks") == {0: values("won", 40)}
        # An older batch id than the last committed one is a replay: nothing is applied.
        old = sinks.task("q2", 4, "0.0")
        old.add("eos-tasks", 0, values("old", 10))
        assert old.committed_before and sinks.commit("q2", 4, [old.finish()]) == 0
    assert stored_values(cluster, "eos-tasks") == {0: values("won", 40)}


def test_staging_lost_in_a_broker_restart_fails_the_commit_and_the_rerun_lands_once(cluster):
    create(cluster, "eos-restart", partitions=1)
    with SinkClient(cluster.master_addresses) as sinks:
        first = sinks.task("q3", 0, "0.0")
        first.add("eos-restart", 0, values("x", 100))
        assert sinks.commit("q3", 0, [first.finish()]) == 100
        staged = sinks.task("q3", 1, "0.0")
        staged.add("eos-restart", 0, values("y", 100))
        broker = cluster.broker_process(_leader_id(cluster, "eos-restart"))
        broker.stop()
        broker.start()
        cluster.wait_brokers_registered()
        with pytest.raises(SinkStagingLost, match="nothing was applied"):
            sinks.commit("q3", 1, [staged.finish()])
        sinks.routes.invalidate("eos-restart")  # the restarted broker listens on a new port
        rerun = sinks.task("q3", 1, "0.1")
        rerun.add("eos-restart", 0, values("y", 100))
        assert not rerun.committed_before  # the committed batch id survived the restart
        assert sinks.commit("q3", 1, [rerun.finish()]) == 100
        replay = sinks.task("q3", 0, "0.2")
        replay.add("eos-restart", 0, values("x", 100))
        assert replay.committed_before
    assert stored_values(cluster, "eos-restart") == {0: values("x", 100) + values("y", 100)}


def test_a_broker_dying_in_the_middle_of_a_commit_leaves_no_duplicate_after_the_replay(
        cluster_factory):
    """The broker exits after 3 of a commit's appends (sync topic: they are on disk); the
    replay finds them by the commit's intent and appends only the rest, once."""
    cluster = cluster_factory(1)
    create(cluster, "eos-half", partitions=2, durability="sync")
    broker = cluster.broker_process(_leader_id(cluster, "eos-half"))
    with SinkClient(cluster.master_addresses, batch_bytes=2048) as sinks:
        first = sinks.task("q5", 0, "0.0")
        first.add("eos-half", 0, values("w", 20))
        assert sinks.commit("q5", 0, [first.finish()]) == 20
        broker.stop()
        broker.env[EXIT_AFTER_APPENDS_ENV] = "3"
        broker.start()
        cluster.wait_brokers_registered()
        sinks.routes.invalidate("eos-half")

        def stage(attempt: str) -> list:
            a = sinks.task("q5", 1, f"0.{attempt}")
            a.add("eos-half", 0, values("a", 400))  # ~5 batches of 2 KiB
            a.add("eos-half", 1, values("b", 100))
            b = sinks.task("q5", 1, f"1.{attempt}")
            b.add("eos-half", 0, values("c", 100))
            return [a.finish(), b.finish()]

        with pytest.raises(TubeqError):
            sinks.commit("q5", 1, stage("0"))
        assert broker.popen.wait(30) == 70
        del broker.env[EXIT_AFTER_APPENDS_ENV]
        broker.start()
        cluster.wait_brokers_registered()
        sinks.routes.invalidate("eos-half")
        half = _when_served(lambda: stored_values(cluster, "eos-half"))
        assert 0 < len(half[0]) < 20 + 500  # the commit died half way
        assert sinks.commit("q5", 1, stage("1")) == 600
        assert sinks.commit("q5", 1, stage("2")) == 0  # and a second replay adds nothing
    got = stored_values(cluster, "eos-half")
    assert got[0] == values("w", 20) + values("a", 400) + values("c", 100)
    assert got[1] == values("b", 100)


def test_bad_stage_requests_get_clear_errors_and_change_nothing(cluster_factory):
    cluster = cluster_factory(1, broker_args=["--config", _small_staging(cluster_factory)])
    create(cluster, "eos-bad", partitions=1)
    with SinkClient(cluster.master_addresses) as sinks:
        with pytest.raises(InvalidName, match="sink name"):
            sinks.task("bad/sink", 0, "0.0")
        with pytest.raises(InvalidArgument, match="batch_id must be >= 0"):
            sinks.task("q4", -1, "0.0")
        with pytest.raises(InvalidArgument, match="no partition 3"):
            sinks.task("q4", 0, "0.0").add("eos-bad", 3, [b"x"])
        with pytest.raises(SinkStagingFull, match="sink_staging_bytes"):
            sinks.task("q4", 0, "0.0").add("eos-bad", 0, [b"z" * 1000] * 100)
        address = sinks.routes.get("eos-bad").address(0)
        with pytest.raises(CorruptRecord):
            invoke(BrokerStub(sinks._pool.get(address)).SinkStage, pb.SinkStageRequest(
                sink="q4", batch_id=0, task="0.0", topic="eos-bad", partition=0,
                batch=b"\x00" * 200), 10)
    assert stored_values(cluster, "eos-bad") == {0: []}


def _when_served(read, timeout: float = 20.0):
    """``read()`` once the restarted broker has learned its topics from the master (it
    answers UnknownTopic until its first heartbeat reply)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return read()
        except UnknownTopic:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _leader_id(cluster, topic: str) -> int:
    from lib.admin import AdminClient

    with AdminClient(cluster.master_addresses) as admin:
        return admin.describe_topic(topic).partitions[0].broker_id


def _small_staging(cluster_factory) -> str:
    import tempfile

    path = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    path.write("[broker]\nsink_staging_bytes = 50000\n")
    path.close()
    return path.name
