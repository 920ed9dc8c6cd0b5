"""``tubeq bench produce|consume|e2e``: Kafka-perf-tool style figures against a running cluster.

Each prints msgs/s, MB/s and latency percentiles (``--json`` for one JSON object), with the
machine's loopback and disk ceilings measured in the same run so that figures from a noisy,
shared machine can be compared as ratios. A progress bar goes to stderr while it runs.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import TYPE_CHECKING

import click

from lib.errors import TopicExists, UnknownTopic

if TYPE_CHECKING:  # numpy is imported where it is used: every tubeq command imports this
    import numpy as np

    from lib.auth.client import Credentials
    from lib.tls import Tls

MB = 1_000_000
IDLE_END_S = 5.0
# At full speed one record in every ``latency_every(count)`` carries an ack-latency callback:
# about LATENCY_SAMPLES of them per run. A callback costs the producer a closure, a waiter and
# a call on settle: on every 16th record (as before) that was the benchmark's own cost.
LATENCY_SAMPLES = 2000
# A paced producer's values start with this and the send time (time.time_ns(), 8 bytes little
# endian): end-to-end latency from the send, to the nanosecond. A record's own timestamp is
# in whole milliseconds, floored, so latency read from it came out 0-1 ms late (p99 of three
# copies: about a quarter of a 4 ms round trip).
SENT_STAMP = b"tqsent\x00\x00"
STAMPED_BYTES = len(SENT_STAMP) + 8


def stamped(value: bytes) -> bytes:
    """``value`` with its head replaced by the send stamp (its size unchanged)."""
    return SENT_STAMP + time.time_ns().to_bytes(8, "little") + value[STAMPED_BYTES:]


def _as_is(value: bytes) -> bytes:
    return value


def sent_ns(value: bytes) -> int | None:
    """The send stamp of a value :func:`stamped` made, else None."""
    if value[:len(SENT_STAMP)] != SENT_STAMP or len(value) < STAMPED_BYTES:
        return None
    return int.from_bytes(value[len(SENT_STAMP):STAMPED_BYTES], "little")


def latency_every(count: int) -> int:
    """Sample one record's ack latency in every this many: LATENCY_SAMPLES over ``count``,
    at most one in 256 (a p99 of short runs still has samples above it)."""
    return max(1, min(256, count // LATENCY_SAMPLES))


def percentiles_ms(latencies_s: list[float] | np.ndarray) -> dict[str, float]:
    import numpy as np
    arr = np.asarray(latencies_s, dtype=np.float64) * 1000
    if len(arr) == 0:
        return {"mean_ms": 0.0, "p50_ms": 0.0, "p95_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}
    p50, p95, p99 = np.percentile(arr, [50, 95, 99])
    # to the microsecond: sub-millisecond latencies are compared as ratios (bench latency)
    return {"mean_ms": round(float(arr.mean()), 3), "p50_ms": round(float(p50), 3),
            "p95_ms": round(float(p95), 3),
            "p99_ms": round(float(p99), 3), "max_ms": round(float(arr.max()), 3)}


def loopback_ceiling_mbps(seconds: float = 1.0, chunk: int = 256 << 10) -> float:
    """Plain TCP over 127.0.0.1 with 256 KiB writes: what any RPC on this machine can reach."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    received = [0]

    def sink() -> None:
        conn, _ = server.accept()
        with conn:
            while data := conn.recv(1 << 20):
                received[0] += len(data)

    t = threading.Thread(target=sink, daemon=True)
    t.start()
    payload = os.urandom(chunk)
    with socket.create_connection(("127.0.0.1", port)) as c:
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            c.sendall(payload)
    t.join(10)
    server.close()
    return round(received[0] / (time.perf_counter() - start) / MB, 1)


