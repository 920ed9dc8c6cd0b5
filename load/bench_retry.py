"""What retries cost a consumer (issue 52's speed target), as a ratio in one run.

    .venv/bin/python -m load.bench_retry [--messages 100000] [--rounds 3] [--size 200]

Starts 1 master and 1 broker as real processes on 127.0.0.1 (``tests/cluster.py``), fills a
topic of 4 partitions once, and reads it from the start with a PushConsumer of a new group
(``retry=True``) per run, the two cases interleaved round by round:

- ``clean``: the handler takes every record;
- ``failing``: it fails 10 % of them (every tenth), which go to the group's retry topic in
  the transactions that commit the offsets, with the policy's backoff.

The rate is original records handled (taken or failed) per second, first to last. Target:
``failing`` >= 0.85 of ``clean``. Prints one JSON object (rounds, medians, the ratio).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from load import stop_on_sigterm

TOPIC = "bench-retry"
PARTITIONS = 4
TARGET = 0.85


def fill(masters: str, messages: int, size: int) -> None:
    from lib import Producer

    with Producer(masters, linger_ms=5) as producer:
        for n in range(messages):
            producer.send(TOPIC, b"%09d" % n + b"x" * max(0, size - 9),
                          partition=n % PARTITIONS)
        producer.flush(300)


def run_once(masters: str, messages: int, failing: bool, group: str) -> dict:
    """One pass over the topic by a new group: records handled per second, and how many
    went to the retry topic."""
    from lib import PushConsumer, RetryPolicy

    lock = threading.Lock()
    seen: set[bytes] = set()
    done = threading.Event()
    first: list[float] = []

    def handler(record) -> None:
        key = record.value[:9]
        with lock:
            if not first:
                first.append(time.perf_counter())
            if record.topic == TOPIC:
                seen.add(key)
                if len(seen) == messages:
                    first.append(time.perf_counter())
                    done.set()
        if failing and record.topic == TOPIC and int(key) % 10 == 0:
            raise RuntimeError("fails on purpose")

    consumer = PushConsumer(masters, group=group, auto_offset_reset="earliest",
                            retry=RetryPolicy(backoff_s=(5,)), max_inflight_messages=5000)
    try:
        consumer.subscribe([TOPIC], handler=handler, threads=1)
        if not done.wait(600):
            raise RuntimeError(f"{group}: {len(seen)} of {messages} handled")
    finally:
        consumer.close()
    seconds = first[-1] - first[0]
    return {"msgs_per_s": round(messages / seconds), "retried": consumer.retried,
            "handler_errors": consumer.handler_errors}


def run(messages: int, rounds: int, size: int) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from lib import AdminClient
    from tests.cluster import Cluster  # the same process handling the tests use

    root = Path(tempfile.mkdtemp(prefix="tubeq-bench-retry-"))
    cluster = Cluster(root / "c")
    per_round = []
    try:
        cluster.start(brokers=1)
        cluster.use_admin_env()  # auth is on: clients log in as the admin
        masters = cluster.master_addresses
        with AdminClient(masters) as admin:
            admin.create_topic(TOPIC, partitions=PARTITIONS)
        fill(masters, messages, size)
        run_once(masters, messages, True, "bench-retry-warmup")
        for n in range(rounds):
            clean = run_once(masters, messages, False, f"bench-clean-{n}")
            failing = run_once(masters, messages, True, f"bench-failing-{n}")
            per_round.append({"clean": clean, "failing": failing,
                              "ratio": round(failing["msgs_per_s"] / clean["msgs_per_s"], 3)})
    finally:
        cluster.stop_all()
        shutil.rmtree(root, ignore_errors=True)
    clean = statistics.median(r["clean"]["msgs_per_s"] for r in per_round)
    failing = statistics.median(r["failing"]["msgs_per_s"] for r in per_round)
    ratio = round(failing / clean, 3)
    return {"setup": f"1 master, 1 broker, {PARTITIONS} partitions, {size} B values, "
                     f"{messages} records per pass, a PushConsumer with retry=True, "
                     f"{rounds} rounds interleaved, {os.cpu_count()} CPUs",
            "rounds": per_round, "median_msgs_per_s": {"clean": clean, "failing": failing},
            "failing_vs_clean": ratio, "target": TARGET, "met": ratio >= TARGET}


def main(argv: list[str] | None = None) -> int:
    stop_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=200)
    args = ap.parse_args(argv)
    print(json.dumps(run(args.messages, args.rounds, args.size), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
