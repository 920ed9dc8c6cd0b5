"""Fixtures of the Spark tests: one local Spark and one tubeq cluster for the whole session.

Both are expensive to start (a JVM ~5 s, a cluster ~2 s), so every Spark test shares them and
makes its own topics. Spark runs ``local[2]`` with its Python workers on this interpreter and
everything bound to 127.0.0.1, with the settings every session of ours gets (a busy machine's:
spark_sink/pipelines/local.py); its JVM (started by pyspark through spark-submit) is stopped by
PID at the end, and the Python workers die with it. Without Java the tests are skipped with that
reason; CI has Java and runs them.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lib.admin import AdminClient
from lib.process import terminate
from spark_sink.pipelines.local import get_or_create, session_builder, spark_env
from tests.cluster import Cluster

pytest.importorskip("pyspark", reason="the Spark tests need the spark extra (pyspark)")

ROOT = Path(__file__).resolve().parents[2]
# PYTHONPATH reaches Spark's Python workers through the JVM. The repo root on it makes
# pyspark_tubeq visible to Spark's data source discovery (pkgutil.iter_modules over the path),
# as a regular install does; an editable install's import hook is invisible to that scan.
SPARK_ENV = spark_env()


# For a Spark driver a test starts as a process of its own, which runs a few micro-batches and
# ends: such a JVM spends much of its CPU in the JIT's optimising compiler (C2) for code it
# leaves before long, and C1 alone costs this machine about 20% less CPU per run.
SHORT_DRIVER_JAVA = "-XX:TieredStopAtLevel=1"


def short_driver_submit_args(*java: str) -> str:
    """PYSPARK_SUBMIT_ARGS for such a driver (``java``: more JVM options)."""
    return f'--driver-java-options "{" ".join([*java, SHORT_DRIVER_JAVA])}" pyspark-shell'


@pytest.fixture(scope="session")
def spark() -> Iterator:
    if shutil.which("java") is None:
        pytest.skip("Spark tests need Java 17 on PATH (java not found)")
    from pyspark import SparkContext

    saved = {k: os.environ.get(k) for k in SPARK_ENV}
    os.environ.update(SPARK_ENV)
    session = get_or_create(  # CI once lost the first JVM to grpc/grpc#43055 (see there)
        session_builder("local[2]", "tubeq-spark-tests", {"spark.sql.shuffle.partitions": "2"}))
    jvm: subprocess.Popen | None = getattr(SparkContext._gateway, "proc", None)
    try:
        yield session
    finally:
        session.stop()
        if jvm is not None:  # the JVM would exit with this process anyway; end it by PID now
            terminate(jvm, 20)
        SparkContext._gateway = None
        SparkContext._jvm = None
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="session")
def tubeq(tmp_path_factory) -> Iterator[Cluster]:
    """One master and two brokers shared by the Spark tests (stopped by PID at the end), with
    Kafka ports (test_kafka_interop.py)."""
    c = Cluster(tmp_path_factory.mktemp("spark-cluster"), broker_args=["--kafka-port", "0"])
    try:
        yield c.start(2)
    finally:
        c.stop_all()


@pytest.fixture(scope="session")
def masters(tubeq: Cluster) -> str:
    return tubeq.master_addresses


@pytest.fixture
def new_topic(masters: str):
    """Make a fresh topic: ``new_topic(partitions=4)`` returns its name."""
    def make(partitions: int = 4) -> str:
        name = f"spark-{uuid.uuid4().hex[:10]}"
        with AdminClient(masters) as admin:
            admin.create_topic(name, partitions=partitions)
        return name
    return make
