"""load.run.locust_processes: the soak charts Locust's master and its forked workers, never a
short-lived helper of the same process group (CI once charted one as a worker, and the soak
test's set of processes came out wrong)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from load.run import locust_processes

LEADER = """
import os, subprocess, sys, time
helper = subprocess.Popen(["sleep", "60"])
worker = os.fork()
if worker == 0:
    time.sleep(60)
    os._exit(0)
print(worker, helper.pid, flush=True)
time.sleep(60)
"""


@pytest.fixture
def group():
    leader = subprocess.Popen([sys.executable, "-c", LEADER], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        yield leader
    finally:
        os.killpg(leader.pid, signal.SIGKILL)  # the group the leader's PID names
        leader.wait(30)
        leader.stdout.close()


def test_the_master_and_its_forked_workers_are_charted_a_helper_is_not(group):
    worker, helper = map(int, group.stdout.readline().split())
    deadline = time.monotonic() + 30
    while True:  # both are up before the leader prints; a deadline all the same
        names = {w.name: w.pid for w in locust_processes(group.pid, workers=True)}
        if len(names) == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert names == {"locust": group.pid, f"locust-worker-{worker}": worker}
    assert helper not in names.values()
    assert all(not w.judged for w in locust_processes(group.pid, workers=True))


def test_without_workers_asked_for_a_fork_of_the_master_is_not_charted(group):
    worker, _helper = map(int, group.stdout.readline().split())
    assert os.path.exists(f"/proc/{worker}"), "a fork with the master's command line is up"
    assert [(w.name, w.pid) for w in locust_processes(group.pid, workers=False)] == [
        ("locust", group.pid)]
