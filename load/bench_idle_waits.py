"""Produce ack latency on an idle broker, then with 1,000 idle long-polls and 1,000 push streams.

    .venv/bin/python -m load.bench_idle_waits [--fetches 1000] [--streams 1000] [--sends 300]
    .venv/bin/python -m load.bench_idle_waits --quick

Starts 1 master and 1 broker as real processes on 127.0.0.1 (``tests/cluster.py``), measures the
ack latency of ``Producer.send_sync`` (one 100 B record at a time, no linger, async topic),
then starts a holder process that opens ``--fetches`` long-polling Fetch calls (max wait 30 s,
re-issued when they return) and ``--streams`` push ``Subscribe`` streams with credit, all on a
topic nobody writes, and measures again in the same run. Prints one JSON object: both latency
summaries, their ratios and what the broker saw open. The loaded phase is bounded in time
(``--budget-s``): a broker whose waits hold threads answers late or not at all, and the sends
that time out are counted. Every process is stopped by PID at the end.

The holder (:class:`IdleLoad`, also used by tests/integration/test_broker_idle_waits.py) is a
grpc.aio client on its own event loop thread, so thousands of calls cost it no thread each.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import grpc

from lib.process import StopSignals
from lib.proto import broker_pb2 as pb
from lib.proto import broker_pb2_grpc
from lib.rpc import CHANNEL_OPTIONS
from load import stop_on_sigterm, wait_served

ROOT = Path(__file__).resolve().parents[1]
LONG_POLL_MS = 30_000


class IdleLoad:
    """Long-polling Fetch calls and push streams held open on one topic, from an aio loop.

    Each poller keeps its own positions (``next_offset`` of each reply), so once data arrives
    it is counted once per poller (``fetch_records``) and the poller waits again; each stream
    counts what is pushed to it (``stream_records``). ``start()`` returns once every call was
    sent; ``stop()`` cancels them all and ends the loop thread.
    """

    def __init__(self, address: str, topic: str, partitions: int, fetches: int, streams: int,
                 header: str = "", channels: int = 8, credit: int = 1000) -> None:
        self.address, self.topic, self.partitions = address, topic, partitions
        self.metadata = (("authorization", header),) if header else None  # a login's token
        self.fetches, self.streams, self.channels, self.credit = fetches, streams, channels, credit
        self.fetch_returns = 0
        self.fetch_errors = 0
        self.fetch_records = [0] * fetches
        self.stream_records = [0] * streams
        self.stream_errors = 0
        self.opened = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="idle-load",
                                        daemon=True)
        self._tasks: list[asyncio.Task] = []
        self._chans: list[grpc.aio.Channel] = []

    def start(self, timeout: float = 60.0) -> IdleLoad:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._open(), self._loop).result(timeout)
        return self

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            if not self._thread.is_alive():
                self._loop.close()

    def stats(self) -> dict[str, Any]:
        return {"fetches": self.fetches, "streams": self.streams, "opened": self.opened,
                "fetch_returns": self.fetch_returns, "fetch_errors": self.fetch_errors,
                "stream_errors": self.stream_errors,
                "pollers_with_data": sum(1 for n in self.fetch_records if n),
                "streams_with_data": sum(1 for n in self.stream_records if n)}

    async def _open(self) -> None:
        # Separate connections (no shared subchannel), as separate consumers would have.
        opts = (*CHANNEL_OPTIONS, ("grpc.use_local_subchannel_pool", 1))
        self._chans = [grpc.aio.insecure_channel(self.address, options=opts)
                       for _ in range(self.channels)]
        stubs = [broker_pb2_grpc.BrokerStub(ch) for ch in self._chans]
        opened = [asyncio.Event() for _ in range(self.fetches + self.streams)]
        for i in range(self.fetches):
            self._tasks.append(asyncio.ensure_future(
                self._poll(stubs[i % len(stubs)], i, opened[i])))
        for i in range(self.streams):
            self._tasks.append(asyncio.ensure_future(
                self._stream(stubs[i % len(stubs)], i, opened[self.fetches + i])))
        for ev in opened:
            await ev.wait()
        self.opened = len(opened)

    async def _close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for ch in self._chans:
            await ch.close()

    async def _poll(self, stub: broker_pb2_grpc.BrokerStub, i: int, opened: asyncio.Event
                    ) -> None:
        offsets = dict.fromkeys(range(self.partitions), 0)
        while True:
            req = pb.FetchRequest(topic=self.topic, max_wait_ms=LONG_POLL_MS, partitions=[
                pb.PartitionFetch(partition=p, offset=o) for p, o in offsets.items()])
            call = stub.Fetch(req, timeout=LONG_POLL_MS / 1e3 + 60, metadata=self.metadata)
            opened.set()
            try:
                res = await call
            except grpc.aio.AioRpcError:
                self.fetch_errors += 1
                await asyncio.sleep(0.5)
                continue
            self.fetch_returns += 1
            for part in res.partitions:
                if not part.error_code:
                    offsets[part.partition] = part.next_offset
                    self.fetch_records[i] += len(part.offsets) // 8

    async def _stream(self, stub: broker_pb2_grpc.BrokerStub, i: int, opened: asyncio.Event
                      ) -> None:
        start = pb.SubscribeStart(topic=self.topic, partitions=[
            pb.PartitionFetch(partition=p, offset=0) for p in range(self.partitions)])
        call = stub.Subscribe(metadata=self.metadata)
        try:
            await call.write(pb.SubscribeRequest(start=start))
            await call.write(pb.SubscribeRequest(credit=pb.Credit(messages=self.credit)))
            opened.set()
            async for res in call:
                self.stream_records[i] += len(res.data.offsets) // 8
        except grpc.aio.AioRpcError:
            self.stream_errors += 1
        finally:
            opened.set()
            call.cancel()


# ---------------------------------------------------------------- the holder process


def hold(args: argparse.Namespace) -> int:
    """Child mode: open the idle load, print one JSON line, hold it until SIGTERM."""
    signals = StopSignals()
    from lib.auth.client import auth_for

    source = auth_for(args.masters)  # the admin's credentials, from the environment
    header = source.header() if source is not None else ""
    load = IdleLoad(args.hold, args.topic, args.partitions, args.fetches, args.streams, header)
    load.start()
    print(json.dumps({"ready": load.stats()}), flush=True)
    signals.wait()
    stats = load.stats()
    load.stop()
    print(json.dumps({"stopped": stats}), flush=True)
    return 0


class Holder:
    """The holder child process, started and stopped by PID."""

    def __init__(self, address: str, topic: str, partitions: int, fetches: int,
                 streams: int, masters: str) -> None:
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "load.bench_idle_waits", "--hold", address, "--topic", topic,
             "--masters", masters,
             "--partitions", str(partitions), "--fetches", str(fetches), "--streams",
             str(streams)], cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})

    def ready(self, timeout: float) -> dict[str, Any]:
        line = _read_line(self.popen, timeout)
        if not line:
            raise RuntimeError(f"holder exited or stalled (code {self.popen.poll()})")
        return json.loads(line)["ready"]

    def stop(self) -> dict[str, Any]:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            line = _read_line(self.popen, 40)
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)
            if line:
                return json.loads(line)["stopped"]
        return {}


def _read_line(popen: subprocess.Popen, timeout: float) -> str:
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(popen.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return got[0].strip() if got else ""


# ---------------------------------------------------------------- measuring


def latencies(producer, topic: str, sends: int, budget_s: float) -> dict[str, Any]:
    """Ack latency of ``sends`` one-at-a-time sends, stopping early after ``budget_s``."""
    from lib.errors import TubeqError

    took, failed, errors = [], 0, {}
    deadline = time.monotonic() + budget_s
    for _ in range(sends):
        if time.monotonic() > deadline:
            break
        started = time.perf_counter()
        try:
            producer.send_sync(topic, b"x" * 100, timeout=10)
        except TubeqError as exc:
            failed += 1
            errors.setdefault(exc.code, exc.message[:200])  # the first of each kind
            continue
        took.append((time.perf_counter() - started) * 1e3)
    took.sort()
    return {"sends": sends, "acked": len(took), "failed": failed, "errors": errors,
            "p50_ms": _pct(took, 50), "p99_ms": _pct(took, 99),
            "max_ms": round(took[-1], 2) if took else None}


def _pct(sorted_ms: list[float], pct: int) -> float | None:
    if not sorted_ms:
        return None
    return round(sorted_ms[min(len(sorted_ms) - 1, len(sorted_ms) * pct // 100)], 3)


def push_streams_open(metrics_address: str) -> int:
    text = urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith("tubeq_broker_push_streams "):
            return int(float(line.split()[1]))
    return 0


def wait_streams(metrics_address: str, want: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    seen = push_streams_open(metrics_address)
    while seen < want and time.monotonic() < deadline:
        time.sleep(0.2)
        seen = push_streams_open(metrics_address)
    return seen


def run(fetches: int, streams: int, sends: int, budget_s: float) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from lib.admin import AdminClient
    from lib.producer.producer import Producer
    from tests.cluster import Cluster  # the same process handling the tests use

    root = Path(tempfile.mkdtemp(prefix="tubeq-bench-idle-"))
    cluster = Cluster(root / "c")
    holder: Holder | None = None
    try:
        cluster.start(brokers=1)
        cluster.use_admin_env()  # auth is on: clients log in as the admin
        broker = cluster.brokers[1]
        with AdminClient(cluster.master_addresses) as admin:
            admin.create_topic("hot", partitions=1)
            admin.create_topic("idle", partitions=4)
        with Producer(cluster.master_addresses, linger_ms=0, retries=0,
                      request_timeout_ms=10_000) as producer:
            _warm_up(producer, "hot")
            idle = latencies(producer, "hot", sends, budget_s)
            _wait_hosted(cluster, broker.address, "idle")
            holder = Holder(broker.address, "idle", 4, fetches, streams,
                            cluster.master_addresses)
            opened = holder.ready(120)
            seen = wait_streams(broker.info["metrics"], streams, 30)
            time.sleep(1.0)  # the last long-polls reach the broker
            loaded = latencies(producer, "hot", sends, budget_s)
        held = holder.stop()
        holder = None
    finally:
        if holder is not None:
            holder.stop()
        cluster.stop_all()
        shutil.rmtree(root, ignore_errors=True)  # its data dirs are the benchmark's alone
    return {
        "setup": f"1 master, 1 broker, {os.cpu_count()} CPUs; send_sync of 100 B to an async "
                 f"topic, one at a time; {fetches} long-polls (30 s) and {streams} push streams "
                 "held by another process on a topic nobody writes",
        "idle_broker": idle,
        "with_waiters": loaded,
        "opened": opened,
        "push_streams_seen_by_broker": seen,
        "holder_at_end": held,
        "ratio": {k: _ratio(loaded[k], idle[k]) for k in ("p50_ms", "p99_ms")},
        "within_2x": (loaded["failed"] == 0 and loaded["acked"] == sends
                      and (_ratio(loaded["p50_ms"], idle["p50_ms"]) or 99) <= 2.0),
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def _warm_up(producer, topic: str, timeout: float = 30.0) -> None:
    """Acknowledged sends (a new topic is served after the broker's next heartbeat), then a
    few more so the first timed sends find warm connections."""
    wait_served(producer, [topic], timeout)
    for _ in range(20):
        producer.send_sync(topic, b"warm-up", timeout=10)


def _wait_hosted(cluster, address: str, topic: str, timeout: float = 30.0) -> None:
    """Until the broker serves ``topic`` (nothing is written to it: it must stay idle)."""
    from lib.errors import TubeqError
    from lib.rpc import invoke

    ch = cluster.channel(address)
    stub = broker_pb2_grpc.BrokerStub(ch)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                invoke(stub.ListOffsets, pb.ListOffsetsRequest(topic=topic), 5)
                return
            except TubeqError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        ch.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m load.bench_idle_waits", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fetches", type=int, default=1000, help="idle long-polling Fetch calls")
    p.add_argument("--streams", type=int, default=1000, help="idle push streams")
    p.add_argument("--sends", type=int, default=300, help="timed sends per phase")
    p.add_argument("--budget-s", type=float, default=60.0, help="time limit of each phase")
    p.add_argument("--quick", action="store_true", help="200 + 200 waiters, 50 sends, 30 s")
    p.add_argument("--hold", metavar="ADDRESS", help=argparse.SUPPRESS)
    p.add_argument("--topic", default="idle", help=argparse.SUPPRESS)
    p.add_argument("--masters", default="", help=argparse.SUPPRESS)
    p.add_argument("--partitions", type=int, default=4, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.hold:
        return hold(args)
    if args.quick:
        args.fetches, args.streams, args.sends, args.budget_s = 200, 200, 50, 30.0
    if min(args.fetches, args.streams) < 0 or args.sends < 1 or args.budget_s <= 0:
        p.error("--fetches/--streams must be >= 0, --sends >= 1, --budget-s > 0")
    stop_on_sigterm()
    print(json.dumps(run(args.fetches, args.streams, args.sends, args.budget_s), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
