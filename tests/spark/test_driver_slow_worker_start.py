"""A busy machine: Spark gives up on a Python worker that takes more than its fixed 10 s to
connect back (the streaming source's, started without pyspark.daemon), and the query is started
again from its checkpoint (spark_sink/pipelines/queries.py); nothing else is retried. Slow
imports do not count against that window: spark_sink/source_runner.py connects back first."""
from __future__ import annotations

import os

from spark_sink.pipelines.queries import START_TRIES, run_query, start_query
from tests.spark.conftest import SPARK_ENV
from tests.spark.drivers import finish_driver, produce, start_driver, topic_values

SLOW = "SparkException: Python worker failed to connect back."
RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"
# Put on the Python path of a driver's JVM. The first Python worker that Spark starts itself
# (PYTHON_WORKER_FACTORY_PORT is set for those only, not for pyspark.daemon's forks) starts
# later than Spark's fixed 10 s window, as on a machine loaded far beyond its cores: the query
# is started again. In every later one, importing pyspark's streaming source runner takes
# longer than that window, as it did beside two busy loops: spark_sink.source_runner has
# connected back by then, so Spark waits for it and the query is not started a third time.
SLOW_WORKERS = f'''
import os
import sys
import time

class SlowRunnerImport:
    def find_spec(self, name, path=None, target=None):
        if name == "{RUNNER}":
            open(os.environ["TUBEQ_SLOW_WORKER_MARK"] + "-import", "w").close()
            time.sleep(12)
        return None

if "PYTHON_WORKER_FACTORY_PORT" in os.environ:
    try:
        os.close(os.open(os.environ["TUBEQ_SLOW_WORKER_MARK"], os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        sys.meta_path.insert(0, SlowRunnerImport())
    else:
        time.sleep(12)
'''


class Query:
    """Stands in for a StreamingQuery that ended with ``error`` (or is still running)."""

    name, id = "q", "id"

    def __init__(self, error: str | None, active: bool = False) -> None:
        self.error, self.isActive = error, active
        self.recentProgress = [{"batchId": 0}] if active else []

    def awaitTermination(self, timeout=None):  # noqa: N802 - pyspark's name
        if self.error is not None:
            raise RuntimeError(self.error)
        return not self.isActive

    def exception(self):
        return None if self.error is None else RuntimeError(self.error)


def starts(*queries: Query):
    started = []

    def start() -> Query:
        started.append(queries[len(started)])
        return started[-1]
    return start, started


def test_a_query_that_failed_only_on_a_slow_worker_start_is_started_again(capsys):
    start, started = starts(Query(SLOW), Query(None))
    assert run_query(start).exception() is None
    assert len(started) == 2
    assert "slow to start (try 1 of 3)" in capsys.readouterr().err
    start, started = starts(Query(SLOW), Query(None, active=True))
    assert start_query(start).isActive and len(started) == 2


def test_other_failures_and_a_worker_that_never_starts_are_the_callers():
    start, started = starts(Query("OffsetOutOfRange: data loss"), Query(None))
    assert "data loss" in str(run_query(start).exception())
    assert len(started) == 1
    start, started = starts(*[Query(SLOW) for _ in range(START_TRIES + 1)])
    assert SLOW in str(run_query(start).exception())
    assert len(started) == START_TRIES


def test_a_stream_whose_source_worker_starts_too_late_lands_every_row_once(
        masters, new_topic, tmp_path):
    source, target = new_topic(partitions=2), new_topic(partitions=2)
    sent = produce(masters, source, 1000)
    slow = tmp_path / "slow-python"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text(SLOW_WORKERS)
    mark, log = tmp_path / "slowed", tmp_path / "driver.log"
    env = {"PYTHONPATH": os.pathsep.join([str(slow), SPARK_ENV["PYTHONPATH"]]),
           "TUBEQ_SLOW_WORKER_MARK": str(mark)}
    driver = start_driver(masters, source, target, str(tmp_path / "ckpt"), log, env)
    assert finish_driver(driver) == 0, log.read_text()[-3000:]
    assert mark.exists(), "no Python worker was started by Spark itself: nothing was tested"
    assert mark.with_name(mark.name + "-import").exists(), "the runner's import was not slowed"
    assert "slow to start (try 1 of 3)" in log.read_text()
    assert "(try 2 of 3)" not in log.read_text(), "a slow import made Spark give up again"
    assert sorted(topic_values(masters, target)) == sorted(b"seen:" + v for v in sent)
