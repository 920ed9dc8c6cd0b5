"""load/cpu_profile.py: a command's CPU, sorted into kinds of process."""
from __future__ import annotations

import sys
import time

from load.cpu_profile import kind_of, processes, profile, start_hogs


def test_command_lines_are_sorted_into_kinds():
    assert kind_of("/usr/bin/java -cp x org.apache.spark.deploy.SparkSubmit pyspark-shell") \
        == "spark_jvm"
    assert kind_of("python -m spark_sink.daemon pyspark.worker") == "spark_python"
    assert kind_of("python -m pyspark.sql.streaming.python_streaming_source_runner") \
        == "spark_python"
    assert kind_of("python -m broker --data-dir d --broker-id 1") == "broker"
    assert kind_of("python -m master --data-dir d") == "master"
    assert kind_of("python -m pytest -n 3") == "tests"
    assert kind_of("sleep 1") == "other"
    assert kind_of("python -c while True: pass") == "hog"


def test_a_busy_command_is_counted_with_its_status():
    burn = "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass"
    result = profile([sys.executable, "-c", burn + "\nraise SystemExit(3)"], interval=0.1)
    assert result["returncode"] == 3
    assert result["by_kind_s"]["other"] >= 0.4
    assert result["machine_busy_s"] >= 0.4


def test_hogs_keep_cores_busy_until_killed():
    hogs = start_hogs(1)
    try:
        deadline = time.monotonic() + 60  # a busy machine gives it a slice of a core only
        while processes()[hogs[0].pid][0] < 0.3:
            assert time.monotonic() < deadline, "the hog burnt no CPU"
            time.sleep(0.05)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert hogs[0].pid not in processes()
