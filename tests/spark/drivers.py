"""What the Spark tests that run a driver of their own share: rows in, rows out, and the driver.

A test that SIGKILLs a driver (its Python and its JVM) or starts one with a different Python
path runs it as a process of its own (tests/spark/stream_sink_worker.py); such tests live in
``test_driver_*.py`` files, which tests/conftest.py lets run beside the Spark session's tests.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from lib.admin import AdminClient
from lib.errors import PartitionNotHosted, UnknownTopic
from lib.producer.producer import Producer
from tests.integration.test_producer_cluster import fetch_partition
from tests.spark.conftest import ROOT, SPARK_ENV, short_driver_submit_args


def produce(masters: str, topic: str, n: int, first: int = 0) -> list[bytes]:
    values = [b"row-%06d" % i for i in range(first, first + n)]
    keys = [b"k%d" % (i % 13) for i in range(first, first + n)]
    with Producer(masters) as producer:
        producer.send_batch(topic, values, keys=keys).result(60)
    return values


def topic_values(masters: str, topic: str) -> list[bytes]:
    """Every value of ``topic``, read straight from its brokers (a broker learns a new topic,
    or a partition moved to it, at its next heartbeat: until then it says UnknownTopic or
    PartitionNotHosted, and this asks the master again)."""
    deadline = time.monotonic() + 30
    while True:
        with AdminClient(masters) as admin:
            info = admin.describe_topic(topic)
        try:
            return [r.value for p in info.partitions
                    for r in fetch_partition(masters, p.address, topic, p.partition)]
        except (UnknownTopic, PartitionNotHosted):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def start_driver(masters: str, source: str, target: str, ckpt: str, log,
                 env: dict[str, str] | None = None) -> subprocess.Popen:
    """tests/spark/stream_sink_worker.py in its own session (``env`` on top of Spark's)."""
    # A SIGKILLed JVM leaves its scratch dirs (blockmgr-*, spark-*, artifacts-*) behind: keep
    # them in the test's own dir, not in /tmp.
    scratch = Path(ckpt).parent / "spark-scratch"
    scratch.mkdir(exist_ok=True)
    env = {**os.environ, **SPARK_ENV, "SPARK_LOCAL_DIRS": str(scratch),
           "PYSPARK_SUBMIT_ARGS": short_driver_submit_args(f"-Djava.io.tmpdir={scratch}"),
           **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.spark.stream_sink_worker", masters, source, target, ckpt,
         "500"], cwd=ROOT, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
        start_new_session=True)


def finish_driver(driver: subprocess.Popen, timeout: float = 300) -> int:
    """Wait up to ``timeout`` s for ``driver`` to end; if it has not, SIGKILL its session (its
    Python and its JVM) so no test leaves a JVM behind. Returns its exit code."""
    try:
        driver.wait(timeout)
    except subprocess.TimeoutExpired:
        pass
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(30)
    return driver.returncode
