"""A Spark session for a pipeline or a benchmark: reused if one is active, else started here.

A session started here runs its Python workers on this interpreter, sees ``pyspark_tubeq``
(the repository root goes on ``PYTHONPATH``, which reaches the workers through the JVM, as in
tests/spark/conftest.py), binds a ``local[...]`` driver to 127.0.0.1, and on leaving is stopped
and its JVM (started by pyspark through spark-submit) ended by PID; the Python workers die with
the JVM. A session that was already active (a test's, a notebook's, ``spark-submit``'s) is
lent, never stopped. Every session of the project (the tests', the pipelines', the benchmarks')
is built by :func:`session_builder`, so all of them get the settings a busy machine needs.
"""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lib.process import terminate
from spark_sink.daemon import worker_python

ROOT = Path(__file__).resolve().parents[2]
GATEWAY_TRIES = 3
# What every session of ours runs with. With the two cores loaded by other work (load average
# 8 and more) a Python process takes seconds to start, and Spark's Python sockets have short
# fixed windows:
# - use.daemon (Linux's default, said here so it stays on): task and planning workers are
#   forked by pyspark.daemon, which answers within Spark's 60 s window; a worker Spark starts
#   itself (the streaming source's, always: PythonStreamingSourceRunner) gets a fixed 10 s to
#   connect back, which no setting changes: spark_env's PYSPARK_PYTHON runs it as
#   spark_sink/source_runner.py, which connects before its imports (and see
#   spark_sink/pipelines/queries.py);
# - worker.reuse: a task's worker serves the next task instead of a fork per task;
# - daemon.module: spark_sink/daemon.py, pyspark.daemon with our data source imported before
#   it forks (each fork imported it again: about a second of CPU per worker);
# - authenticate.socketTimeout (15 s by default): a Python worker's connect and handshake to
#   the JVM, and the JVM's wait for the Python driver to fetch a result (collect, toPandas).
SESSION_CONF = {
    "spark.ui.enabled": "false",
    "spark.python.use.daemon": "true",
    "spark.python.worker.reuse": "true",
    "spark.python.daemon.module": "spark_sink.daemon",
    "spark.python.authenticate.socketTimeout": "120s",
}


def get_or_create(builder: Any) -> Any:
    """``builder.getOrCreate()``, tried again when Spark's JVM dies before it starts.

    Why: pyspark forks (with a ``preexec_fn``) to exec spark-submit, and grpcio >= 1.81 runs its
    fork handlers in that child; with gRPC busy in this process, the child's new poller thread
    can meet the descriptors the child is closing and the child dies (grpc/grpc#43055: 6 of 300
    such forks here). pyspark then says JAVA_GATEWAY_EXITED; a second fork nearly always gets
    through. Turning gRPC's fork support off process-wide would cure it, but would hang a
    process forked after using gRPC (Locust's ``--processes`` workers)."""
    from pyspark.errors import PySparkRuntimeError

    for attempt in range(1, GATEWAY_TRIES + 1):
        try:
            return builder.getOrCreate()
        except PySparkRuntimeError as exc:
            if exc.getCondition() != "JAVA_GATEWAY_EXITED" or attempt == GATEWAY_TRIES:
                raise
            print(f"Spark's JVM exited before it started (try {attempt} of {GATEWAY_TRIES}): "
                  "starting it again", file=sys.stderr)


def session_builder(master: str, app_name: str, conf: dict[str, str] | None = None) -> Any:
    """``SparkSession.builder`` for ``master`` with :data:`SESSION_CONF`, a ``local[...]``
    driver bound to 127.0.0.1, then ``conf`` (which wins)."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    settings = dict(SESSION_CONF)
    if master.startswith("local"):
        settings.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder


def spark_env() -> dict[str, str]:
    """What Spark's JVM and Python workers need in the environment."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    python = worker_python()  # the driver's too: Spark runs data source planning there
    return {"PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python,
            "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": path}


@contextmanager
def local_spark(master: str = "local[2]", app_name: str = "tubeq-pipeline",
                conf: dict[str, str] | None = None) -> Iterator[Any]:
    """The active SparkSession, or a new one on ``master`` stopped (JVM by PID) on leaving."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is not None:  # someone else's: lend, never stop
        yield SparkSession.builder.getOrCreate()
        return
    if str(ROOT) not in sys.path:  # the driver's own data source lookup scans sys.path
        sys.path.insert(0, str(ROOT))
    os.environ.update(spark_env())
    session = get_or_create(session_builder(master, app_name, conf))
    jvm: subprocess.Popen | None = getattr(SparkContext._gateway, "proc", None)
    try:
        session.sparkContext.setLogLevel("ERROR")
        yield session
    finally:
        try:
            session.stop()
        finally:
            stop_jvm(jvm)
            SparkContext._gateway = None
            SparkContext._jvm = None


def stop_jvm(jvm: subprocess.Popen | None, timeout: float = 20.0) -> None:
    """SIGTERM (Spark's shutdown hooks delete its temp dirs), then SIGKILL after ``timeout``."""
    if jvm is not None:
        terminate(jvm, timeout)
