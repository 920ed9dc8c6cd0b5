"""lib.process.end_group: waiting for the children a parent forked and left behind (Locust's
--processes workers still saving their ledgers after the Locust master exited)."""
from __future__ import annotations

import subprocess
import sys
import time

from lib.process import end_group, group_pids

# The parent forks a child and exits at once; the child writes a file after ``delay`` s.
PARENT = """
import os, sys, time
if os.fork() == 0:
    time.sleep(float(sys.argv[2]))
    open(sys.argv[1], "w").write("done")
    os._exit(0)
"""


def _start(path, delay: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", PARENT, str(path), str(delay)],
                            start_new_session=True)
    proc.wait(10)
    return proc


def test_end_group_waits_for_a_child_that_outlives_its_parent(tmp_path):
    proc = _start(tmp_path / "out", 1.0)
    assert group_pids(proc.pid), "the child should still be running"
    assert end_group(proc.pid, timeout=30)
    assert (tmp_path / "out").read_text() == "done"
    assert group_pids(proc.pid) == []


def test_end_group_kills_what_is_left_at_the_timeout(tmp_path):
    proc = _start(tmp_path / "out", 60.0)
    started = time.monotonic()
    assert not end_group(proc.pid, timeout=0.5)
    deadline = time.monotonic() + 10
    while group_pids(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert group_pids(proc.pid) == [] and time.monotonic() - started < 10
    assert not (tmp_path / "out").exists()
