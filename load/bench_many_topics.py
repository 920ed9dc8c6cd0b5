"""Produce throughput with 1, 100 and 1,000 topics on one broker, with its RSS and open files.

    .venv/bin/python -m load.bench_many_topics [--topics 1,100,1000] [--messages 600000]
    .venv/bin/python -m load.bench_many_topics --quick

Many topics is TubeMQ's strength over Kafka: the partitions of a store share one data log, so a
topic costs the broker an index file and a little memory, not a file handle per segment per
partition. Starts 1 master and 1 broker as real processes on 127.0.0.1 (``tests/cluster.py``),
then for each topic count (created as it goes, 1 partition each, ``--durability`` async unless
told) sends ``--messages`` records of ``--size`` bytes from one producer, ``--run`` records to
a topic before moving to the next, round robin over every topic, as many producers each writing
their own topic would. Each phase reports msgs/s, the CPU seconds of the broker, the producer
(this process), the master and the whole machine (also per record, in us), the peak of what the
broker acknowledged and had not written yet and how often appends waited for its flushers, its
RSS and open file descriptors after it (all, and those on its data files; taken once every
topic's files exist: a store creates them when it opens), and every phase's throughput as a
ratio to the first (one topic) in the same run. ``--flusher-threads`` sets the broker's pool.
``--same-batches P`` adds the ceiling of the last phase: one topic of P partitions written in
batches as small as each of the many topics gets (``same_batches``, and the last phase's
``vs_same_batches``).
Prints one JSON object; every process is stopped by PID at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from load import stop_on_sigterm, wait_served
from load.cpu_profile import machine_seconds
from load.soak import Watched, sample

ROOT = Path(__file__).resolve().parents[1]
TOPIC = "many-{:05d}"
SAME_BATCHES_TOPIC = "same-batches"


def process_figures(pid: int) -> dict[str, float]:
    """RSS (MiB), open descriptors, threads and CPU seconds (user + system) of a process."""
    figures = sample(Watched("broker", pid))  # no data dir: the phases count files instead
    if figures is None:
        raise RuntimeError(f"process {pid} is gone")
    figures.pop("disk_mib")
    with open(f"/proc/{pid}/status") as f:
        figures["threads"] = next(int(line.split()[1]) for line in f
                                  if line.startswith("Threads:"))
    return figures


WATCHED = ("tubeq_broker_unwritten_bytes", "tubeq_broker_unwritten_waits",
           "tubeq_broker_segment_file_opens",
           "tubeq_gc_full_collection_seconds_total", "tubeq_gc_longest_full_collection_seconds")


class UnwrittenWatch:
    """Samples the broker's acknowledged-but-unwritten bytes while a phase runs: whether
    its flushers keep up (the async loss window of docs/durability.md stretches when they do
    not) and how often appends waited for them; and the pauses of its full garbage
    collections (lib/gc_freeze.py). It asks for those figures only (Prometheus' ``name[]``
    filter): the whole page, four series per topic, scraped four times a second cost the
    broker about a quarter of its CPU at 10,000 topics."""

    def __init__(self, data_dir: Path, every_s: float = 0.25) -> None:
        ready = json.loads((data_dir / "ready.json").read_text())
        self.url = f"http://{ready['metrics']}/metrics?" + "&".join(
            f"name[]={name}" for name in WATCHED)
        self.every_s, self.peak, self._stop = every_s, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def gauges(self) -> dict[str, float]:
        with urllib.request.urlopen(self.url, timeout=5) as answer:
            lines = answer.read().decode().splitlines()
        return {name: float(line.split()[-1]) for line in lines for name in WATCHED
                if line.startswith(name + " ")}

    def __enter__(self) -> UnwrittenWatch:
        self._start = self.gauges()
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.peak = max(self.peak, self.gauges()["tubeq_broker_unwritten_bytes"])

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        end = self.gauges()
        full_s = "tubeq_gc_full_collection_seconds_total"
        self.figures = {"unwritten_peak_mib": round(self.peak / 2**20, 1),
                        "unwritten_waits": int(end["tubeq_broker_unwritten_waits"]
                                               - self._start["tubeq_broker_unwritten_waits"]),
                        # files reopened past the descriptor cap (absent: an older build)
                        "segment_file_opens": int(
                            end.get("tubeq_broker_segment_file_opens", 0)
                            - self._start.get("tubeq_broker_segment_file_opens", 0)),
                        # absent from a broker without lib/gc_freeze.py (an older build)
                        "broker_gc_full_s": round(end.get(full_s, 0) - self._start.get(
                            full_s, 0), 3),
                        "broker_gc_longest_full_s": end.get(
                            "tubeq_gc_longest_full_collection_seconds")}


def cpu_split(master_pid: int) -> dict[str, float]:
    """CPU seconds so far of this process (the producer: the phase's window holds nothing
    else of ours), the master, and the whole machine (kernel threads included): where the
    machine's two cores go besides the broker."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return {"producer_cpu_s": own.ru_utime + own.ru_stime,
            "master_cpu_s": process_figures(master_pid)["cpu_s"],
            "machine_cpu_s": machine_seconds()[0]}


