"""Locust's figures beside ``tubeq bench``'s at the same offered load, in one run.

    .venv/bin/python -m load.bench_locust [--rate 10000] [--seconds 30] [--size 1024]
                                          [--rounds 2] [--masters HOST:PORT,...]

An operator reads Locust's report, so its figures must mean what ``tubeq bench`` means. Two
pairs, interleaved round by round on the same cluster (its own 1 master and 1 broker on
127.0.0.1 unless ``--masters`` names one):

- **throughput at a steady rate**: ``tubeq bench produce --rate R`` (one process, one
  producer) against the produce scenario of ``tubeq load run`` with the same total rate over
  its users; Locust's side is its own request rate times the messages per request.
- **send_sync latency**: ``tubeq bench latency`` (one ``send_sync`` at a time) against one
  Locust user doing ``--sync-sends`` as fast as it goes; the means are compared (Locust's
  percentiles are whole milliseconds below 100 ms, too coarse for a sub-millisecond call).

Prints one JSON object: every figure per round, the medians and the Locust/bench ratios.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from lib.admin import AdminClient
from load import stop_on_sigterm
from load.bench_cluster import tubeq_bench
from load.run import LoadPlan
from load.run import run as load_run

USERS = 4  # Locust producer users sharing the offered rate
BATCH = 100  # messages per Locust request


def make_topics(masters: str, prefix: str) -> tuple[str, str]:
    """A 6-partition topic for the steady rate, a 1-partition one for send_sync."""
    steady, single = f"{prefix}-steady", f"{prefix}-sync"
    with AdminClient(masters) as admin:
        admin.create_topic(steady, partitions=6, durability="async")
        admin.create_topic(single, partitions=1, durability="async")
    return steady, single


def locust(masters: str, out: Path, topic: str, seconds: int, options: list[str],
           users: int) -> dict:
    plan = LoadPlan(scenario="produce", masters=masters, users=users, spawn_rate=users,
                    duration=f"{seconds}s", topic=topic, durability="async", out=out,
                    options=tuple(options))
    summary, folder = load_run(plan)
    if not summary["ok"]:
        raise RuntimeError(f"Locust run failed, see {folder}/summary.json")
    return summary


def steady_pair(masters: str, out: Path, topic: str, rate: int, seconds: int,
                size: int) -> dict:
    bench = tubeq_bench(masters, "produce", "--topic", topic, "--size", str(size),
                        "--messages", str(rate * seconds), "--rate", str(rate))["produce"]
    summary = locust(masters, out, topic, seconds,
                     ["--message-bytes", str(size), "--rate", str(rate / USERS),
                      "--batch", str(BATCH), "--linger-ms", "5"], USERS)
    figures = summary["locust"][f"send x{BATCH}"]
    locust_rate = figures["rps"] * BATCH
    return {"offered_msgs_per_s": rate,
            "bench_msgs_per_s": bench["msgs_per_s"], "bench_failures": bench["failures"],
            "locust_msgs_per_s": round(locust_rate),
            "locust_acknowledged": summary["accounting"]["acknowledged"],
            "locust_failures": figures["failures"],
            "bench_ack_p99_ms": bench["ack_latency"]["p99_ms"],
            "locust_batch_p99_ms": figures["p99_ms"],
            "ratio": round(locust_rate / bench["msgs_per_s"], 3)}


def sync_pair(masters: str, out: Path, topic: str, seconds: int, size: int) -> dict:
    bench = tubeq_bench(masters, "latency", "--topic", topic, "--partitions", "1",
                        "--size", str(size), "--messages", "5000")["latency"]["send_sync"]
    summary = locust(masters, out, topic, seconds,
                     ["--message-bytes", str(size), "--sync-sends"], 1)
    figures = summary["locust"]["send_sync"]
    return {"bench_mean_ms": bench["mean_ms"], "bench_p99_ms": bench["p99_ms"],
            "locust_mean_ms": figures["avg_ms"], "locust_p99_ms": figures["p99_ms"],
            "locust_calls": figures["requests"],
            "ratio": round(figures["avg_ms"] / bench["mean_ms"], 3)}


def median_ratio(rounds: list[dict], key: str) -> float:
    return round(statistics.median(r[key]["ratio"] for r in rounds), 3)


def run(masters: str | None, rate: int, seconds: int, size: int, rounds: int) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.cluster import Cluster  # the same process handling the tests use

    root = Path(tempfile.mkdtemp(prefix="tubeq-bench-locust-"))
    cluster = None
    try:
        if masters is None:
            cluster = Cluster(root / "c")
            cluster.start(brokers=1)
            cluster.use_admin_env()  # auth is on: clients log in as the admin
            masters = cluster.master_addresses
        results = []
        for n in range(rounds):
            steady, single = make_topics(masters, f"bench-locust-{os.getpid()}-{n}")
            results.append({"steady": steady_pair(masters, root / "runs", steady, rate,
                                                  seconds, size),
                            "send_sync": sync_pair(masters, root / "runs", single, seconds,
                                                   size)})
    finally:
        if cluster is not None:
            cluster.stop_all()
        shutil.rmtree(root, ignore_errors=True)  # the cluster's data, the Locust run folders
    return {
        "setup": f"{'own 1 master, 1 broker' if cluster else masters}; async topics; "
                 f"{size} B values; Locust: {USERS} producer users x {BATCH} per request "
                 f"for the rate, 1 send_sync user; {os.cpu_count()} CPUs",
        "rounds": results,
        "locust_vs_bench": {"msgs_per_s_at_rate": median_ratio(results, "steady"),
                            "send_sync_mean": median_ratio(results, "send_sync")},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m load.bench_locust", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--masters", default=None,
                   help="a running cluster (default: one of the benchmark's own)")
    p.add_argument("--rate", type=int, default=10_000, help="offered msgs/s, both sides")
    p.add_argument("--seconds", type=int, default=30, help="per measurement")
    p.add_argument("--size", type=int, default=1024, help="value bytes (>= 28)")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    if args.rate < USERS or args.seconds < 1 or args.size < 28 or args.rounds < 1:
        p.error(f"--rate must be >= {USERS}, --seconds >= 1, --size >= 28 (the loss-"
                "accounting stamp) and --rounds >= 1")
    stop_on_sigterm()
    print(json.dumps(run(args.masters, args.rate, args.seconds, args.size, args.rounds),
                     indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
