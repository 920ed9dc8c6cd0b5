"""Replication benchmark: what copies cost, and how long a leader's failure stops clients.

    .venv/bin/python -m load.bench_replication [--messages 100000] [--rounds 3] [--tries 3]

Starts 1 master and 3 brokers as real processes on 127.0.0.1
(``tests/cluster.py``). Throughput: one producer sends ``--messages`` records of 1 KiB to a
topic of 3 partitions with one copy, with three copies and acks=1, and with three copies and
acks=all, interleaved for ``--rounds`` rounds; the medians are compared in the same run (the
issue's targets: acks=1 at >= 0.8 and acks=all at >= 0.5 of one copy). Failover: a producer
(acks=all) and a consumer move data through a 3-copy partition while its leader's broker is
SIGKILLed ``--tries`` times (restarted after each); the longest gap between acknowledged sends
and between received records around each kill is the time clients stood still. After each
round, ``load/copy_ceiling.py`` measures what a copy's bytes alone cost (``copy_ceiling``) and
the result says what three copies would reach at that cost (``rf3_ceiling_of_rf1``) beside
what each copy costs the brokers here (``copy_us_per_record``). Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from lib.admin import AdminClient
from lib.consumer.pull import PullConsumer
from lib.producer.producer import Producer
from lib.records import FRAME_HEADER_SIZE
from lib.types import TopicPartition
from load import add_stream_flag, broker_args, stop_on_sigterm, wait_served
from load.bench_failover import Pulse

VALUE = b"x" * 1024
SETUPS = {"rf1": (1, "1"), "rf3_acks1": (3, "1"), "rf3_acks_all": (3, "all")}


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def throughput(masters: str, topic: str, acks: str, messages: int,
               pids: dict[str, int]) -> tuple[float, dict[str, float]]:
    """msgs/s, and the CPU microseconds per record each process spent meanwhile (``pids``
    by name, and this one, the producer, as ``producer``)."""
    with Producer(masters, acks=acks) as producer:
        wait_served(producer, [topic])
        before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        own = time.process_time()
        start = time.perf_counter()
        for _ in range(messages):
            producer.send(topic, VALUE)
        producer.flush()
        rate = messages / (time.perf_counter() - start)
        spent = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
        spent["producer"] = time.process_time() - own
    return rate, {name: s * 1e6 / messages for name, s in spent.items()}


def produce(masters: str, stop: threading.Event, pulse: Pulse) -> None:
    with Producer(masters, acks="all", linger_ms=1, retries=100,
                  request_timeout_ms=10_000) as producer:
        while not stop.is_set():
            try:
                producer.send("bench-failover", VALUE, partition=0).result(60)
                pulse.beat()
            except Exception:  # noqa: BLE001 - a failed send is a gap, not the end
                time.sleep(0.05)
            time.sleep(0.005)


def consume(masters: str, stop: threading.Event, pulse: Pulse) -> None:
    with PullConsumer(masters, auto_offset_reset="latest") as consumer:
        consumer.assign([TopicPartition("bench-failover", 0)])
        while not stop.is_set():
            try:
                if consumer.poll(1000, timeout=0.2):
                    pulse.beat()
            except Exception:  # noqa: BLE001 - routes refresh; keep reading
                time.sleep(0.05)


def failovers(cluster, admin: AdminClient, tries: int) -> dict:
    admin.create_topic("bench-failover", partitions=1, replication_factor=3)
    masters = cluster.master_addresses
    stop = threading.Event()
    sends, receives = Pulse(), Pulse()
    workers = [threading.Thread(target=produce, args=(masters, stop, sends)),
               threading.Thread(target=consume, args=(masters, stop, receives))]
    for w in workers:
        w.start()
    try:
        deadline = time.monotonic() + 60
        while not (sends.times and receives.times) and time.monotonic() < deadline:
            time.sleep(0.1)
        windows = []
        for _ in range(tries):
            time.sleep(1)
            victim = admin.describe_topic("bench-failover").partitions[0].broker_id
            start = time.monotonic()
            cluster.brokers[victim].kill()
            deadline = time.monotonic() + 60
            while admin.describe_topic("bench-failover").partitions[0].broker_id == victim \
                    and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(3)  # clients resume after the election: keep watching a while
            windows.append((start, time.monotonic()))
            cluster.start_broker(victim)
            time.sleep(2)
    finally:
        stop.set()
        for w in workers:
            w.join(60)
    produce_gaps = [sends.longest_gap(a, b) for a, b in windows]
    consume_gaps = [receives.longest_gap(a, b) for a, b in windows]
    return {"tries": tries,
            "produce_gap_s": [round(g, 3) for g in produce_gaps],
            "consume_gap_s": [round(g, 3) for g in consume_gaps],
            "produce_gap_median_s": round(statistics.median(produce_gaps), 3),
            "consume_gap_median_s": round(statistics.median(consume_gaps), 3)}


def copy_ceiling(mib: int) -> dict[str, float]:
    """One run of ``load/copy_ceiling.py`` in its own processes (the bytes of a copy alone)."""
    done = subprocess.run([sys.executable, "-m", "load.copy_ceiling", "--mib", str(mib)],
                          capture_output=True, text=True, timeout=600, check=True,
                          cwd=Path(__file__).resolve().parents[1])
    return json.loads(done.stdout)


def ceiling_of(copies: list[dict[str, float]], producer_us: float,
               brokers: dict[str, float]) -> dict:
    """The copy's bytes-alone cost (medians of the rounds) and what three copies could reach
    if each copy cost only that: on two busy cores the rates go as the CPU per record, one
    copy's (the producer and the brokers) against that plus two copies' bytes."""
    per = {key: round(statistics.median(c[key] for c in copies), 3) for key in copies[0]}
    record_kib = (len(VALUE) + FRAME_HEADER_SIZE) / 1024
    one = producer_us + brokers["rf1"]
    copy_us = per["copy_us_per_kib"] * record_kib
    spent = {name: round((us - brokers["rf1"]) / 2, 2) for name, us in brokers.items()
             if name != "rf1"}
    return {"copy_ceiling": per,
            "copy_us_per_record": spent,  # what each of the two extra copies cost here
            "rf3_ceiling_of_rf1": round(one / (one + 2 * copy_us), 3)}


def run(messages: int, rounds: int, tries: int, stream: bool = True,
        ceiling_mib: int = 256) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.cluster import Cluster  # the same process handling the tests use

    root = Path(tempfile.mkdtemp(prefix="tubeq-replication-"))
    cluster = Cluster(root / "c", broker_args=broker_args(root, stream))
    try:
        cluster.start(brokers=3)
        cluster.use_admin_env()  # auth is on: clients log in as the admin
        masters = cluster.master_addresses
        rates: dict[str, list[float]] = {name: [] for name in SETUPS}
        cpu: dict[str, list[dict[str, float]]] = {name: [] for name in SETUPS}
        pids = {f"broker{i}": b.pid for i, b in cluster.brokers.items()}
        with AdminClient(masters, timeout=30) as admin:
            for name, (copies, _) in SETUPS.items():
                admin.create_topic(f"bench-{name}", partitions=3, replication_factor=copies)
            copies: list[dict[str, float]] = []
            for _ in range(rounds):
                for name, (_, acks) in SETUPS.items():
                    rate, us = throughput(masters, f"bench-{name}", acks, messages, pids)
                    rates[name].append(rate)
                    cpu[name].append(us)
                if ceiling_mib:
                    copies.append(copy_ceiling(ceiling_mib))
            failover = failovers(cluster, admin, tries) if tries else {}
        median = {name: statistics.median(r) for name, r in rates.items()}
        cpu_median = {name: {proc: round(statistics.median(r[proc] for r in rs), 2)
                             for proc in rs[0]} for name, rs in cpu.items()}
        brokers = {name: round(statistics.median(sum(v for k, v in r.items() if k != "producer")
                                                 for r in rs), 2) for name, rs in cpu.items()}
        return {
            "messages": messages, "value_bytes": len(VALUE), "rounds": rounds,
            "replica_stream": stream,
            "msgs_per_s": {name: [round(r) for r in rs] for name, rs in rates.items()},
            "median_msgs_per_s": {name: round(m) for name, m in median.items()},
            "rf3_acks1_of_rf1": round(median["rf3_acks1"] / median["rf1"], 3),
            "rf3_acks_all_of_rf1": round(median["rf3_acks_all"] / median["rf1"], 3),
            # medians over the rounds; each broker leads one of the three partitions
            "cpu_us_per_record": cpu_median,
            "broker_cpu_us_per_record": brokers,
            **(ceiling_of(copies, cpu_median["rf1"]["producer"], brokers) if copies else {}),
            "failover": failover,
            "targets": {"rf3_acks1_of_rf1": 0.8, "rf3_acks_all_of_rf1": 0.5,
                        "failover_median_s": 3},
        }
    finally:
        cluster.stop_all()
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m load.bench_replication", description=__doc__)
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tries", type=int, default=3)
    add_stream_flag(p)
    p.add_argument("--ceiling-mib", type=int, default=256,
                   help="MiB the bytes-alone copy (load/copy_ceiling.py) moves after each "
                        "round; 0 skips it")
    args = p.parse_args(argv)
    if args.messages < 1 or args.rounds < 1 or args.tries < 0:
        p.error("--messages and --rounds must be >= 1, --tries >= 0")
    if args.ceiling_mib == 1 or args.ceiling_mib < 0:
        p.error("--ceiling-mib must be 0 (none) or >= 2")
    stop_on_sigterm()
    print(json.dumps(run(args.messages, args.rounds, args.tries, args.replica_stream,
                          args.ceiling_mib), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
