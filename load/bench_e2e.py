"""End-to-end latency at a steady rate, one copy and three with acks=all, against a bare gRPC
round trip measured in the same run.

    .venv/bin/python -m load.bench_e2e [--messages 100000] [--rate 10000] [--rounds 1]

Starts 1 master and 3 brokers as real processes on 127.0.0.1 (``tests/cluster.py``). Per
case (a topic of 6 partitions with one copy and acks=1; with three copies and acks=all) a
consumer in its own process reads from the end (``tubeq bench consume --e2e``) while this
process produces ``--messages`` 1 KiB records at ``--rate`` (linger 1 ms). Beside the
producer, a thread makes bare gRPC unary calls (the standard health check, a few bytes each
way) to the broker leading partition 0, back to back with 2 ms pauses: the round trip under
the same load, the ceiling a message's two hops (producer to broker, broker to consumer) are
measured against. End-to-end latency is the consumer's clock minus the send time each value
carries (``lib/cli/bench.py`` ``stamped``, to the nanosecond); the same records timed by their
own timestamps (whole milliseconds, floored: 0-1 ms late) are reported beside it. Prints one
JSON object: per case the latencies, the round trip and p99 over the round trip's p99 (target:
at most 3).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from load import add_stream_flag, broker_args, stop_on_sigterm

ROOT = Path(__file__).resolve().parents[1]
CASES = {"rf1": (1, "1"), "rf3_acks_all": (3, "all")}  # copies, acks
TARGET_P99_VS_RTT = 3.0
RTT_PAUSE_S = 0.002


def round_trips(address: str, stop: threading.Event, out: list[float]) -> None:
    """Bare unary calls to ``address`` until ``stop``, their times appended to ``out``."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from lib.rpc import channel
    from lib.tls import Tls

    ch = channel(address, Tls.from_env())
    try:
        check = health_pb2_grpc.HealthStub(ch).Check
        request = health_pb2.HealthCheckRequest(service="")
        check(request, timeout=10)  # warm-up: the connection
        while not stop.is_set():
            t0 = time.perf_counter()
            check(request, timeout=10)
            out.append(time.perf_counter() - t0)
            stop.wait(RTT_PAUSE_S)
    finally:
        ch.close()


def one_case(masters: str, topic: str, acks: str, messages: int, rate: float) -> dict[str, Any]:
    from lib.admin import AdminClient
    from lib.cli.bench import percentiles_ms, run_produce

    with AdminClient(masters) as admin:
        leader = admin.describe_topic(topic).partitions[0].address
    consumer = subprocess.Popen(
        [sys.executable, "-m", "lib.cli", "--masters", masters, "bench", "consume", "--topic",
         topic, "--messages", str(messages), "--e2e", "--from-end", "--json", "--no-ceilings",
         "--timeout", str(messages / rate + 60)],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=ROOT)
    trips: list[float] = []
    stop = threading.Event()
    pinger = threading.Thread(target=round_trips, args=(leader, stop, trips), daemon=True)
    try:
        time.sleep(5.0)  # as tubeq bench e2e: the consumer reaches the end first
        pinger.start()
        produced = run_produce(masters, topic, messages, 1024, rate, False, linger_ms=1,
                               acks=acks)
        stop.set()
        pinger.join(30)
        out, _ = consumer.communicate(timeout=messages / rate + 120)
    finally:
        stop.set()
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait()
    consumed = json.loads(out or b"{}").get("consume", {})
    e2e, rtt = consumed.get("e2e_latency", {}), percentiles_ms(trips)
    by_ts = consumed.get("e2e_latency_from_record_timestamps", {})
    return {"acks": acks, "produced_msgs_per_s": produced.get("msgs_per_s"),
            "consumed": consumed.get("messages", 0), "e2e_ms": e2e,
            "e2e_clock": consumed.get("e2e_clock"), "grpc_round_trip_ms": rtt,
            "round_trips": len(trips),
            "p99_vs_round_trip_p99": _ratio(e2e, rtt),
            # the same records timed by their millisecond timestamps (0-1 ms late, floored)
            "e2e_ms_from_record_timestamps": by_ts,
            "p99_vs_round_trip_p99_from_record_timestamps": _ratio(by_ts, rtt)}


def _ratio(e2e: dict[str, float], rtt: dict[str, float]) -> float | None:
    return round(e2e["p99_ms"] / rtt["p99_ms"], 2) if e2e.get("p99_ms") and rtt["p99_ms"] \
        else None


def run(messages: int, rate: float, rounds: int, replica_stream: bool = True
        ) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from lib.admin import AdminClient
    from tests.cluster import Cluster  # the same process handling the tests use

    root = Path(tempfile.mkdtemp(prefix="tubeq-bench-e2e-"))
    cluster = Cluster(root / "c", broker_args=broker_args(root, replica_stream))
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in CASES}
    try:
        cluster.start(brokers=3)
        cluster.use_admin_env()  # auth is on: clients log in as the admin
        masters = cluster.master_addresses
        with AdminClient(masters, timeout=30) as admin:
            for name, (copies, _) in CASES.items():
                admin.create_topic(f"e2e-{name}", partitions=6, replication_factor=copies)
        for _ in range(rounds):  # interleaved
            for name, (_, acks) in CASES.items():
                results[name].append(one_case(masters, f"e2e-{name}", acks, messages, rate))
    finally:
        cluster.stop_all()
        shutil.rmtree(root, ignore_errors=True)
    summary = {}
    for name, runs in results.items():
        ratios = sorted(r["p99_vs_round_trip_p99"] for r in runs
                        if r["p99_vs_round_trip_p99"] is not None)
        median = ratios[len(ratios) // 2] if ratios else None
        by_ts = sorted(r["p99_vs_round_trip_p99_from_record_timestamps"] for r in runs
                       if r["p99_vs_round_trip_p99_from_record_timestamps"] is not None)
        summary[name] = {"p99_vs_round_trip_p99_median": median,
                         "from_record_timestamps_median": by_ts[len(by_ts) // 2]
                         if by_ts else None,
                         "met": median is not None and median <= TARGET_P99_VS_RTT,
                         "complete": all(r["consumed"] >= messages for r in runs)}
    return {"setup": f"1 master, 3 brokers, {os.cpu_count()} CPUs; {messages} records of "
                     f"1 KiB at {rate:g}/s per case and round, 6 partitions, linger 1 ms",
            "replica_stream": replica_stream,
            "target_p99_vs_round_trip_p99": TARGET_P99_VS_RTT, "summary": summary,
            "runs": results}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m load.bench_e2e", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--rate", type=float, default=10_000)
    p.add_argument("--rounds", type=int, default=1)
    add_stream_flag(p)
    args = p.parse_args(argv)
    if args.messages < 1 or args.rate <= 0 or args.rounds < 1:
        p.error("--messages and --rounds must be >= 1, --rate > 0")
    stop_on_sigterm()
    print(json.dumps(run(args.messages, args.rate, args.rounds, args.replica_stream),
                     indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
