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

PySpark 4 starts its data source planning workers (look up, create, plan a read, write, the
streaming sink) through ``pyspark.daemon`` whatever the setting says. For those,
:func:`worker_python` writes a small ``PYSPARK_PYTHON`` that runs this module where Spark asks
for ``-m pyspark.daemon``, runs ``spark_sink.source_runner`` (which connects back to Spark
before it imports anything) where Spark starts a streaming source's runner, and is the plain
interpreter otherwise; local sessions of ours use it (spark_sink/pipelines/local.py's
``spark_env``).
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import shlex
import sys
from pathlib import Path

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


WORKER_PYTHON = """#!/bin/sh
# PYSPARK_PYTHON written by tubeq (spark_sink/daemon.py): pyspark from site-packages, not from
# the bytecode-less zip Spark puts first on the path; pyspark.daemon -> spark_sink.daemon;
# the streaming source's runner -> spark_sink.source_runner (connects back before importing)
for zip in {zips}; do
    case ":$PYTHONPATH:" in
    *":$zip:"*)
        p=":$PYTHONPATH:"
        p="${{p%%":$zip:"*}}:${{p#*":$zip:"}}"
        p=${{p#:}}
        export PYTHONPATH="${{p%:}}" ;;
    esac
done
if [ "$1" = "-m" ]; then
    case "$2" in
    pyspark.daemon) shift 2; exec {python} -m spark_sink.daemon "$@" ;;
    pyspark.sql.streaming.python_streaming_source_runner)
        shift 2; exec {python} -m spark_sink.source_runner "$@" ;;
    esac
fi
exec {python} "$@"
"""


def bundled_zip() -> list[str]:
    """The copy of pyspark that Spark puts first on its Python workers' path (in the pip
    package: ``pyspark/python/lib/pyspark.zip``): the same code as the package, without
    bytecode, so every worker compiles it (2.3 s of CPU to import the streaming source's
    runner, against 0.7 s from the package). Only this exact path (as found, and with its
    links resolved) is dropped, so a Spark of another installation keeps its own. None when
    pyspark is not installed."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        return []
    path = Path(spec.origin).parent / "python" / "lib" / "pyspark.zip"
    return sorted({str(path), str(path.resolve())})


def worker_python(python: str = sys.executable, cache: Path | None = None) -> str:
    """An executable for ``PYSPARK_PYTHON``: ``python``, importing pyspark from its package
    (:func:`bundled_zip`), whose ``-m pyspark.daemon`` runs this module and whose
    ``-m pyspark.sql.streaming.python_streaming_source_runner`` runs
    ``spark_sink.source_runner``. Kept in the user's
    own cache dir (never a shared temp dir: Spark executes it), rewritten whenever its text is
    not the expected one; ``python`` itself where that fails."""
    zips = " ".join(map(shlex.quote, bundled_zip()))
    text = WORKER_PYTHON.format(python=shlex.quote(python), zips=zips)
    try:
        home = cache or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tubeq"
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = home.stat()
        if info.st_uid != os.getuid() or info.st_mode & 0o022:
            return python  # someone else's, or writable by others: not ours to run
        path = home / f"spark-python-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
        if not path.is_file() or path.is_symlink() or path.read_text() != text:
            tmp = home / f".{path.name}.{os.getpid()}"
            tmp.write_text(text)
            tmp.chmod(0o700)
            os.replace(tmp, path)
        return str(path)
    except OSError:
        return python


if __name__ == "__main__":
    one_blas_thread()
    preload(DATA_SOURCE, worker_module(sys.argv))
    from pyspark.daemon import manager

    manager()
