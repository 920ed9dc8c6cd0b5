"""Master failover benchmark: kill -9 the active master N times, measure how long clients wait.

    .venv/bin/python -m load.bench_failover [--tries 10] [--json]

Starts 3 masters and 1 broker as real processes on 127.0.0.1 (``tests/cluster.py``), a
producer and a consumer that move data the whole time, then per try: SIGKILL the active master,
time until the first admin write (create_topic) through an AdminClient succeeds, restart the
killed master and wait until it is a caught-up standby. Prints one JSON object: failover times
(each, median, worst) and the longest gap between acknowledged sends / received records during
the failovers (the data path must not need the master).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from lib.admin import AdminClient
from lib.consumer.pull import PullConsumer
from lib.producer.producer import Producer
from load import stop_on_sigterm


class Pulse:
    """Timestamps of progress events; ``longest_gap`` between two of them in a window."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def beat(self) -> None:
        self.times.append(time.monotonic())

    def longest_gap(self, start: float, end: float) -> float:
        ts = [t for t in self.times if start <= t <= end]
        edges = [start, *ts, end]
        return max(b - a for a, b in zip(edges, edges[1:], strict=False))


def produce(masters: str, stop: threading.Event, pulse: Pulse) -> None:
    with Producer(masters, linger_ms=1) as producer:
        while not stop.is_set():
            producer.send("bench-failover", b"x" * 100).result(30)
            pulse.beat()
            time.sleep(0.005)


def consume(masters: str, stop: threading.Event, pulse: Pulse) -> None:
    with PullConsumer(masters, group="bench-failover", auto_offset_reset="latest") as consumer:
        consumer.subscribe(["bench-failover"])
        while not stop.is_set():
            if consumer.poll(1000, timeout=0.2):
                pulse.beat()


def one_failover(cluster, admin: AdminClient, n: int) -> float:
    old = cluster.leader()
    old.kill()
    start = time.monotonic()
    while True:
        try:
            admin.create_topic(f"failover-{n}", partitions=1)
            elapsed = time.monotonic() - start
            break
        except Exception:  # noqa: BLE001 - anything but success means "not yet"
            time.sleep(0.02)
    old.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        st = {s.address: s for s in admin.master_status()}
        if st[old.address].role == "standby" and st[old.address].lag == 0:
            break
        time.sleep(0.2)
    return elapsed


def run(tries: int) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.cluster import Cluster  # the same process handling the tests use

    root = Path(tempfile.mkdtemp(prefix="tubeq-failover-"))
    cluster = Cluster(root / "c", masters=3)
    stop = threading.Event()
    sends, receives = Pulse(), Pulse()
    try:
        cluster.start(brokers=1)
        cluster.use_admin_env()  # auth is on: clients log in as the admin
        masters = cluster.master_addresses
        with AdminClient(masters, timeout=30) as admin:
            admin.create_topic("bench-failover", partitions=2)
            workers = [threading.Thread(target=produce, args=(masters, stop, sends)),
                       threading.Thread(target=consume, args=(masters, stop, receives))]
            for w in workers:
                w.start()
            deadline = time.monotonic() + 60  # warm up: both sides moving before any kill
            while not (sends.times and receives.times) and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(1)
            times, windows = [], []
            for n in range(tries):
                start = time.monotonic()
                times.append(one_failover(cluster, admin, n))
                windows.append((start, start + times[-1]))
                time.sleep(1)
        stop.set()
        for w in workers:
            w.join(60)
        return {
            "tries": tries,
            "failover_s": [round(t, 3) for t in times],
            "failover_median_s": round(statistics.median(times), 3),
            "failover_worst_s": round(max(times), 3),
            "produce_gap_s": [round(sends.longest_gap(a, b), 3) for a, b in windows],
            "consume_gap_s": [round(receives.longest_gap(a, b), 3) for a, b in windows],
            "produce_longest_gap_s": round(max(sends.longest_gap(a, b) for a, b in windows), 3),
            "consume_longest_gap_s": round(max(receives.longest_gap(a, b) for a, b in windows),
                                           3),
            "targets": {"failover_median_s": 5, "failover_worst_s": 10, "dip_s": 2},
        }
    finally:
        stop.set()
        cluster.stop_all()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m load.bench_failover", description=__doc__)
    p.add_argument("--tries", type=int, default=10)
    args = p.parse_args(argv)
    stop_on_sigterm()
    print(json.dumps(run(args.tries), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
