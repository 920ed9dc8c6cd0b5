"""The storage benchmark runs end to end and prints one well-formed JSON object.

Only the shape and sanity of the figures are checked: speeds are not asserted (benchmarks are
not timed tests; the machine is shared and noisy).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_quick(tmp_path: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "load.bench_storage", "--quick", "--dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def positive_rate(figures: dict, with_msgs: bool = True) -> None:
    assert figures["seconds"] > 0 and figures["bytes"] > 0 and figures["MBps"] > 0
    if with_msgs:
        assert figures["msgs"] > 0 and figures["msgs_per_s"] > 0


def test_quick_run_reports_every_figure(tmp_path):
    out = run_quick(tmp_path)
    for label in ("1k", "100b"):
        for step in ("encode_batch", "parse_batch", "decode_frames"):
            positive_rate(out["codec"][label][step])
        for case in ("async", "sync", "sync_8threads"):
            positive_rate(out["append"][f"{case}_{label}"])
    positive_rate(out["append"]["disk_write_ceiling"], with_msgs=False)
    positive_rate(out["read"]["cache_1k"])
    positive_rate(out["read"]["cache_100b"])
    positive_rate(out["read"]["cold_1k"])
    positive_rate(out["read"]["disk_read_ceiling"], with_msgs=False)
    assert out["read"]["cache_1k"]["served_from_cache"] is True
    assert out["read"]["cache_100b"]["served_from_cache"] is True
    for key in ("disk_write_ceiling_MBps", "append_ratio_to_disk", "sync_8threads_ratio_to_async",
                "disk_read_ceiling_MBps", "cold_read_ratio_to_disk"):
        assert out[key] > 0, key
    assert set(out["targets"]) == {"append_1k_async_vs_disk", "append_100b_msgs_per_s",
                                   "sync_8threads_vs_async", "cold_read_vs_disk_read"}
    for figures in out["targets"].values():
        assert isinstance(figures["ok"], bool) and figures["value"] > 0


def test_quick_run_reads_back_everything_and_cleans_up(tmp_path):
    out = run_quick(tmp_path)
    cold = out["read"]["cold_1k"]
    assert cold["msgs"] > 0 and cold["msgs"] % out["config"]["batch_records"] == 0
    assert list(tmp_path.iterdir()) == []  # the scratch directory is removed
