"""load/bench_security runs end to end (three real clusters: auth off, token auth, token auth
over TLS) and prints one well-formed JSON object. Speeds are not asserted: benchmarks are not
timed tests."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from load.bench_security import FIGURES, median, ratios

ROOT = Path(__file__).resolve().parents[2]
SETUPS = {"none", "token", "tls"}


def test_a_tiny_run_moves_every_record_on_every_setup_and_reports_the_ratios():
    proc = subprocess.run([sys.executable, "-m", "load.bench_security", "--count", "2000",
                           "--rounds", "1", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert set(out["figures"]) == set(out["rounds"]) == set(out["setups"]) == SETUPS
    for name in SETUPS:
        assert set(out["figures"][name]) == set(FIGURES)
        assert all(v > 0 for v in out["figures"][name].values())
        [only] = out["rounds"][name]
        assert only["records_produced"] == only["records_consumed"] == 2001  # + the warm-up
    for op in ("produce", "consume"):
        assert set(out["ratios"][op]) == {"token_vs_none", "tls_vs_none"}
        assert all(r > 0 for r in out["ratios"][op].values())
        assert out["met"][op] == (out["ratios"][op]["tls_vs_none"] >= 0.8)


def test_the_median_round_counts_and_the_ratios_are_to_auth_none():
    rounds = [{k: v for k in FIGURES} for v in (10, 40, 20)]
    assert median(rounds) == dict.fromkeys(FIGURES, 20)
    figures = {"none": dict.fromkeys(FIGURES, 100), "token": dict.fromkeys(FIGURES, 90),
               "tls": dict.fromkeys(FIGURES, 80)}
    assert ratios(figures) == {op: {"token_vs_none": 0.9, "tls_vs_none": 0.8}
                               for op in ("produce", "consume")}
