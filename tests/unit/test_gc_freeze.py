"""lib/gc_freeze.py: slow full collections freeze their survivors, a thaw lets frozen cycles
go, and the figures reach the metrics. Each case runs in a Python of its own: the collector's
callbacks and permanent generation are the whole process's."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(code: str, **env: str) -> dict:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT), **env},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_slow_full_collection_freezes_what_survived_it():
    got = run("""
        import gc, json
        from lib.gc_freeze import FreezeConfig, LongLivedFreezer
        kept = [[i] for i in range(200_000)]
        freezer = LongLivedFreezer(FreezeConfig(slow_s=0.0))
        gc.callbacks.append(freezer)
        gc.collect()
        print(json.dumps({"frozen": gc.get_freeze_count(), "freezes": freezer.freezes,
                          "old_after": len(gc.get_objects(generation=2)),
                          "full": freezer.full_collections, "kept": len(kept)}))
    """)
    assert got["frozen"] >= 200_000 and got["freezes"] == 1 and got["full"] == 1
    assert got["old_after"] < 1_000  # the next full collection visits none of them


def test_a_quick_full_collection_freezes_nothing():
    got = run("""
        import gc, json
        from lib.gc_freeze import FreezeConfig, LongLivedFreezer
        freezer = LongLivedFreezer(FreezeConfig(slow_s=60.0))
        gc.callbacks.append(freezer)
        gc.collect(); gc.collect(1)  # a young collection is not counted
        print(json.dumps({"frozen": gc.get_freeze_count(), "full": freezer.full_collections,
                          "longest": freezer.longest_s}))
    """)
    assert got == {"frozen": 0, "full": 1, "longest": got["longest"]}
    assert 0 < got["longest"] < 60


def test_a_frozen_cycle_is_collected_after_the_thaw():
    got = run("""
        import gc, json, weakref
        from lib.gc_freeze import FreezeConfig, LongLivedFreezer
        now = [0.0]
        freezer = LongLivedFreezer(FreezeConfig(slow_s=0.0, thaw_every_s=100.0),
                                   clock=lambda: now[0])
        gc.callbacks.append(freezer)
        class Node: pass
        node = Node(); node.me = node  # a cycle: only the collector frees it
        alive = weakref.ref(node)
        gc.collect()  # frozen with everything else
        del node
        gc.collect()
        while_frozen = alive() is not None
        now[0] = 100.0
        gc.collect()  # due: thaws instead of freezing
        thawed = gc.get_freeze_count()
        gc.collect()  # sees the cycle again
        print(json.dumps({"while_frozen": while_frozen, "thawed": thawed,
                          "after": alive() is not None, "thaws": freezer.thaws}))
    """)
    assert got == {"while_frozen": True, "thawed": 0, "after": False, "thaws": 1}


def test_the_figures_reach_the_metrics_and_the_switch_turns_freezing_off():
    got = run("""
        import gc, json
        from prometheus_client import generate_latest
        from lib.gc_freeze import FreezeConfig, freeze_long_lived
        from lib.metrics import ProcessMetrics
        first = freeze_long_lived(FreezeConfig(slow_s=0.0))
        again = freeze_long_lived()
        keep = [[i] for i in range(50_000)]
        gc.collect()
        text = generate_latest(ProcessMetrics().registry).decode()
        lines = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
                 if line.startswith("tubeq_gc_")}
        print(json.dumps({"same": first is again, **lines}))
    """)
    assert got["same"] is True
    assert got["tubeq_gc_full_collections_total"] >= 1
    assert got["tubeq_gc_freezes_total"] >= 1 and got["tubeq_gc_thaws_total"] == 0
    assert got["tubeq_gc_full_collection_seconds_total"] >= \
        got["tubeq_gc_longest_full_collection_seconds"] > 0
    off = run("""
        import gc, json
        from lib.gc_freeze import FreezeConfig, freeze_long_lived
        freezer = freeze_long_lived(FreezeConfig(slow_s=0.0))
        keep = [[i] for i in range(50_000)]
        gc.collect()
        print(json.dumps({"frozen": gc.get_freeze_count(), "timed": freezer.full_collections}))
    """, TUBEQ_GC_FREEZE="0")
    assert off == {"frozen": 0, "timed": 1}  # timed, not frozen


def test_no_figures_without_the_freezer():
    got = run("""
        import json
        from prometheus_client import generate_latest
        from lib.metrics import ProcessMetrics
        text = generate_latest(ProcessMetrics().registry).decode()
        print(json.dumps({"gc_lines": [l for l in text.splitlines() if "tubeq_gc_" in l]}))
    """)
    assert got == {"gc_lines": []}