def cpu_since(cpu_before: dict[str, float], master_pid: int, broker_before_s: float,
              broker_after_s: float) -> dict[str, float]:
    """:func:`cpu_split`'s seconds since ``cpu_before``, with the broker's beside them."""
    cpu = {k: v - cpu_before[k] for k, v in cpu_split(master_pid).items()}
    cpu["broker_cpu_s"] = broker_after_s - broker_before_s
    return cpu


def per_record(cpu: dict[str, float], messages: int) -> dict[str, float]:
    """Each process's CPU in us per record sent."""
    return {k.removesuffix("_cpu_s"): round(v / messages * 1e6, 2) for k, v in cpu.items()}


def data_fds(pid: int, data_dir: Path) -> int:
    """Descriptors of ``pid`` open on files under ``data_dir``: what its topics cost it,
    without the sockets, pipes and event fds whose count moves on its own."""
    root, count = str(data_dir.resolve()), 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith(root + os.sep)
        except OSError:
            pass  # closed meanwhile
    return count


ROUTINE_EVENTS = ('"topic.opened"', '"master.admin"', '"topic.created"')  # one per topic


def files_in(data_dir: Path, topics: int, timeout: float = 10.0) -> dict[str, int]:
    """The data and index files under ``data_dir``, once there are at least ``topics`` of
    each (up to ``timeout`` s): a store creates its files when it opens, which a broker may
    still be doing for the last topics created, and the phase's figures are taken once it
    has."""
    deadline = time.monotonic() + timeout
    while True:
        files = {"data_files": sum(1 for _ in data_dir.rglob("*.log")),
                 "index_files": sum(1 for _ in data_dir.rglob("*.idx"))}
        if min(files.values()) >= topics or time.monotonic() >= deadline:
            return files
        time.sleep(0.05)


def create_topics(admin, have: int, want: int, durability: str = "async") -> float:
    """Topics ``have`` .. ``want`` - 1 (1 partition each); returns the seconds it took."""
    started = time.monotonic()
    for i in range(have, want):
        admin.create_topic(TOPIC.format(i), partitions=1, durability=durability)
    return round(time.monotonic() - started, 1)


def produce(producer, topics: int, messages: int, size: int, run: int,
            name: str = "") -> dict[str, Any]:
    """Send ``messages`` records, ``run`` at a time to each topic in turn (``name``: to that
    one topic); msgs/s to the last acknowledgement."""
    value = os.urandom(size)
    names = [name] if name else [TOPIC.format(i) for i in range(topics)]
    send = producer.send
    failed_before = producer.metrics()["records_failed"]
    started = time.perf_counter()
    sent, turn = 0, 0
    while sent < messages:
        topic = names[turn % topics]
        n = min(run, messages - sent)
        for _ in range(n):
            send(topic, value)
        sent, turn = sent + n, turn + 1
    producer.flush()
    elapsed = time.perf_counter() - started
    return {"messages": messages, "seconds": round(elapsed, 2),
            "msgs_per_s": round(messages / elapsed),
            "MBps": round(messages * size / elapsed / 2**20, 1),
            "failures": producer.metrics()["records_failed"] - failed_before}


def broker_toml(settings: dict[str, int]) -> str:
    """The broker's config file of ``--broker-setting``s: ``store.KEY`` goes to its store
    table (``[broker.store]``: every store's defaults), the rest to ``[broker]``."""
    top = {k: v for k, v in settings.items() if not k.startswith("store.")}
    store = {k.removeprefix("store."): v for k, v in settings.items() if k.startswith("store.")}
    text = "[broker]\n" + "".join(f"{k} = {v}\n" for k, v in top.items())
    if store:
        text += "[broker.store]\n" + "".join(f"{k} = {v}\n" for k, v in store.items())
    return text


