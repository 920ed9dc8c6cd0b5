"""lib/memory.py: freed batch buffers are reused, not faulted in afresh, also by another thread
(in a subprocess: the settings are process-wide)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PATTERN = """
import json, resource
from lib.memory import keep_freed_memory
tuned = keep_freed_memory()
piece = b"x" * 1024
def cycle():  # the producer's pattern: a batch grown record by record, then one join
    buf = bytearray()
    for _ in range(512):
        buf += piece
    return b"".join((b"head", buf))
for _ in range(5):
    cycle()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    cycle()
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 50
print(json.dumps({"tuned": tuned, "faults": faults}))
"""


def run(keep: str) -> dict:
    env = dict(os.environ, TUBEQ_KEEP_FREED_MEMORY=keep)
    out = subprocess.run([sys.executable, "-c", PATTERN], env=env, capture_output=True,
                         text=True, timeout=60, check=True, cwd=os.getcwd())
    return json.loads(out.stdout)


def test_a_batch_of_512_kib_built_again_and_again_touches_no_fresh_page():
    tuned = run("1")
    if not tuned["tuned"]:
        pytest.skip("no glibc mallopt here: the allocator is left alone")
    # Untuned glibc faulted in ~225 pages per cycle (a fresh mapping per buffer).
    assert tuned["faults"] < 5, tuned


def test_the_environment_switch_leaves_the_allocator_alone():
    assert run("0")["tuned"] is False


ARENAS = """
import json, resource, sys, threading
from lib.memory import keep_freed_memory, share_one_arena
shared = share_one_arena()
keep_freed_memory()
def churn():  # a gRPC thread's pattern: a request's buffer made, then freed
    for _ in range(10):
        buf = b"x" * (2 << 20)
        del buf
first = threading.Thread(target=churn)
first.start(); first.join()
out = {}
def measure():  # another thread (the event loop's) then makes buffers of the same size
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    churn()
    out["faults"] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
second = threading.Thread(target=measure)
second.start(); second.join()
print(json.dumps({"shared": shared, **out}))
"""


def run_arenas(**env: str) -> dict:
    base = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    out = subprocess.run([sys.executable, "-c", ARENAS], env={**base, **env},
                         capture_output=True, text=True, timeout=60, check=True,
                         cwd=os.getcwd())
    return json.loads(out.stdout)


def test_one_arena_lets_a_thread_reuse_what_another_freed():
    shared = run_arenas()
    if not shared["shared"]:
        pytest.skip("no glibc mallopt here: the allocator is left alone")
    # With an arena per thread the second thread faulted in 512 fresh pages of 4 KiB.
    assert shared["faults"] < 64, shared


def test_an_operators_arena_setting_or_the_switch_leaves_the_arenas_alone():
    assert run_arenas(MALLOC_ARENA_MAX="4")["shared"] is False
    assert run_arenas(TUBEQ_KEEP_FREED_MEMORY="0")["shared"] is False
