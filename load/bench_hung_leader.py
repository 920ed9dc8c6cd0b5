"""Hung-leader benchmark: how long clients stand still when a partition's leader hangs.

    .venv/bin/python -m load.bench_hung_leader [--tries 2] [--modes sigstop,blackhole]
        [--broker-timeout-ms 6000] [--heartbeat-ms 1000]

Starts 1 master and 3 brokers as real processes on 127.0.0.1 (``tests/cluster.py``); each
broker is reached through a :class:`load.faultproxy.FaultProxy` of its own (its advertised
address) and reaches the master through another, so the bench can cut one broker off with no
RST (the proxies' ``drop`` mode). A producer (idempotent, acks=all, ``request_timeout_ms``
30 s) sends numbered 100-byte records to a 1-partition topic with 3 copies (min in-sync 2) and
a pull consumer reads it, while per try and mode the partition's leader hangs:

- ``sigstop``: SIGSTOP the leader's process (SIGCONT once the clients went on);
- ``blackhole``: every link to and from the leader swallows what it carries (healed after).

Per fault it measures the master's leadership move (from the fault until the master names
another leader) and the longest gap between acknowledgements and between received records
from the fault until 3 s after the clients went on; the target is gap <= 2x the move. At the
end the topic is read back: acknowledged records lost and records stored twice (both must be
0). Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

from lib.admin import AdminClient
from lib.consumer.pull import PullConsumer
from lib.errors import TubeqError
from lib.process import free_ports
from lib.producer.producer import Producer
from lib.types import TopicPartition
from load import stop_on_sigterm
from load.bench_failover import Pulse
from load.faultproxy import FaultProxy, Mode

TOPIC = "bench-hung"
TIMEOUT_MS = 30_000
BROKERS = 3
SETTLE_S = 3.0  # steady traffic before a fault, and after the clients went on


class Writer(threading.Thread):
    """Sends numbered records one at a time; keeps the acknowledged numbers and their times."""

    def __init__(self, masters: str) -> None:
        super().__init__(daemon=True)
        self.masters, self.acked, self.pulse = masters, [], Pulse()
        self.stop = threading.Event()

    def run(self) -> None:
        with Producer(self.masters, acks="all", idempotent=True, retries=1000,
                      request_timeout_ms=TIMEOUT_MS, linger_ms=0) as producer:
            n = 0
            while not self.stop.is_set():
                try:
                    producer.send(TOPIC, b"%06d" % n + b"x" * 94).result(2 * TIMEOUT_MS / 1e3)
                    self.acked.append(n)
                    self.pulse.beat()
                except TubeqError:
                    pass
                n += 1
                time.sleep(0.005)


class Reader(threading.Thread):
    """Reads the partition from the start; beats per poll that returned records."""

    def __init__(self, masters: str) -> None:
        super().__init__(daemon=True)
        self.masters, self.pulse, self.stop = masters, Pulse(), threading.Event()

    def run(self) -> None:
        with PullConsumer(self.masters, auto_offset_reset="earliest",
                          rpc_timeout_s=TIMEOUT_MS / 1e3) as consumer:
            consumer.assign([TopicPartition(TOPIC, 0)])
            while not self.stop.is_set():
                try:
                    if consumer.poll(timeout=0.2):
                        self.pulse.beat()
                except TubeqError:
                    time.sleep(0.05)


def start_cluster(root: Path, stack: ExitStack, args: argparse.Namespace):
    """The cluster, each broker behind a FaultProxy both ways; returns (cluster, holes by id).
    The processes stop before the holes close (a broker's clean shutdown asks the master)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.cluster import Cluster, ServerProcess  # the process handling the tests use

    conf = root / "master.toml"
    conf.write_text(f"[master]\nbroker_heartbeat_interval_ms = {args.heartbeat_ms}\n"
                    f"broker_timeout_ms = {args.broker_timeout_ms}\n")
    cluster = Cluster(root, master_args=["--config", str(conf)])
    stack.callback(cluster.stop_all)
    cluster.start_master()
    holes: dict[int, list[FaultProxy]] = {}
    ports = free_ports(BROKERS)
    for b in range(1, BROKERS + 1):
        port = ports[b - 1]
        front = stack.enter_context(FaultProxy(f"127.0.0.1:{port}"))
        to_master = stack.enter_context(FaultProxy(cluster.master_addresses))
        holes[b] = [front, to_master]
        proc = cluster.broker_process(b)
        d = proc.data_dir
        cluster.brokers[b] = ServerProcess(
            "broker", d, ["--data-dir", str(d), "--broker-id", str(b), "--host", "127.0.0.1",
                          "--port", str(port), "--metrics-port", "0",
                          "--advertised-address", front.address,
                          "--masters", to_master.address], env=proc.env)
    stack.callback(cluster.stop_all)
    for b in holes:
        cluster.brokers[b].launch()
    for b in holes:
        cluster.brokers[b].await_ready()
    cluster.use_admin_env()  # auth is on: clients log in as the admin
    fronts = {(b, hs[0].address) for b, hs in holes.items()}
    with AdminClient(cluster.master_addresses) as admin:  # registered at the advertised address
        wait(lambda: fronts <= {(x.broker_id, x.address) for x in admin.list_brokers()
                                if x.alive}, "the brokers registered", step=0.2)
    return cluster, holes


def leader(admin: AdminClient) -> int:
    return admin.describe_topic(TOPIC).partitions[0].broker_id


def wait(check, what: str, timeout: float = 120.0, step: float = 0.05) -> float:
    """Poll ``check`` until true; returns when it became true (monotonic)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(step)
    return time.monotonic()


def one_fault(mode: str, cluster, holes, admin: AdminClient, writer: Writer,
              reader: Reader) -> dict:
    time.sleep(SETTLE_S)
    victim = leader(admin)
    acked_before = len(writer.acked)
    start = time.monotonic()
    if mode == "sigstop":
        cluster.brokers[victim].signal(signal.SIGSTOP)
    else:
        for hole in holes[victim]:
            hole.set_mode(Mode.DROP)
    try:
        moved = wait(lambda: leader(admin) != victim, "a new leader") - start
        resumed = wait(lambda: len(writer.acked) > acked_before, "acknowledgements again",
                       timeout=2 * TIMEOUT_MS / 1e3)
        wait(lambda: reader.pulse.times and reader.pulse.times[-1] > resumed,
             "records read again", timeout=2 * TIMEOUT_MS / 1e3)
        time.sleep(SETTLE_S)
        end = time.monotonic()
    finally:
        if mode == "sigstop":
            cluster.brokers[victim].signal(signal.SIGCONT)
        else:
            for hole in holes[victim]:
                hole.set_mode(Mode.PASS)  # resets what lived through the drop
    wait(lambda: len(admin.describe_topic(TOPIC).partitions[0].isr) == BROKERS,
         "the old leader back in the ISR", step=0.2)
    gap_p = writer.pulse.longest_gap(start, end)
    gap_c = reader.pulse.longest_gap(start, end)
    return {"mode": mode, "victim": victim, "leadership_move_s": round(moved, 2),
            "producer_gap_s": round(gap_p, 2), "consumer_gap_s": round(gap_c, 2),
            "gap_over_move": round(max(gap_p, gap_c) / moved, 2)}


def read_back(masters: str) -> list[int]:
    with PullConsumer(masters, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(TOPIC, 0)])
        out, idle = [], 0
        while idle < 10:
            got = consumer.poll(timeout=0.3)
            out += [int(r.value[:6]) for r in got]
            idle = 0 if got else idle + 1
    return out


def summary(faults: list[dict], acked: list[int], stored: list[int]) -> dict:
    by_mode: dict[str, dict] = {}
    for mode in dict.fromkeys(f["mode"] for f in faults):
        mine = [f for f in faults if f["mode"] == mode]
        by_mode[mode] = {
            "leadership_move_s_median": statistics.median(f["leadership_move_s"] for f in mine),
            "producer_gap_s_worst": max(f["producer_gap_s"] for f in mine),
            "consumer_gap_s_worst": max(f["consumer_gap_s"] for f in mine),
            "gap_over_move_worst": max(f["gap_over_move"] for f in mine),
            "target_met": all(f["gap_over_move"] <= 2.0 for f in mine)}
    twice = sum(1 for k in Counter(stored).values() if k > 1)
    return {"faults": faults, "modes": by_mode, "acknowledged": len(acked),
            "acknowledged_lost": len(set(acked) - set(stored)), "stored_twice": twice}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tries", type=int, default=2, help="faults per mode")
    p.add_argument("--modes", default="sigstop,blackhole")
    p.add_argument("--broker-timeout-ms", type=int, default=6000,
                   help="the master's broker_timeout_ms (its default: 6000)")
    p.add_argument("--heartbeat-ms", type=int, default=1000,
                   help="the master's broker_heartbeat_interval_ms (its default: 1000)")
    args = p.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if not set(modes) <= {"sigstop", "blackhole"}:
        p.error(f"--modes takes sigstop and blackhole, got {args.modes!r}")
    stop_on_sigterm()
    root = Path(tempfile.mkdtemp(prefix="tubeq-bench-hung-"))
    try:
        with ExitStack() as stack:
            cluster, holes = start_cluster(root, stack, args)
            with AdminClient(cluster.master_addresses) as admin:
                admin.create_topic(TOPIC, partitions=1, replication_factor=BROKERS,
                                   min_insync_replicas=2)
                wait(lambda: len(admin.describe_topic(TOPIC).partitions[0].isr) == BROKERS,
                     "every replica in sync", step=0.2)
                writer, reader = Writer(cluster.master_addresses), \
                    Reader(cluster.master_addresses)
                writer.start()
                reader.start()
                try:
                    faults = [one_fault(mode, cluster, holes, admin, writer, reader)
                              for _ in range(args.tries) for mode in modes]
                finally:
                    writer.stop.set()
                    reader.stop.set()
                    writer.join(2 * TIMEOUT_MS / 1e3)
                    reader.join(30)
            result = summary(faults, writer.acked, read_back(cluster.master_addresses))
            result["settings"] = {"broker_timeout_ms": args.broker_timeout_ms,
                                  "heartbeat_ms": args.heartbeat_ms,
                                  "request_timeout_ms": TIMEOUT_MS}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