def same_batches_phase(cluster, messages: int, size: int, batch_records: int,
                       partitions: int, durability: str) -> dict[str, Any]:
    """The ceiling of the phases with many topics: one topic of ``partitions`` partitions
    written in batches of ``batch_records`` records, the size each of those topics gets (a
    producer can batch no more than a topic receives in a row). Its batches cost the
    producer and the broker what theirs do, on one store: what is left between the two is
    the cost of the topics themselves (their files, flushes and descriptors)."""
    from lib.admin import AdminClient
    from lib.producer.producer import Producer
    from lib.records import FRAME_HEADER_SIZE

    with AdminClient(cluster.master_addresses) as admin:
        admin.create_topic(SAME_BATCHES_TOPIC, partitions=partitions, durability=durability)
    batch_bytes = batch_records * (size + FRAME_HEADER_SIZE)
    with Producer(cluster.master_addresses, batch_bytes=batch_bytes) as producer:
        wait_served(producer, [SAME_BATCHES_TOPIC])
        pid, master_pid = cluster.brokers[1].pid, cluster.masters[0].pid
        before, cpu_before = process_figures(pid), cpu_split(master_pid)
        result = produce(producer, 1, messages, size, messages, SAME_BATCHES_TOPIC)
        cpu = cpu_since(cpu_before, master_pid, before["cpu_s"], process_figures(pid)["cpu_s"])
    return {"topics": 1, "partitions": partitions, "batch_records": batch_records, **result,
            "us_per_record": per_record(cpu, messages)}


