"""``pyspark.daemon`` with the tubeq data source imported once, before the daemon forks workers.

Why: PySpark forks every Python worker from a daemon (one daemon per worker module: tasks,
and each planning step of a data source: look it up, create it, plan a read, write), and each
fork imports the data source again (grpc, numpy, pyarrow, ``lib``) and the worker module: about
a second of CPU per worker, which on a small machine is most of what a short query's Python
side costs. Imported here, every fork inherits them. Spark runs this module when
``spark.python.daemon.module`` names it, as every session of ours does
(spark_sink/pipelines/local.py).

``pyspark.daemon`` imports the worker module only after the fork, because a module that starts
threads on import makes forking unsafe. The threads these imports start are forked safely:
OpenBLAS (numpy) and Arrow's pools stop and restart theirs around a fork, and gRPC starts none
until a channel is made. A module that cannot be imported is left to the workers, as before.
This module must write nothing to stdout: the JVM reads the daemon's port there.
"""
from __future__ import annotations

import importlib
import sys

from lib.process import one_blas_thread

DATA_SOURCE = "spark_sink.source"


def worker_module(argv: list[str]) -> str:
    """The module the daemon's workers run (pyspark.daemon's own rule)."""
    return argv[1] if len(argv) > 1 and argv[1].startswith("pyspark") else "pyspark.worker"


def preload(*modules: str) -> None:
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - the workers import it and report it themselves
            print(f"tubeq daemon: {name} not preloaded ({exc!r})", file=sys.stderr)


if __name__ == "__main__":
    one_blas_thread()
    preload(DATA_SOURCE, worker_module(sys.argv))
    from pyspark.daemon import manager

    manager()
