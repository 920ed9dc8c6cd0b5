"""The ``tubeq`` command (click): ``main.py`` the group and its error handling, ``cluster.py``
a local cluster (starts masters and brokers as processes), ``admin.py`` topics, groups and
brokers, ``data.py`` produce and consume, ``bench.py`` benchmarks, ``security.py`` users and
keys, ``common.py`` what they share. ``tubeq spark`` and ``tubeq load`` come from
``spark_sink/cli.py`` and ``load/cli.py`` through the ``tubeq.commands`` entry point."""
from lib.process import one_blas_thread

one_blas_thread()  # before the commands' imports load numpy

from lib.cli.main import main  # noqa: E402

__all__ = ["main"]
