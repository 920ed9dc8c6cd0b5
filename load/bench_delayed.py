"""Delayed delivery at scale (issue 52's speed targets), on one broker.

    .venv/bin/python -m load.bench_delayed [--pending 1000000] [--rate 10000] [--seconds 20]
        [--size 100]

Starts 1 master and 1 broker as real processes on 127.0.0.1 (``tests/cluster.py``), then:

1. **pending**: sends ``--pending`` records of ``--size`` bytes delayed by an hour, and waits
   until the broker's index holds them all (``tubeq_broker_delayed_pending``); reports the
   send and index rates and the broker's memory before and after: RSS split into anonymous
   memory (the process's own: what bounds it is the movers' batches, not what is pending)
   and file pages (the index's LMDB pages mapped while walked, which the kernel may drop),
   and the index file's size;
2. **lag**: with those still pending, sends ``--rate`` x ``--seconds`` records due at a
   steady ``--rate`` per second (record i due at T0 + i / rate, all sent before T0), and a
   read_committed consumer measures each record's arrival minus its due time. Target: p99
   <= 1 s at 10,000 per second.

Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

from load import stop_on_sigterm

TOPIC = "bench-delayed"
PARTITIONS = 4
TARGET_P99_S = 1.0


def memory(pid: int) -> dict[str, float]:
    """VmRSS, RssAnon and RssFile of ``pid`` in MiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key = line.split(":")[0]
            if key in ("VmRSS", "RssAnon", "RssFile"):
                out[key.lower() + "_mib"] = round(int(line.split()[1]) / 1024, 1)
    return out


def metric(address: str, name: str) -> float:
    """One unlabelled series from the broker's Prometheus endpoint."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise RuntimeError(f"{name} not exported by {address}")


def dir_mib(path: Path) -> float:
    return round(sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file())
                 / 2**20, 1)


def send_pending(masters: str, count: int, size: int) -> float:
    """Sends ``count`` records delayed by an hour; returns records per second."""
    from lib import Producer

    value = b"p" * size
    start = time.perf_counter()
    with Producer(masters, linger_ms=5) as producer:
        for i in range(count):
            producer.send(TOPIC, value, partition=i % PARTITIONS, delay=3600.0)
        producer.flush(600)
    return count / (time.perf_counter() - start)


def wait_indexed(metrics: str, want: int, timeout: float) -> float:
    start = time.perf_counter()
    while metric(metrics, "tubeq_broker_delayed_pending") < want:
        if time.perf_counter() - start > timeout:
            raise RuntimeError(f"the broker indexed "
                               f"{metric(metrics, 'tubeq_broker_delayed_pending'):.0f} of {want}")
        time.sleep(0.5)
    return time.perf_counter() - start


class Arrivals(threading.Thread):
    def __init__(self, masters: str, want: int) -> None:
        super().__init__(daemon=True)
        self.masters, self.want = masters, want
        self.lag: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        from lib import PullConsumer, TopicPartition

        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        with PullConsumer(self.masters, isolation_level="read_committed",
                          fetch_max_wait_ms=20) as consumer:
            consumer.assign(tps)
            consumer.seek_to_end(*tps)
            while len(self.lag) < self.want and not self.stop.is_set():
                records = consumer.poll(max_records=10_000, timeout=0.1)
                now = time.time()
                self.lag += [now - r.timestamp / 1000 for r in records]


def lag_phase(masters: str, rate: int, seconds: float, size: int, send_rate: float) -> dict:
    from lib import Producer

    count = int(rate * seconds)
    lead = count / send_rate * 1.5 + 5  # every record is stored before the first falls due
    t0 = time.time() + lead
    arrivals = Arrivals(masters, count)
    arrivals.start()
    value = b"d" * size
    with Producer(masters, linger_ms=5) as producer:
        for i in range(count):
            producer.send(TOPIC, value, partition=i % PARTITIONS, deliver_at=t0 + i / rate)
        producer.flush(600)
    sent_by = time.time()
    arrivals.join(lead + seconds + 120)
    arrivals.stop.set()
    lag = np.array(arrivals.lag)
    if len(lag) < count:
        raise RuntimeError(f"{len(lag)} of {count} due records arrived")
    p99 = float(np.percentile(lag, 99))
    return {"records": count, "due_per_s": rate, "all_sent_s_before_first_due":
            round(t0 - sent_by, 2), "lag_p50_s": round(float(np.percentile(lag, 50)), 3),
            "lag_p99_s": round(p99, 3), "lag_max_s": round(float(lag.max()), 3),
            "early": int((lag < -0.01).sum()), "target_p99_s": TARGET_P99_S,
            "met": p99 <= TARGET_P99_S}


def run(pending: int, rate: int, seconds: float, size: int) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from lib import AdminClient
    from tests.cluster import Cluster  # the same process handling the tests use

    root = Path(tempfile.mkdtemp(prefix="tubeq-bench-delayed-"))
    cluster = Cluster(root / "c")
    try:
        cluster.start(brokers=1)
        cluster.use_admin_env()  # auth is on: clients log in as the admin
        masters = cluster.master_addresses
        broker = cluster.brokers[min(cluster.brokers)]
        metrics = broker.info["metrics"]
        with AdminClient(masters) as admin:
            admin.create_topic(TOPIC, partitions=PARTITIONS)
        send_pending(masters, 1000, size)  # warm up: the delay topic made, movers running
        wait_indexed(metrics, 1000, 60)
        before = memory(broker.pid)
        send_rate = send_pending(masters, pending, size)
        index_wait = wait_indexed(metrics, pending + 1000, 600)
        after = memory(broker.pid)
        index_mib = dir_mib(broker.data_dir / "delay-index")
        lag = lag_phase(masters, rate, seconds, size, send_rate)
        end = memory(broker.pid)
        still = metric(metrics, "tubeq_broker_delayed_pending")
    finally:
        cluster.stop_all()
        shutil.rmtree(root, ignore_errors=True)
    return {
        "setup": f"1 master, 1 broker, {size} B values, tubeq.delayed of 4 partitions, "
                 f"{os.cpu_count()} CPUs",
        "pending": {"records": pending, "sent_per_s": round(send_rate),
                    "indexed_after_send_s": round(index_wait, 1),
                    "index_file_mib": index_mib, "broker_before": before,
                    "broker_with_pending": after,
                    "anon_growth_mib": round(after["rssanon_mib"] - before["rssanon_mib"], 1)},
        "lag": {**lag, "pending_meanwhile": int(still), "broker_after": end},
    }


def main(argv: list[str] | None = None) -> int:
    stop_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pending", type=int, default=1_000_000)
    ap.add_argument("--rate", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--size", type=int, default=100)
    args = ap.parse_args(argv)
    print(json.dumps(run(args.pending, args.rate, args.seconds, args.size), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
