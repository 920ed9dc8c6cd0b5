"""Cluster throughput and latency against the targets, in one run, with the machine's ceilings.

    .venv/bin/python -m load.bench_cluster [--scale 1.0] [--rounds 1]

Starts 1 master and 1 broker as real processes on 127.0.0.1 (``tests/cluster.py``, async
topics of 6 partitions), then runs ``tubeq bench`` as separate processes, one client process at
a time, as the targets are stated: produce and consume of 1 KiB and of 100 B values, and
end-to-end latency at a steady 10,000 msgs/s (consumer in its own process), ``send_batch`` of
100 B values (10,000 per call; its ratio to per-record ``send``) and ``send_sync`` latency as a
ratio to a bare gRPC round trip measured interleaved with it. The loopback and
disk ceilings are measured in the same run, so figures from this small, noisy machine can be
read as ratios. Prints one JSON object: every figure, its target and whether it is met (with
``--rounds N`` each case runs N times and the best round counts, as in load/bench_storage).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from lib.cli.bench import ceilings
from load import stop_on_sigterm

TARGETS = {  # msgs/s at least, except the latency (ms at most)
    "produce_1KiB_msgs_per_s": 150_000,
    "consume_1KiB_msgs_per_s": 250_000,
    "produce_100B_msgs_per_s": 300_000,
    "consume_100B_msgs_per_s": 500_000,
    "e2e_p99_ms_at_10k_per_s": 20.0,
    "produce_100B_bulk_msgs_per_s": 1_000_000,  # send_batch, 10,000 values per call
    "send_sync_p50_vs_grpc": 1.3,  # at most: send_sync over a bare gRPC round trip, same run
    "send_sync_p99_vs_grpc": 2.0,
}
LOWER_IS_BETTER = ("_ms_", "_vs_grpc")


def tubeq_bench(masters: str, *args: str) -> dict:
    """One ``tubeq bench`` run in its own process; its JSON result."""
    out = subprocess.run(
        [sys.executable, "-m", "lib.cli", "--masters", masters, "bench", *args, "--json",
         "--no-ceilings"], check=True, capture_output=True, stdin=subprocess.DEVNULL,
        timeout=900)
    return json.loads(out.stdout)


def one_round(masters: str, scale: float, n: int) -> dict[str, float]:
    k1, k100, e2e = int(600_000 * scale), int(1_500_000 * scale), int(100_000 * scale)
    got: dict[str, float] = {}
    for size, count, label in ((1024, k1, "1KiB"), (100, k100, "100B")):
        topic = f"bench-{label}-{n}"
        produced = tubeq_bench(masters, "produce", "--topic", topic, "--size", str(size),
                               "--messages", str(count))["produce"]
        if produced["failures"]:
            raise RuntimeError(f"produce {label}: {produced['failures']} failures")
        consumed = tubeq_bench(masters, "consume", "--topic", topic, "--messages",
                               str(count))["consume"]
        if not consumed["complete"]:
            raise RuntimeError(f"consume {label}: {consumed['messages']} of {count}")
        got[f"produce_{label}_msgs_per_s"] = produced["msgs_per_s"]
        got[f"produce_{label}_MBps"] = produced["MBps"]
        got[f"consume_{label}_msgs_per_s"] = consumed["msgs_per_s"]
        got[f"consume_{label}_MBps"] = consumed["MBps"]
    result = tubeq_bench(masters, "e2e", "--topic", f"bench-e2e-{n}", "--messages", str(e2e),
                         "--rate", "10000")
    if result["consume"]["messages"] < e2e:
        raise RuntimeError(f"e2e: {result['consume']['messages']} of {e2e} received")
    got["e2e_p99_ms_at_10k_per_s"] = result["consume"]["e2e_latency"]["p99_ms"]
    got["e2e_p50_ms_at_10k_per_s"] = result["consume"]["e2e_latency"]["p50_ms"]
    got["e2e_max_ms_at_10k_per_s"] = result["consume"]["e2e_latency"]["max_ms"]
    bulk = tubeq_bench(masters, "produce", "--topic", f"bench-bulk-{n}", "--size", "100",
                       "--messages", str(k100), "--bulk", "10000")["produce"]
    got["produce_100B_bulk_msgs_per_s"] = bulk["msgs_per_s"]
    got["bulk_vs_send_100B"] = round(bulk["msgs_per_s"] / got["produce_100B_msgs_per_s"], 2)
    latency = tubeq_bench(masters, "latency", "--topic", f"bench-lat-{n}", "--partitions", "1",
                          "--messages", str(max(200, int(5000 * scale))))["latency"]
    got["send_sync_p50_ms"] = latency["send_sync"]["p50_ms"]
    got["send_sync_p99_ms"] = latency["send_sync"]["p99_ms"]
    got["send_sync_p50_vs_grpc"] = latency["ratio"]["p50_ms"]
    got["send_sync_p99_vs_grpc"] = latency["ratio"]["p99_ms"]
    return got


def best(rounds: list[dict[str, float]]) -> dict[str, float]:
    """Per figure the best round (lowest for latencies, highest otherwise)."""
    pick = {k: (min if any(m in k for m in LOWER_IS_BETTER) else max) for k in rounds[0]}
    return {k: pick[k](r[k] for r in rounds) for k in rounds[0]}


def run(scale: float, rounds: int) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.cluster import Cluster  # the same process handling the tests use

    root = Path(tempfile.mkdtemp(prefix="tubeq-bench-cluster-"))
    cluster = Cluster(root / "c")
    try:
        cluster.start(brokers=1)
        cluster.use_admin_env()  # auth is on: clients log in as the admin
        masters = cluster.master_addresses
        all_rounds = [one_round(masters, scale, n) for n in range(rounds)]
        figures = best(all_rounds)
        ceiling = ceilings(str(root / "c"))
    finally:
        cluster.stop_all()
        shutil.rmtree(root, ignore_errors=True)  # its data dirs are the benchmark's alone
    checks = {k: (figures[k] <= t if any(m in k for m in LOWER_IS_BETTER) else figures[k] >= t)
              for k, t in TARGETS.items()}
    return {
        "setup": "1 master, 1 broker, async topics of 6 partitions, one client process at a "
                 f"time, {os.cpu_count()} CPUs",
        "figures": figures,
        "rounds": all_rounds,
        "targets": TARGETS,
        "met": checks,
        "all_met": all(checks.values()),
        "ceilings": ceiling,
        "ratios": {
            "produce_1KiB_of_loopback": round(figures["produce_1KiB_MBps"]
                                              / ceiling["loopback_MBps"], 3),
            "consume_1KiB_of_loopback": round(figures["consume_1KiB_MBps"]
                                              / ceiling["loopback_MBps"], 3),
            "produce_1KiB_of_disk": round(figures["produce_1KiB_MBps"]
                                          / ceiling["disk_fsync_1MiB_MBps"], 3),
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m load.bench_cluster", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=1.0,
                   help="multiplies every message count (0.1 for a quick look)")
    p.add_argument("--rounds", type=int, default=1, help="runs per case; the best counts")
    args = p.parse_args(argv)
    stop_on_sigterm()
    if args.scale <= 0 or args.rounds < 1:
        p.error("--scale must be > 0 and --rounds >= 1")
    print(json.dumps(run(args.scale, args.rounds), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
