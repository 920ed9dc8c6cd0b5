"""What a burst into a store costs the broker's storage, one store against many, without gRPC.

    .venv/bin/python -m load.bench_store_bursts [--stores 1,2000] [--bursts 2000] [--rounds 3]

The many-topics case (load/bench_many_topics.py) is broker-bound, and its broker time mixes
gRPC, heartbeats and storage. This isolates storage: a TopicManager on a temp dir (the
broker's own: shared checkpoint file, flusher pool, descriptor cap), ``--bursts`` batches of
200 records of 1 KiB appended round robin over ``--stores`` one-partition async topics, then
every store flushed. Per burst: the appending thread's CPU, the process's user and kernel CPU
(the flusher pool's writes, fsyncs and file creation are the kernel part), the whole machine's
busy CPU (the kernel's writeback threads too: a syncfs does its work there) and the wall time;
each figure as a ratio to the first store count's, medians of ``--rounds``. ``--idempotent``
sends the batches as the default producer does (a producer id and sequence: every store then
keeps a producer snapshot). Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECORDS, SIZE = 200, 1024


def machine_busy_s() -> float:
    """CPU seconds every CPU of the machine spent busy so far (/proc/stat: all but idle and
    iowait)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def one_round(stores: int, bursts: int, idempotent: bool) -> dict[str, float]:
    sys.path.insert(0, str(ROOT))
    from broker.topics import TopicManager, TopicSpec
    from lib.records import Record, encode_batch
    from storage.config import StoreConfig

    root = tempfile.mkdtemp(prefix="tubeq-bench-bursts-")
    manager = TopicManager(root, StoreConfig(durability="async"))
    try:
        specs = {f"b{i:05d}": TopicSpec(partitions=1, topic_id=i + 1) for i in range(stores)}
        manager.apply(specs, [(name, 0) for name in specs])
        value, now_ms = os.urandom(SIZE), int(time.time() * 1e3)
        records = [Record(value, timestamp=now_ms) for _ in range(RECORDS)]
        batches = [encode_batch(records, producer_id=1, producer_epoch=0,
                                base_sequence=k * RECORDS) if idempotent
                   else encode_batch(records) for k in range(-(-bursts // stores))]
        names = list(specs)
        before, thread0, wall0 = resource.getrusage(resource.RUSAGE_SELF), \
            time.thread_time(), time.perf_counter()
        machine0 = machine_busy_s()
        for i in range(bursts):
            store = manager.store_for(names[i % stores], 0)
            store.append_batch(0, store.parse(batches[i // stores]), True)
        thread_s = time.thread_time() - thread0
        for name in names:
            manager.store_for(name, 0).flush()
        wall_s = time.perf_counter() - wall0
        after = resource.getrusage(resource.RUSAGE_SELF)
        machine_s = machine_busy_s() - machine0
    finally:
        manager.close()
        shutil.rmtree(root, ignore_errors=True)
    per = 1e3 / bursts
    return {"append_thread_ms": thread_s * per,
            "user_ms": (after.ru_utime - before.ru_utime) * per,
            "kernel_ms": (after.ru_stime - before.ru_stime) * per,
            "machine_ms": machine_s * per,
            "wall_ms": wall_s * per}


def run(counts: list[int], bursts: int, rounds: int, idempotent: bool = False
        ) -> dict[str, Any]:
    rows = []
    for _ in range(rounds):  # interleaved: each round measures every count
        rows.append({n: one_round(n, bursts, idempotent) for n in counts})
    out = []
    for n in counts:
        med = {k: round(statistics.median(r[n][k] for r in rows), 3) for k in rows[0][n]}
        out.append({"stores": n, **{f"{k}_per_burst": v for k, v in med.items()}})
    first = out[0]
    for row in out:
        cpu = row["user_ms_per_burst"] + row["kernel_ms_per_burst"]
        row["cpu_vs_first"] = round(cpu / (first["user_ms_per_burst"]
                                           + first["kernel_ms_per_burst"]), 2)
    return {"setup": f"{bursts} bursts of {RECORDS} x {SIZE} B per store count, round robin, "
                     f"async one-partition topics, {os.cpu_count()} CPUs; medians of {rounds}"
                     + ("; idempotent batches" if idempotent else ""),
            "results": out}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m load.bench_store_bursts", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stores", default="1,2000", help="store counts, the first the reference")
    p.add_argument("--bursts", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--idempotent", action="store_true",
                   help="batches with a producer id and sequences, as the default producer's")
    args = p.parse_args(argv)
    try:
        counts = [int(x) for x in args.stores.split(",")]
    except ValueError:
        p.error(f"--stores takes counts separated by commas, got {args.stores!r}")
    if not counts or min(counts) < 1 or args.bursts < 1 or args.rounds < 1:
        p.error("--stores, --bursts and --rounds must be >= 1")
    print(json.dumps(run(counts, args.bursts, args.rounds, args.idempotent), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
