"""load/warm_memory touches the memory it is given and reports the cost per page; bad sizes
are refused with the rule. Costs are not asserted against anything: not a timed test."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from load.warm_memory import PAGE, warm

ROOT = Path(__file__).resolve().parents[2]


def test_warm_touches_every_page_and_reports_both_passes():
    out = warm(3 * PAGE * 1000 + PAGE)  # not a whole number of chunks either
    assert out["pages"] == 3001
    assert out["first_pass_us_per_page"] > 0 and out["second_pass_us_per_page"] > 0
    assert out["first_vs_second"] == round(out["first_pass_us_per_page"]
                                           / out["second_pass_us_per_page"], 2)


def test_the_command_prints_json_and_refuses_bad_sizes():
    ok = subprocess.run([sys.executable, "-m", "load.warm_memory", "--gib", "0.01"], cwd=ROOT,
                        capture_output=True, text=True, timeout=120, check=False)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["gib"] == 0.01
    for bad, says in (("0", "--gib must be > 0"), ("100000", "is more than the")):
        proc = subprocess.run([sys.executable, "-m", "load.warm_memory", "--gib", bad], cwd=ROOT,
                              capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 2 and says in proc.stderr, proc.stderr
