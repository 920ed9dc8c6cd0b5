"""``tubeq load run`` / ``tubeq load ui``: Locust over load/locustfile.py with a scenario, then
the loss accounting of load/ledger.py.

A run makes the topic if it is missing, runs ``locust --headless`` (``--workers N``: N local
worker processes under one Locust master, the distributed mode), writes Locust's CSV and HTML
report into the run folder, reads the topic back, and writes ``summary.json``: Locust's
figures per request name, messages acknowledged per second, and what was produced,
acknowledged, consumed, lost, duplicated and out of order. The run fails (exit 1) when Locust
saw a failure or a guarantee of the docs was broken.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from lib.admin import AdminClient
from lib.cli.common import DEFAULT_CLUSTER_JSON
from lib.errors import TopicExists
from lib.process import end_group, group_pids, terminate
from load.chaos import TARGETS, Chaos, LocalCluster
from load.ledger import log_reader, verify
from load.soak import Sampler, Watched, cluster_processes, local_processes

ROOT = Path(__file__).resolve().parents[1]
LOCUSTFILE = ROOT / "load" / "locustfile.py"
LEDGER_SAVE_S = 600.0  # a worker's ledger of tens of millions of records takes a while

# user class -> weight, or a fixed count (a number of such users before the weighted ones)
SCENARIOS: dict[str, dict[str, dict[str, int]]] = {
    "produce": {"ProducerUser": {"weight": 1}},
    "consume": {"ProducerUser": {"fixed_count": 1}, "PullConsumerUser": {"weight": 1}},
    "mixed": {"ProducerUser": {"weight": 2}, "PullConsumerUser": {"weight": 2},
              "PushConsumerUser": {"weight": 1}},
    "portal": {"ProducerUser": {"fixed_count": 1}, "PortalUser": {"weight": 1}},
}
SCENARIOS["soak"] = SCENARIOS["mixed"]  # held for long, with every process sampled


@dataclass(frozen=True)
class LoadPlan:
    """One load run; ``options`` are the locustfile's own (``--message-bytes``, ``--rate``,
    ...), passed through as they are."""

    scenario: str
    masters: str
    users: int = 10
    spawn_rate: float = 5.0
    duration: str = "1m"
    topic: str = "load"
    partitions: int = 6
    durability: str = "sync"
    workers: int = 0
    portal_url: str = ""
    out: Path = Path("load-runs")
    options: tuple[str, ...] = field(default_factory=tuple)
    chaos_s: float = 0.0  # > 0: a cluster of the run's own, a fault every chaos_s seconds
    chaos_targets: tuple[str, ...] = TARGETS
    chaos_faults: int = 0  # at most this many faults (0: one every chaos_s to the end)
    cluster_json: Path = Path(DEFAULT_CLUSTER_JSON)  # soak: the servers to sample
    sample_every_s: float = 5.0  # soak

    def validate(self) -> None:
        if self.scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {self.scenario!r}: one of "
                             f"{', '.join(SCENARIOS)}")
        if self.scenario == "portal" and not self.portal_url:
            raise ValueError("the portal scenario needs --portal-url (make run prints it)")
        if self.users < 1 or self.spawn_rate <= 0 or self.workers < 0:
            raise ValueError("--users must be >= 1, --spawn-rate > 0 and --workers >= 0")
        if self.durability not in ("sync", "async"):
            raise ValueError("--durability must be sync or async")
        if self.sample_every_s <= 0:
            raise ValueError("--sample-every must be > 0 seconds")
        if self.chaos_s < 0 or self.chaos_faults < 0:
            raise ValueError("--chaos must be a positive interval, --chaos-faults >= 0")
        if self.chaos_s and self.scenario == "portal":
            raise ValueError("--chaos runs a cluster of its own, without a portal: choose "
                             "the produce, consume or mixed scenario")


def locust_command(plan: LoadPlan, folder: Path, headless: bool = True) -> list[str]:
    users = SCENARIOS[plan.scenario]
    config = [{"user_class_name": name, **attrs} for name, attrs in users.items()]
    cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE),
           "--tubeq-masters", plan.masters, "--tubeq-topic", plan.topic,
           "--ledger-dir", str(folder / "ledger"), "-u", str(plan.users),
           "-r", str(plan.spawn_rate), "--config-users", json.dumps(config),
           "--host", plan.portal_url or "http://127.0.0.1:8080", *plan.options, *users]
    if plan.workers:
        cmd += ["--processes", str(plan.workers)]
    if headless:
        cmd += ["--headless", "-t", plan.duration, "--stop-timeout", "10", "--only-summary",
                "--csv", str(folder / "locust"), "--html", str(folder / "report.html"),
                "--json-file", str(folder / "locust_final")]
    else:
        cmd += ["--web-host", "127.0.0.1"]
    return cmd


def ensure_topic(plan: LoadPlan) -> None:
    with AdminClient(plan.masters) as admin:
        try:
            admin.create_topic(plan.topic, partitions=plan.partitions,
                               durability=plan.durability)
        except TopicExists:
            pass
        deadline = time.monotonic() + 30
        while not all(p.available and p.latest >= 0
                      for p in admin.describe_topic(plan.topic).partitions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {plan.topic} has partitions not available after 30 s")
            time.sleep(0.2)


def new_folder(out: Path, scenario: str) -> Path:
    folder = out / f"{time.strftime('%Y%m%d-%H%M%S')}-{scenario}"
    n = 1
    while folder.exists():
        n += 1
        folder = out / f"{time.strftime('%Y%m%d-%H%M%S')}-{scenario}-{n}"
    folder.mkdir(parents=True)
    return folder


def locust_stats(folder: Path) -> dict[str, dict[str, float]]:
    """Locust's final figures per request name and "Aggregated", from its ``--json-file``
    (written after the last user stopped; its CSV is written a moment before and can miss
    the requests that finished while users stopped)."""
    path = folder / "locust_final.json"
    if not path.exists():
        return {}
    entries = json.loads(path.read_text())
    out = {e["name"]: _figures([e]) for e in entries}
    if entries:
        out["Aggregated"] = _figures(entries)
    return out


def _figures(entries: list[dict[str, Any]]) -> dict[str, float]:
    """Counts, rate, mean/p50/p99/max (ms) and mean size of Locust stats entries taken together
    (their ``response_times`` are histograms: rounded ms -> count)."""
    histogram: dict[int, int] = {}
    for e in entries:
        for ms, count in e["response_times"].items():
            histogram[int(float(ms))] = histogram.get(int(float(ms)), 0) + count
    requests = sum(e["num_requests"] for e in entries)
    span = max(e["last_request_timestamp"] or 0 for e in entries) - \
        min(e["start_time"] for e in entries)
    return {"requests": requests, "failures": sum(e["num_failures"] for e in entries),
            "rps": round(requests / span, 2) if span > 0 else 0.0,
            "avg_ms": round(sum(e["total_response_time"] for e in entries)
                            / max(requests, 1), 3),
            "p50_ms": _percentile(histogram, 0.50), "p99_ms": _percentile(histogram, 0.99),
            "max_ms": round(max(e["max_response_time"] or 0 for e in entries), 1),
            "avg_bytes": round(sum(e["total_content_length"] for e in entries)
                               / max(requests, 1), 1)}


def _percentile(histogram: dict[int, int], q: float) -> float:
    total = sum(histogram.values())
    seen = 0
    for ms in sorted(histogram):
        seen += histogram[ms]
        if seen >= q * total:
            return float(ms)
    return 0.0


def run(plan: LoadPlan) -> tuple[dict[str, Any], Path]:
    """Run the scenario; returns the summary and the folder holding it and the reports. With
    ``chaos_s`` the run starts its own cluster and injects faults (load/chaos.py)."""
    plan.validate()
    if not plan.chaos_s:
        servers = cluster_processes(plan.cluster_json) if plan.scenario == "soak" else []
        ensure_topic(plan)
        return _run(plan, new_folder(plan.out, plan.scenario), None, lambda: servers)
    folder = new_folder(plan.out, f"{plan.scenario}-chaos")
    with LocalCluster(logs_to=folder / "cluster-logs") as local:
        plan = replace(plan, masters=local.masters)
        ensure_topic(plan)
        chaos = Chaos(local, plan.chaos_s, plan.topic, plan.chaos_targets,
                      plan.chaos_faults)
        return _run(plan, folder, chaos, lambda: local_processes(local.cluster))


def locust_processes(pgid: int, workers: bool) -> list[Watched]:
    """Locust's master and (``workers``: the run asked for ``--processes``) its workers,
    charted beside the servers but not judged. Workers are forked (they keep the master's
    command line); any other process of the group (a helper Locust or a library starts for a
    moment) is not one, and is left out. A helper keeps that command line too until it execs:
    without workers asked for, only the master is charted (CI once charted such a fork)."""
    if not workers:
        return [Watched("locust", pgid, judged=False)]
    leader = command_line(pgid)
    return [Watched("locust" if pid == pgid else f"locust-worker-{pid}", pid, judged=False)
            for pid in sorted(group_pids(pgid))
            if pid == pgid or (leader is not None and command_line(pid) == leader)]


def command_line(pid: int) -> bytes | None:
    """The process's argv as Linux keeps it (None once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None


