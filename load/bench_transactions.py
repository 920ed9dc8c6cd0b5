"""What exactly-once costs, as ratios measured in one run (issue Transactions' speed targets).

    .venv/bin/python -m load.bench_transactions [--messages 300000] [--rounds 3]

Starts 1 master and 1 broker as real processes on 127.0.0.1 (``tests/cluster.py``) and runs
``tubeq bench produce`` of 1 KiB values to async topics of 6 partitions, one client process at
a time, the cases interleaved round by round (this machine is small and noisy: absolute rates
swing between runs, ratios of neighbours much less). Prints one JSON object: each round's
rates, the medians, and the ratios against their targets:

- ``idempotent_vs_plain``: produce with idempotence on (the default) against off: >= 0.95.
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

from load import stop_on_sigterm
from load.bench_cluster import tubeq_bench

TARGETS = {"idempotent_vs_plain": 0.95}


def produce_rate(masters: str, topic: str, messages: int, *flags: str) -> float:
    got = tubeq_bench(masters, "produce", "--topic", topic, "--size", "1024", "--messages",
                      str(messages), *flags)["produce"]
    if got["failures"]:
        raise RuntimeError(f"produce to {topic}: {got['failures']} failures")
    return got["msgs_per_s"]


def run(messages: int, rounds: int) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.cluster import Cluster  # the same process handling the tests use

    root = Path(tempfile.mkdtemp(prefix="tubeq-bench-txn-"))
    cluster = Cluster(root / "c")
    per_round: list[dict[str, float]] = []
    try:
        cluster.start(brokers=1)
        cluster.use_admin_env()  # auth is on: clients log in as the admin
        masters = cluster.master_addresses
        for n in range(rounds):
            cases = [("idempotent", ("--idempotent",)), ("plain", ("--no-idempotent",))]
            if n % 2:
                cases.reverse()  # neither case always runs first
            per_round.append({name: produce_rate(masters, f"txn-{name}-{n}", messages, *flags)
                              for name, flags in cases})
    finally:
        cluster.stop_all()
        shutil.rmtree(root, ignore_errors=True)
    medians = {k: statistics.median(r[k] for r in per_round) for k in per_round[0]}
    ratios = {"idempotent_vs_plain": round(medians["idempotent"] / medians["plain"], 3)}
    return {
        "setup": f"1 master, 1 broker, async topics of 6 partitions, 1 KiB values, {messages} "
                 f"per case, {rounds} rounds interleaved, {os.cpu_count()} CPUs",
        "rounds_msgs_per_s": per_round,
        "medians_msgs_per_s": medians,
        "ratios": ratios,
        "targets": TARGETS,
        "met": {k: ratios[k] >= t for k, t in TARGETS.items()},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m load.bench_transactions", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=300_000, help="records per case and round")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    stop_on_sigterm()
    if args.messages < 1 or args.rounds < 1:
        p.error("--messages and --rounds must be >= 1")
    print(json.dumps(run(args.messages, args.rounds), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
