"""Our processes load numpy with one OpenBLAS thread: its per-core threads spin for ~0.1 s of
CPU at every start (a broker start cost 0.38 s of CPU, 0.28 with one), and nothing of ours
multiplies matrices."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = ("import {module}, os, sys; import numpy; "
         "print(os.environ.get('OPENBLAS_NUM_THREADS'), len(os.listdir('/proc/self/task')))")


def _probe(module: str, **env: str) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", PROBE.format(module=module)], env={**clean, **env},
                         capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.split()


@pytest.mark.parametrize("module", ["broker.server", "master", "portal_web", "lib.cli"])
def test_an_entry_point_loads_numpy_with_one_blas_thread(module):
    setting, threads = _probe(module)
    assert setting == "1"
    assert int(threads) == 1  # the main thread only: no OpenBLAS worker spinning


def test_a_users_own_blas_setting_wins():
    assert _probe("broker.server", OPENBLAS_NUM_THREADS="3")[0] == "3"
