"""lib/memory.py: freed batch buffers are reused, not faulted in afresh (in a subprocess: the
setting is process-wide)."""
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
