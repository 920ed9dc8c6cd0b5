"""load/bench_many_topics runs end to end (real master and broker processes) and prints one
well-formed JSON object. Throughput is not asserted: benchmarks are not timed tests."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_quick_run_reports_every_topic_count_with_the_broker_figures(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "load.bench_many_topics", "--quick",
                           "--flusher-threads", "12", "--durability", "sync",
                           "--broker-setting", "held_write_bytes=0",
                           "--broker-setting", "store.page_cache_shared_bytes=0",
                           "--same-batches", "3"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert [p["topics"] for p in out["phases"]] == [1, 5]
    assert out["failures"] == 0
    for phase in out["phases"]:
        assert phase["messages"] == 5000 and phase["failures"] == 0, phase
        assert phase["msgs_per_s"] > 0 and phase["broker_rss_mib"] > 0, phase
        # where the machine's CPU went: the producer is this benchmark's own process
        assert phase["producer_cpu_s"] > 0 and phase["machine_cpu_s"] >= phase["broker_cpu_s"]
        assert set(phase["us_per_record"]) == {"broker", "producer", "master", "machine"}
        assert phase["unwritten_peak_mib"] >= 0 and phase["unwritten_waits"] >= 0, phase
        # the broker's full collections are timed (lib/gc_freeze.py): a figure, not None
        assert phase["broker_gc_full_s"] >= 0 and phase["broker_gc_longest_full_s"] >= 0, phase
        assert phase["broker_threads"] > 25, "12 flushers, not the default 4 (21 threads)"
    assert out["flusher_threads"] == 12 and "sync topics" in out["setup"]
    assert out["broker_settings"] == {"held_write_bytes": 0, "store.page_cache_shared_bytes": 0,
                                      "flusher_threads": 12}
    # Four topics more, of one partition each: the broker holds their data logs and index
    # files (counted among its descriptors on data files: its sockets come and go; once all
    # its descriptors were counted, and one phase read 21 and the next 21 too).
    first, second = out["phases"]
    assert second["broker_data_fds"] >= first["broker_data_fds"] + 8, out
    assert second["broker_open_fds"] >= second["broker_data_fds"] > 0
    assert out["phases"][0]["vs_first"] == 1.0
    # the ceiling of the last phase: one topic of 3 partitions in batches of its run's size
    same = out["same_batches"]
    assert (same["topics"], same["partitions"], same["messages"]) == (1, 3, 5000), same
    assert same["batch_records"] == second["run"] == 500 and same["failures"] == 0, same
    assert same["msgs_per_s"] > 0 and set(same["us_per_record"]) == {
        "broker", "producer", "master", "machine"}
    assert second["vs_same_batches"] == round(second["msgs_per_s"] / same["msgs_per_s"], 2)
    assert not list(tmp_path.iterdir())  # the cluster's files are gone with it


def test_bad_topic_counts_are_refused_with_the_rule():
    proc = subprocess.run([sys.executable, "-m", "load.bench_many_topics", "--topics", "100,1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "--topics must be ascending counts >= 1" in proc.stderr


def test_store_settings_go_to_the_brokers_store_table():
    from load.bench_many_topics import broker_toml

    text = broker_toml({"held_write_bytes": 0, "store.page_cache_shared_bytes": 5})
    assert tomllib.loads(text) == {"broker": {"held_write_bytes": 0,
                                              "store": {"page_cache_shared_bytes": 5}}}