def run(counts: list[int], messages: int, size: int, run_len: int,
        flusher_threads: int | None = None, durability: str = "async",
        settings: dict[str, int] | None = None,
        same_batches_partitions: int = 0) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from lib.admin import AdminClient
    from lib.producer.producer import Producer
    from master.config import MasterConfig
    from tests.cluster import Cluster  # the same process handling the tests use

    root = Path(tempfile.mkdtemp(prefix="tubeq-bench-topics-"))
    broker_args = []
    settings = dict(settings or {})
    if flusher_threads is not None:
        settings["flusher_threads"] = flusher_threads
    if settings:
        config = root / "broker.toml"
        config.write_text(broker_toml(settings))
        broker_args = ["--config", str(config)]
    master_args = []
    if same_batches_partitions and max(counts) >= MasterConfig.max_topics:
        config = root / "master.toml"  # room for the ceiling's topic beside the many
        config.write_text(f"[master]\nmax_topics = {max(counts) + 1}\n")
        master_args = ["--config", str(config)]
    cluster = Cluster(root / "c", master_args=master_args, broker_args=broker_args)
    phases, same = [], None
    try:
        cluster.start(brokers=1)
        cluster.use_admin_env()  # auth is on: clients log in as the admin
        broker = cluster.brokers[1]
        idle = process_figures(broker.pid)
        have = 0
        with AdminClient(cluster.master_addresses) as admin, \
                Producer(cluster.master_addresses) as producer:
            for count in counts:
                created_s = create_topics(admin, have, count, durability)
                have = max(have, count)
                warmed = time.monotonic()
                wait_served(producer, [TOPIC.format(i) for i in range(count)])
                warm_up_s = round(time.monotonic() - warmed, 1)  # routes age from here (30 s)
                before = process_figures(broker.pid)
                cpu_before = cpu_split(cluster.masters[0].pid)
                # every topic gets records: 10,000 topics at 500 each would need 5 M
                run_here = max(1, min(run_len, messages // count))
                with UnwrittenWatch(broker.data_dir) as unwritten:
                    result = produce(producer, count, messages, size, run_here)
                files = files_in(broker.data_dir, count)
                after = process_figures(broker.pid)
                cpu = cpu_since(cpu_before, cluster.masters[0].pid, before["cpu_s"],
                                after["cpu_s"])
                phases.append({
                    "topics": count, **result, "run": run_here, "create_topics_s": created_s,
                    "warm_up_s": warm_up_s,
                    **{k: round(v, 2) for k, v in cpu.items()},
                    "us_per_record": per_record(cpu, messages),
                    "broker_rss_mib": after["rss_mib"], "broker_open_fds": after["open_fds"],
                    "broker_threads": after["threads"],
                    "broker_data_fds": data_fds(broker.pid, broker.data_dir),
                    **unwritten.figures,
                    **files})
        if same_batches_partitions and phases:
            same = same_batches_phase(cluster, messages, size, phases[-1]["run"],
                                      same_batches_partitions, durability)
    except BaseException:
        for proc in [*cluster.masters, *cluster.brokers.values()]:  # why, before it is gone
            lines = [line for line in proc.log_tail(100_000).splitlines()
                     if not any(e in line for e in ROUTINE_EVENTS)]
            print(f"--- {proc.data_dir.name} log:", *lines[-40:], sep="\n", file=sys.stderr)
        raise
    finally:
        cluster.stop_all()
        shutil.rmtree(root, ignore_errors=True)  # 1,000 topics' files
    first = phases[0]["msgs_per_s"] if phases else 0
    for phase in phases:
        phase["vs_first"] = round(phase["msgs_per_s"] / first, 2) if first else None
    if same is not None:
        same["vs_first"] = round(same["msgs_per_s"] / first, 2) if first else None
        phases[-1]["vs_same_batches"] = round(phases[-1]["msgs_per_s"] / same["msgs_per_s"], 2)
    return {
        "setup": f"1 master, 1 broker, {os.cpu_count()} CPUs; one producer process sending "
                 f"{messages} records of {size} B per phase, {run_len} to a topic (fewer when "
                 "that would leave topics out) then the next; "
                 f"{durability} topics of 1 partition",
        "flusher_threads": flusher_threads or "default",
        "broker_settings": settings,
        "broker_idle": idle,
        "phases": phases,
        "same_batches": same,
        "within_10pct_of_first": all((p["vs_first"] or 0) >= 0.9 for p in phases),
        "failures": sum(p["failures"] for p in phases),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m load.bench_many_topics", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--topics", default="1,100,1000", help="topic counts, ascending")
    p.add_argument("--messages", type=int, default=600_000, help="records sent per phase")
    p.add_argument("--size", type=int, default=1024, help="bytes per record")
    p.add_argument("--run", type=int, default=500, help="records sent to a topic in a row")
    p.add_argument("--flusher-threads", type=int, help="the broker's flusher_threads (default: "
                   "its own default)")
    p.add_argument("--broker-setting", action="append", default=[], metavar="KEY=INT",
                   help="an integer setting of the broker's config (repeatable), e.g. "
                   "held_write_bytes=0, or of its stores' as store.KEY, e.g. "
                   "store.page_cache_shared_bytes=0")
    p.add_argument("--durability", choices=("async", "sync"), default="async",
                   help="the topics' durability (sync: each append waits for its fsync)")
    p.add_argument("--same-batches", type=int, default=0, metavar="PARTITIONS",
                   help="then a ceiling phase: one topic of PARTITIONS partitions written in "
                   "batches of the last phase's size (its records per topic in a row); the "
                   "last phase's vs_same_batches is its rate over this one's")
    p.add_argument("--quick", action="store_true", help="1 and 5 topics, 5,000 records")
    args = p.parse_args(argv)
    if args.quick:
        args.topics, args.messages = "1,5", 5_000
    try:
        counts = [int(x) for x in args.topics.split(",")]
    except ValueError:
        p.error(f"--topics takes counts separated by commas, got {args.topics!r}")
    if not counts or min(counts) < 1 or counts != sorted(counts):
        p.error("--topics must be ascending counts >= 1")
    if args.messages < 1 or args.size < 1 or args.run < 1:
        p.error("--messages, --size and --run must be >= 1")
    settings = {}
    for item in args.broker_setting:
        key, _, value = item.partition("=")
        if not key.removeprefix("store.").isidentifier() or not value.lstrip("-").isdigit():
            p.error(f"--broker-setting takes KEY=INT, got {item!r}")
        settings[key] = int(value)
    if args.same_batches < 0:
        p.error("--same-batches takes a partition count >= 1 (0: no such phase)")
    stop_on_sigterm()
    result = run(counts, args.messages, args.size, args.run, args.flusher_threads,
                 args.durability, settings, args.same_batches)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
