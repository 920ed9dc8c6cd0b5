"""lib.process.StopSignals: how every server's main thread waits for SIGTERM/SIGINT.

A broker whose handler set the Event its main thread waited on hung for good when the signal
came while that thread held the Event's lock (a pause, then SIGTERM, in CI): the handler now
does nothing, and the signal's byte wakes the main thread's select."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import signal, sys, threading
from lib.process import StopSignals
mode, step = sys.argv[1], float(sys.argv[2])
signals = StopSignals()
stopped = threading.Event()
if mode == "stopped":
    threading.Timer(0.2, stopped.set).start()
if mode == "other-thread":
    def kill_from_here():
        sys.stdin.readline()
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
    threading.Thread(target=kill_from_here, daemon=True).start()
if mode == "early":
    print("armed", flush=True)
    sys.stdin.readline()
while True:
    print("waiting", flush=True)
    print(signals.wait(stopped, step), flush=True)
    if mode != "rounds":
        break
if mode == "after":
    sys.stdin.readline()
    print("still here", flush=True)
"""


@pytest.fixture
def child():
    started: list[subprocess.Popen] = []

    def start(mode: str, step_s: float = 0.5) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", CHILD, mode, str(step_s)], cwd=ROOT,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def line(proc: subprocess.Popen, timeout: float = 20.0) -> str:
    """The child's next line, failing (not hanging) if none comes in time."""
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    assert got, f"no line from the child within {timeout} s"
    return got[0].strip()


def test_sigterm_and_sigint_are_returned_round_after_round_through_pauses(child):
    proc = child("rounds", step_s=0.001)  # the main thread busy in its loop, as it can be
    for i in range(40):
        assert line(proc) == "waiting"
        if i % 2:
            os.kill(proc.pid, signal.SIGSTOP)
            os.kill(proc.pid, signal.SIGCONT)
        sig = signal.SIGTERM if i % 3 else signal.SIGINT
        os.kill(proc.pid, sig)
        assert line(proc) == str(int(sig))


def test_a_signal_taken_by_another_thread_wakes_the_main_thread_at_once(child):
    proc = child("other-thread", step_s=600)  # no polling: only the signal's byte wakes it
    assert line(proc) == "waiting"
    proc.stdin.write("go\n")
    proc.stdin.flush()
    assert line(proc) == str(int(signal.SIGTERM))
    assert proc.wait(20) == 0


def test_a_server_stopped_from_inside_ends_the_wait_without_a_signal(child):
    proc = child("stopped", step_s=0.05)
    assert line(proc) == "waiting"
    assert line(proc) == "None"
    assert proc.wait(20) == 0


def test_signals_during_the_stop_that_follows_are_ignored(child):
    proc = child("after")
    assert line(proc) == "waiting"
    proc.send_signal(signal.SIGTERM)
    assert line(proc) == str(int(signal.SIGTERM))
    proc.send_signal(signal.SIGTERM)  # an impatient operator while the server flushes
    proc.send_signal(signal.SIGINT)
    proc.stdin.write("go\n")
    proc.stdin.flush()
    assert line(proc) == "still here"
    assert proc.wait(20) == 0


def test_a_signal_sent_before_the_wait_is_kept(child):
    proc = child("early")  # as one sent while a server starts, before it is ready
    assert line(proc) == "armed"
    proc.send_signal(signal.SIGTERM)
    proc.stdin.write("go\n")
    proc.stdin.flush()
    assert line(proc) == "waiting"
    assert line(proc) == str(int(signal.SIGTERM))
    assert proc.wait(20) == 0
