"""spark_sink/daemon.py's worker_python: the PYSPARK_PYTHON that starts Spark's Python
daemons as spark_sink.daemon, the streaming source's runner as spark_sink.source_runner, and
passes everything else to the interpreter."""
from __future__ import annotations

import os
import subprocess
import sys

from spark_sink.daemon import bundled_zip, worker_module, worker_python


def run(path: str, *args: str) -> str:
    return subprocess.run([path, *args], capture_output=True, text=True, check=True).stdout


def test_pyspark_daemon_and_the_streaming_source_runner_become_ours_and_the_rest_passes(tmp_path):
    echo = worker_python(python="/bin/echo", cache=tmp_path / "c")
    assert run(echo, "-m", "pyspark.daemon", "pyspark.sql.worker.plan_data_source_read") \
        == "-m spark_sink.daemon pyspark.sql.worker.plan_data_source_read\n"
    assert run(echo, "-m", "pyspark.sql.streaming.python_streaming_source_runner") \
        == "-m spark_sink.source_runner\n"
    assert run(echo, "-m", "pyspark.worker") == "-m pyspark.worker\n"
    python = worker_python(cache=tmp_path / "c")
    assert run(python, "-c", "import sys; print(sys.argv[1:])", "a b", "c") == "['a b', 'c']\n"


def test_a_changed_script_is_written_again_and_a_shared_dir_is_not_used(tmp_path):
    path = worker_python(cache=tmp_path / "c")
    (tmp_path / "c" / path.rsplit("/", 1)[1]).write_text("#!/bin/sh\necho evil\n")
    assert worker_python(cache=tmp_path / "c") == path
    assert "evil" not in open(path).read()
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    assert worker_python(cache=shared) == sys.executable


def test_the_daemon_preloads_the_module_its_workers_run():
    assert worker_module(["daemon.py", "pyspark.sql.worker.create_data_source"]) \
        == "pyspark.sql.worker.create_data_source"
    assert worker_module(["daemon.py"]) == "pyspark.worker"


def test_the_workers_import_pyspark_from_its_package_not_from_spark_s_zip(tmp_path):
    python = worker_python(cache=tmp_path / "c")
    [zip_path, *_] = bundled_zip()
    show = ["-c", "import os; print(os.environ.get('PYTHONPATH'))"]
    for given, left in [(f"{zip_path}:/py4j.zip:/repo", "/py4j.zip:/repo"),
                        (f"/a:{zip_path}", "/a"), (zip_path, ""),
                        ("/other/spark/python/lib/pyspark.zip:/a",
                         "/other/spark/python/lib/pyspark.zip:/a")]:
        out = subprocess.run([python, *show], env={**os.environ, "PYTHONPATH": given},
                             capture_output=True, text=True, check=True).stdout
        assert out == left + "\n", given