def disk_ceiling_mbps(directory: str, total: int = 256 << 20, sync_every: int = 1 << 20) -> float:
    """Sequential writes with an fsync every MiB in ``directory`` (where the brokers write)."""
    os.makedirs(directory, exist_ok=True)
    block = os.urandom(sync_every)
    fd, path = tempfile.mkstemp(dir=directory, prefix="ceiling-")
    try:
        start = time.perf_counter()
        for _ in range(total // sync_every):
            os.write(fd, block)
            os.fsync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
    return round(total / elapsed / MB, 1)


def ceilings(disk_dir: str) -> dict[str, float]:
    return {"loopback_MBps": loopback_ceiling_mbps(), "disk_fsync_1MiB_MBps":
            disk_ceiling_mbps(disk_dir)}


def ensure_topic(masters: str, topic: str, partitions: int, durability: str, *,
                 credentials: Credentials | None = None, tls: Tls | None = None) -> None:
    """Create ``topic`` unless it exists. ``credentials`` and ``tls``, as every client takes
    them (None: the environment's); run_produce passes them to its Producer the same way."""
    from lib.admin import AdminClient

    client = AdminClient(masters, credentials=credentials, tls=tls)
    try:
        try:
            client.describe_topic(topic)
        except UnknownTopic:
            try:
                client.create_topic(topic, partitions=partitions, durability=durability)
            except TopicExists:
                pass
    finally:
        client.close()


def run_produce(masters: str, topic: str, count: int, size: int, rate: float | None,
                progress: bool, round_robin: bool = False, **producer_opts) -> dict:
    """Send ``count`` messages of ``size`` bytes (optionally at a steady ``rate``; with
    ``round_robin`` record i to partition ``i % partitions``, else the producer's sticky
    round robin).

    One warm-up record, not timed and not counted, goes first: a topic created just now is
    served once its brokers learn of it (at their next heartbeat), and that wait is not
    throughput. At a ``rate``, values of at least :data:`STAMPED_BYTES` carry their send time
    (:func:`stamped`), for end-to-end latency to the nanosecond."""
    import numpy as np

    from lib.cli.bench_txn import round_robin_send
    from lib.producer.producer import Producer

    value = os.urandom(size)
    stamp = stamped if rate and size >= STAMPED_BYTES else _as_is
    sent_at = np.zeros(count, dtype=np.float64)
    acked_at = np.zeros(count, dtype=np.float64)

    def done(i: int):
        def cb(_fut) -> None:
            acked_at[i] = time.perf_counter()
        return cb

    # Like Kafka's perf tool, keep no future per record: failures come from the producer's
    # counters, latency from a callback on a sample of records (on every record when paced).
    with Producer(masters, **producer_opts) as producer, \
            click.progressbar(length=count, label="produce", file=sys.stderr,
                              hidden=not progress) as bar:
        producer.send_sync(topic, stamp(value), timeout=60)
        send = round_robin_send(producer, topic) if round_robin else producer.send
        start = time.perf_counter()
        if rate:
            for i in range(count):
                due = start + i / rate
                while (now := time.perf_counter()) < due:
                    time.sleep(min(0.001, due - now))
                sent_at[i] = time.perf_counter()
                send(topic, stamp(value)).add_done_callback(done(i))
                if i % 10_000 == 9_999:
                    bar.update(10_000)
            bar.update(count % 10_000)
        else:
            every = latency_every(count)
            for first in range(0, count, every):  # the loop of a user's own code: send only
                sent_at[first] = time.perf_counter()
                send(topic, value).add_done_callback(done(first))
                for _ in range(min(every, count - first) - 1):
                    send(topic, value)
                bar.update(min(every, count - first))
        producer.flush()
        elapsed = time.perf_counter() - start
        failures = producer.metrics()["records_failed"]  # the warm-up record raised if it failed
    sampled = sent_at > 0
    return {"messages": count, "bytes": count * size, "seconds": round(elapsed, 3),
            "msgs_per_s": round(count / elapsed), "MBps": round(count * size / elapsed / MB, 1),
            "failures": failures,
            "ack_latency": percentiles_ms(acked_at[sampled] - sent_at[sampled])}


def run_produce_bulk(masters: str, topic: str, count: int, size: int, per_call: int,
                     **producer_opts) -> dict:
    """Send ``count`` messages of ``size`` bytes with ``send_batch``, ``per_call`` at a time;
    latency is per call (from the call to its future), one warm-up call untimed."""
    import numpy as np

    from lib.producer.producer import Producer

    values = [os.urandom(size)] * per_call
    latencies = []
    with Producer(masters, **producer_opts) as producer:
        producer.send_batch(topic, values[:1]).result(60)
        futures = []
        start = time.perf_counter()
        for sent in range(0, count, per_call):
            n = min(per_call, count - sent)
            called = time.perf_counter()
            fut = producer.send_batch(topic, values if n == per_call else values[:n])
            fut.add_done_callback(lambda _f, t=called: latencies.append(time.perf_counter() - t))
            futures.append((fut, n))
        producer.flush()
        elapsed = time.perf_counter() - start
        failures = sum(n for f, n in futures if f.exception() is not None)
    return {"messages": count, "bytes": count * size, "seconds": round(elapsed, 3),
            "msgs_per_s": round(count / elapsed), "MBps": round(count * size / elapsed / MB, 1),
            "failures": failures, "per_call": per_call,
            "call_latency": percentiles_ms(np.array(latencies))}


def run_consume(masters: str, topic: str, count: int, progress: bool,
                timeout: float = 60.0, e2e: bool = False, from_end: bool = False, *,
                isolation: str = "read_uncommitted", credentials: Credentials | None = None,
                tls: Tls | None = None) -> dict:
    """Read ``count`` messages from the start (or the end) of every partition (no group),
    at ``isolation`` (the PullConsumer's isolation_level)."""
    from lib.admin import AdminClient
    from lib.consumer.pull import PullConsumer
    from lib.types import TopicPartition

    admin = AdminClient(masters, credentials=credentials, tls=tls)
    parts = [p.partition for p in admin.describe_topic(topic).partitions]
    admin.close()
    consumer = PullConsumer(masters, auto_offset_reset="earliest", isolation_level=isolation,
                            credentials=credentials, tls=tls)
    consumer.assign([TopicPartition(topic, p) for p in parts])
    if from_end:
        consumer.seek_to_end()
    else:
        consumer.seek_to_beginning()
    got, nbytes, lat, lat_sent = 0, 0, [], []
    deadline = time.monotonic() + timeout
    with click.progressbar(length=count, label="consume", file=sys.stderr,
                           hidden=not progress) as bar:
        start = time.perf_counter()
        idle_since = time.monotonic()
        while got < count and time.monotonic() < deadline:
            records = consumer.poll(timeout=0.5)
            if records:
                idle_since = time.monotonic()
            elif got and time.monotonic() - idle_since > IDLE_END_S:
                break  # the producer is done: what did not come is reported as incomplete
            if e2e and records:
                now_ns = time.time_ns()
                lat.extend((now_ns / 1e6 - r.timestamp) / 1000 for r in records)
                stamps = [ns for ns in map(sent_ns, (r.value for r in records)) if ns]
                lat_sent.extend((now_ns - ns) / 1e9 for ns in stamps)
            got += len(records)
            nbytes += sum(len(r.value) for r in records)
            bar.update(len(records))
        elapsed = time.perf_counter() - start
    consumer.close()
    out = {"messages": got, "bytes": nbytes, "seconds": round(elapsed, 3),
           "msgs_per_s": round(got / elapsed), "MBps": round(nbytes / elapsed / MB, 1),
           "complete": got >= count}
    if e2e:  # from the send stamps when every record had one, else the records' timestamps
        by_stamp = len(lat_sent) == len(lat) > 0
        out["e2e_latency"] = percentiles_ms(lat_sent if by_stamp else lat)
        out["e2e_clock"] = "send stamp (ns)" if by_stamp else "record timestamp (ms)"
        out["e2e_latency_from_record_timestamps"] = percentiles_ms(lat)
    return out


def _print(result: dict, as_json: bool) -> None:
    click.echo(json.dumps(result, indent=2) if as_json else render(result))


def render(result: dict, indent: int = 0) -> str:
    """A result as an aligned table for people: one figure per line, sections indented,
    numbers with thousands separators (``--json`` is for scripts)."""
    width = max((len(str(k)) for k in result), default=0)
    lines = []
    for key, value in result.items():
        pad = " " * indent
        if isinstance(value, dict):
            lines += [f"{pad}{key}", render(value, indent + 2)]
        else:
            lines.append(f"{pad}{key:<{width}}  {_figure(value)}")
    return "\n".join(line for line in lines if line)


def _figure(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"


@click.group()
def bench() -> None:
    """Throughput and latency against a running cluster (see also load/)."""


common = [
    click.option("--topic", default="bench", show_default=True),
    click.option("--messages", "count", default=200_000, show_default=True),
    click.option("--size", default=1024, show_default=True, help="Value bytes."),
    click.option("--partitions", default=6, show_default=True, help="When creating the topic."),
    click.option("--durability", type=click.Choice(["async", "sync"]), default="async"),
    click.option("--json", "as_json", is_flag=True),
    click.option("--no-ceilings", is_flag=True, help="Skip the loopback/disk ceilings."),
    click.option("--data-dir", default="tubeq-data", show_default=True,
                 help="Where to measure the disk ceiling (the brokers' disk)."),
]


def with_common(fn):
    for opt in reversed(common):
        fn = opt(fn)
    return fn


@bench.command("produce")
@with_common
@click.option("--rate", type=float, default=None, help="Messages per second (default: max).")
@click.option("--linger-ms", type=int, default=5, show_default=True)
@click.option("--batch-bytes", type=int, default=None,
              help="Producer batch_bytes (default: the producer's, 2 MiB).")
@click.option("--bulk", type=int, default=0, show_default=True,
              help="Send with Producer.send_batch, this many values per call (0: send()).")
@click.option("--idempotent/--no-idempotent", default=True, show_default=True,
              help="The producer's idempotence (its default: on).")
@click.option("--round-robin", is_flag=True,
              help="Record i to partition i % partitions (else the sticky round robin).")
@click.option("--transactional-id", default=None,
              help="Send in transactions of --txn-records records, as this transactional_id.")
@click.option("--txn-records", type=int, default=1000, show_default=True,
              help="Records per transaction (with --transactional-id).")
@click.option("--abort-every", type=int, default=0, show_default=True,
              help="Abort every Nth transaction (0: commit all).")
@click.pass_context
def bench_produce(ctx, topic, count, size, partitions, durability, as_json, no_ceilings, data_dir,
                  rate, linger_ms, batch_bytes, bulk, idempotent, round_robin, transactional_id,
                  txn_records, abort_every) -> None:
    """Send --messages records as fast as the producer takes them (or at --rate)."""
    from lib.cli.bench_txn import check_txn_options, run_produce_txn

    masters = ctx.obj["masters"]
    check_txn_options(transactional_id, txn_records, abort_every, bulk, rate)
    ensure_topic(masters, topic, partitions, durability)
    opts = dict(linger_ms=linger_ms, idempotent=idempotent)
    if batch_bytes is not None:
        opts["batch_bytes"] = batch_bytes
    if transactional_id:
        produced = run_produce_txn(masters, topic, count, size, txn_records, abort_every,
                                   round_robin, not as_json, transactional_id=transactional_id,
                                   **opts)
    elif bulk > 0:
        produced = run_produce_bulk(masters, topic, count, size, bulk, **opts)
    else:
        produced = run_produce(masters, topic, count, size, rate, not as_json, round_robin,
                               **opts)
    result = {"produce": produced, "value_bytes": size, "topic": topic}
    if not no_ceilings:
        result["ceilings"] = ceilings(data_dir)
    _print(result, as_json)


@bench.command("consume")
@with_common
@click.option("--e2e", is_flag=True, help="Also report end-to-end latency from timestamps.")
@click.option("--from-end", is_flag=True, help="Only messages produced from now on.")
@click.option("--timeout", type=float, default=120.0, show_default=True)
@click.option("--isolation", type=click.Choice(["read_uncommitted", "read_committed"]),
              default="read_uncommitted", show_default=True,
              help="The consumer's isolation_level.")
@click.pass_context
def bench_consume(ctx, topic, count, size, partitions, durability, as_json, no_ceilings,
                  data_dir, e2e, from_end, timeout, isolation) -> None:
    masters = ctx.obj["masters"]
    result = {"consume": run_consume(masters, topic, count, not as_json, timeout, e2e, from_end,
                                     isolation=isolation),
              "topic": topic, "isolation": isolation}
    if not no_ceilings:
        result["ceilings"] = ceilings(data_dir)
    _print(result, as_json)


@bench.command("e2e")
@with_common
@click.option("--rate", type=float, default=10_000, show_default=True)
@click.pass_context
def bench_e2e(ctx, topic, count, size, partitions, durability, as_json, no_ceilings, data_dir,
              rate) -> None:
    """Steady-rate producer here, consumer in a child process: end-to-end latency."""
    masters = ctx.obj["masters"]
    ensure_topic(masters, topic, partitions, durability)
    consumer = subprocess.Popen(
        [sys.executable, "-m", "lib.cli", "--masters", masters, "bench", "consume", "--topic",
         topic, "--messages", str(count), "--e2e", "--from-end", "--json", "--no-ceilings",
         "--timeout", str(count / rate + 60)],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        time.sleep(5.0)  # let the consumer start and reach the end of the backlog
        produced = run_produce(masters, topic, count, size, rate, not as_json, linger_ms=1)
        out, _ = consumer.communicate(timeout=count / rate + 120)
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait()
    result = {"rate": rate, "produce": produced, **json.loads(out or b"{}")}
    if not no_ceilings:
        result["ceilings"] = ceilings(data_dir)
    _print(result, as_json)


def run_latency(masters: str, topic: str, count: int, size: int) -> dict:
    """``send_sync`` one record at a time to partition 0, interleaved with a bare gRPC unary
    call (the standard health check, a few bytes each way) to the same broker: the ceiling
    of a synchronous send, measured in the same run."""
    import numpy as np
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from lib.admin import AdminClient
    from lib.producer.producer import Producer
    from lib.rpc import channel
    from lib.tls import Tls

    with AdminClient(masters) as admin:
        address = admin.describe_topic(topic).partitions[0].address
    value = os.urandom(size)
    ch = channel(address, Tls.from_env())  # as the producer reaches it
    check = health_pb2_grpc.HealthStub(ch).Check
    request = health_pb2.HealthCheckRequest(service="")
    sends, trips = np.zeros(count), np.zeros(count)
    try:
        with Producer(masters, linger_ms=0) as producer:
            producer.send_sync(topic, value, partition=0, timeout=60)  # warm-up: routes, channel
            check(request, timeout=10)
            for i in range(count):
                t0 = time.perf_counter()
                check(request, timeout=10)
                t1 = time.perf_counter()
                producer.send_sync(topic, value, partition=0, timeout=10)
                sends[i], trips[i] = time.perf_counter() - t1, t1 - t0
    finally:
        ch.close()
    send, trip = percentiles_ms(sends), percentiles_ms(trips)
    return {"messages": count, "value_bytes": size, "send_sync": send,
            "grpc_unary_round_trip": trip,
            "ratio": {k: round(send[k] / trip[k], 2) for k in ("p50_ms", "p99_ms") if trip[k]}}


@bench.command("latency")
@with_common
@click.pass_context
def bench_latency(ctx, topic, count, size, partitions, durability, as_json, no_ceilings,
                  data_dir) -> None:
    """send_sync one at a time (p50/p99) beside a bare gRPC round trip to the same broker."""
    masters = ctx.obj["masters"]
    ensure_topic(masters, topic, partitions, durability)
    _print({"latency": run_latency(masters, topic, min(count, 20_000), size)}, as_json)


def register(main: click.Group) -> None:
    main.add_command(bench)
