"""lib.process.end_group: waiting for the children a parent forked and left behind (Locust's
--processes workers still saving their ledgers after the Locust master exited)."""
from __future__ import annotations

import subprocess
import sys
import time

from lib.process import end_group, group_pids

# The parent forks a child and exits at once; the child writes a file once the release file
# exists (the test decides when: a busy machine cannot end it early) or after 60 s.
PARENT = """
import os, sys, time
if os.fork() == 0:
    deadline = time.monotonic() + 60
    while not os.path.exists(sys.argv[2]) and time.monotonic() < deadline:
        time.sleep(0.01)
    open(sys.argv[1], "w").write("done")
    os._exit(0)
"""


def _start(path, release) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", PARENT, str(path), str(release)],
                            start_new_session=True)
    proc.wait(10)
    return proc


def test_end_group_waits_for_a_child_that_outlives_its_parent(tmp_path):
    release = tmp_path / "release"
    proc = _start(tmp_path / "out", release)
    assert group_pids(proc.pid), "the child should still be running"
    release.touch()
    assert end_group(proc.pid, timeout=30)
    assert (tmp_path / "out").read_text() == "done"
    assert group_pids(proc.pid) == []


def test_end_group_kills_what_is_left_at_the_timeout(tmp_path):
    proc = _start(tmp_path / "out", tmp_path / "never")
    started = time.monotonic()
    assert not end_group(proc.pid, timeout=0.5)
    deadline = time.monotonic() + 10
    while group_pids(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert group_pids(proc.pid) == [] and time.monotonic() - started < 10
    assert not (tmp_path / "out").exists()
