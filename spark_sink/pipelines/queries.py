"""Run a streaming query to its end, starting it again when Spark gave up on a slow Python start.

Why: a query that reads ``format("tubeq")`` (any Python streaming source) has its offsets asked
on the driver by a Python process that Spark starts for the query
(``PythonStreamingSourceRunner``, never through ``pyspark.daemon``), and Spark waits a fixed
10 s for it to connect back (``PythonWorkerFactory.createSimpleWorker``; PySpark 4 has no
setting for it). Our ``PYSPARK_PYTHON`` runs it as ``spark_sink.source_runner``, which connects
back before it imports pyspark, numpy and pyarrow, so the window covers only the interpreter's
start (see docs/spark.md, On a busy machine). On a machine loaded far beyond its cores even
that can take longer than 10 s (or a session runs pyspark's own runner, which connects only
after its imports), and the query fails at its start with "Python worker failed to connect
back". Nothing of the query ran then, and the query resumes from its checkpoint, so starting it
again is safe (the tubeq sink is exactly-once across restarts). Only that failure is retried,
and only :data:`START_TRIES` times, with a line on stderr each time; any other failure, or the
same one every time (a Python that cannot start at all fails the same way), is the caller's.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

START_TRIES = 3
WORKER_START_FAILED = "Python worker failed to connect back"


def worker_start_failed(error: BaseException | None) -> bool:
    """True when ``error`` (a query's ``exception()``) is Spark giving up on a Python worker
    that did not connect back in time, and nothing else."""
    return error is not None and WORKER_START_FAILED in str(error)


def run_query(start: Callable[[], Any], timeout: float | None = None) -> Any:
    """``start()`` a query and await its end (at most ``timeout`` seconds per try); start it
    again while it failed only because its Python worker was slow to start. Returns the last
    query, ended or not, failed or not: the caller looks at ``exception()`` as before."""
    def wait(query: Any) -> None:
        try:
            query.awaitTermination(timeout)
        except Exception:  # noqa: BLE001 - a failed query is judged through exception()
            pass
    return _retried(start, wait)


def start_query(start: Callable[[], Any], timeout: float = 120.0) -> Any:
    """``start()`` a query that runs on (a processing-time trigger) and return it once its
    first micro-batch has run (its sources are up), it ended, or ``timeout`` passed; started
    again as :func:`run_query` does."""
    def wait(query: Any) -> None:
        deadline = time.monotonic() + timeout
        while query.isActive and not query.recentProgress and time.monotonic() < deadline:
            try:
                query.awaitTermination(0.2)
            except Exception:  # noqa: BLE001 - a failed query is judged through exception()
                return
    return _retried(start, wait)


def _retried(start: Callable[[], Any], wait: Callable[[Any], None]) -> Any:
    attempt = 1
    while True:
        query = start()
        wait(query)
        error = None if query.isActive else query.exception()
        if not worker_start_failed(error) or attempt == START_TRIES:
            return query
        print(f"query {query.name or query.id}: Spark gave up on a Python worker that was slow "
              f"to start (try {attempt} of {START_TRIES}): starting the query again from its "
              "checkpoint", file=sys.stderr, flush=True)
        attempt += 1
