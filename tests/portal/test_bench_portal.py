"""load/bench_portal.py in quick mode, so the benchmark keeps working: every page answers 200
on a small filled cluster and the report has a figure for each (no timing is asserted)."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

import pytest

from load.bench_portal import pages, run
from tests.integration.test_consumer_common import wait_for

pytestmark = pytest.mark.slow


def test_the_portal_benchmark_measures_every_page():
    result = run(topics=5, groups=3, big_gb=0.002, repeats=1)
    assert set(result["pages"]) == set(pages(5, 3))
    assert result["cluster"]["big_records"] == int(0.002 * (1 << 30)) // 1024
    for figures in result["pages"].values():
        assert 0 < figures["p50_ms"] <= figures["max_ms"]


def _children(pid: int) -> set[int]:
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.add(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return out


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
def test_sigterm_stops_the_benchmarks_cluster(tmp_path):
    """A benchmark stopped with a plain kill stops, by PID, the processes it started."""
    bench = subprocess.Popen([sys.executable, "-m", "load.bench_portal", "--topics", "2",
                              "--groups", "1", "--big-gb", "0.001", "--repeats", "100000"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env={**os.environ, "TMPDIR": str(tmp_path)})
    started: set[int] = set()
    try:
        wait_for(lambda: len(started.update(_children(bench.pid)) or started) >= 3, 60,
                 "the benchmark's master, broker and portal")
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(60) == 128 + signal.SIGTERM
        assert all(not os.path.exists(f"/proc/{pid}") for pid in started), started
        assert not any(tmp_path.iterdir()), "its temp dir is removed"
    finally:
        for pid in started | {bench.pid}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        bench.wait(10)