def _run(plan: LoadPlan, folder: Path, chaos: Chaos | None,
         servers: Callable[[], list[Watched]]) -> tuple[dict[str, Any], Path]:
    started = time.monotonic()
    locust = sampler = None
    try:
        if chaos is not None:
            chaos.start()
        with (folder / "locust.log").open("wb") as log:  # the child keeps its own copy
            # A session of its own: its --processes workers share its group, and outlive it
            locust = subprocess.Popen(locust_command(plan, folder), cwd=ROOT,
                                      env={**os.environ, "PYTHONPATH": str(ROOT)},
                                      stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True)
        if plan.scenario == "soak":
            sampler = Sampler(lambda: [*servers(), *locust_processes(locust.pid, plan.workers > 0)],
                              plan.sample_every_s)
            sampler.start()
        locust.wait()
        # Forked workers still save their ledgers after the Locust master has exited.
        end_group(locust.pid, LEDGER_SAVE_S)
    finally:
        if locust is not None:
            terminate(locust)  # only if interrupted: Locust ends by itself at --run-time
            end_group(locust.pid, 15)
        faults = chaos.stop() if chaos is not None else []
        if sampler is not None:
            sampler.stop()
    elapsed = time.monotonic() - started
    soak = sampler.report(folder) if sampler is not None else None
    stats = locust_stats(folder)
    accounting = verify(folder / "ledger", log_reader(plan.masters),
                        sync_topics={plan.topic} if plan.durability == "sync" else set(),
                        loss_allowed=bool(faults))
    unrecovered = [f"{f['target']} (killed at {f['at_s']} s): {f['error']}"
                   for f in faults if f["error"]]
    failures = stats.get("Aggregated", {}).get("failures", 0)
    summary = {
        "scenario": plan.scenario, "users": plan.users, "workers": plan.workers,
        "duration": plan.duration, "elapsed_s": round(elapsed, 1), "topic": plan.topic,
        "durability": plan.durability, "locust_exit_code": locust.returncode,
        "acknowledged_per_s": round(accounting["acknowledged"] / max(elapsed, 1e-9), 1),
        "locust": stats, "accounting": accounting,
        "chaos": {"interval_s": plan.chaos_s, "targets": list(plan.chaos_targets),
                  "faults": faults, "unrecovered": unrecovered} if chaos else None,
        "soak": soak,
        "ok": (accounting["ok"] and failures == 0 and locust.returncode == 0
               and not unrecovered and (soak is None or soak["flat_memory"])),
    }
    (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary, folder


def ui(plan: LoadPlan) -> int:
    """Locust's web UI on 127.0.0.1:8089 with the scenario's users; Ctrl-C stops it."""
    plan.validate()
    ensure_topic(plan)
    folder = new_folder(plan.out, f"{plan.scenario}-ui")
    return subprocess.call(locust_command(plan, folder, headless=False), cwd=ROOT,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
