"""What security costs: produce and consume throughput with auth off, with token auth, and with
token auth over TLS, in one run, side by side.

    .venv/bin/python -m load.bench_security [--count 200000] [--size 1024] [--rounds 5] [--json]

Starts three clusters of 1 master and 1 broker as real processes on 127.0.0.1
(``tests/cluster.py``) and keeps them up for the whole run:

- ``none``: ``auth = "none"``, plaintext; its clients have no credentials;
- ``token``: token auth (the default), plaintext; its clients log in as the admin;
- ``tls``: token auth over TLS, with a private CA (``lib/auth/pki.py``).

A round writes ``--count`` records to a new async topic of 6 partitions and reads them back
(``run_produce`` and ``run_consume`` of ``lib/cli/bench.py``, in this process), on every
setup in turn; the order turns by one each round, so that the drift of this small, shared
machine falls on every setup alike. The median round counts. Prints msgs/s and MB/s per setup
and the ratios of ``token`` and ``tls`` to ``none`` (the target: ``tls`` at least 0.8 of
``none``, produce and consume), as a table or as one JSON object (``--json``).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lib.cli.bench import ensure_topic, render, run_consume, run_produce
from load import stop_on_sigterm

if TYPE_CHECKING:
    from lib.auth.client import Credentials
    from lib.tls import Tls
    from tests.cluster import Cluster

PARTITIONS = 6
TLS_TARGET = 0.8  # tls over none, at least, for produce and for consume
FIGURES = ("produce_msgs_per_s", "produce_MBps", "consume_msgs_per_s", "consume_MBps")
# Each setup's clients get the credentials and TLS it names, not the caller's environment's
# (a user's own credentials file would still log the "none" clients in: that server ignores it).
CLIENT_ENV = ("TUBEQ_USER", "TUBEQ_PASSWORD", "TUBEQ_API_KEY", "TUBEQ_TOKEN",
              "TUBEQ_CREDENTIALS_FILE", "TUBEQ_TLS", "TUBEQ_TLS_CA", "TUBEQ_TLS_CERT",
              "TUBEQ_TLS_KEY")


@dataclass(frozen=True)
class Setup:
    """One running cluster and how its clients reach it (None: no login / plaintext)."""

    name: str
    masters: str
    credentials: Credentials | None
    tls: Tls | None


def start_setups(root: Path, clusters: list[Cluster]) -> list[Setup]:
    """Start the three clusters; each goes into ``clusters`` before it starts, so that the
    caller stops whatever did start if a later one fails."""
    from lib.auth.pki import LocalPki
    from lib.tls import Tls
    from tests.cluster import Cluster  # the same process handling the tests use

    pki = LocalPki(root / "pki").ensure([])
    tls = Tls(str(pki.ca))
    plans = (("none", ["--auth", "none"], None, False), ("token", [], None, True),
             ("tls", pki.server_args(), tls, True))
    setups = []
    for name, args, client_tls, login in plans:
        cluster = Cluster(root / name, master_args=args, broker_args=args, tls=client_tls)
        clusters.append(cluster)
        cluster.start(brokers=1)
        setups.append(Setup(name, cluster.master_addresses,
                            cluster.admin_credentials() if login else None, client_tls))
    return setups


def one_run(setup: Setup, topic: str, count: int, size: int) -> dict[str, float]:
    """Produce ``count`` records of ``size`` bytes to a new topic, then read them all back;
    a failed or missing record ends the benchmark (its figures would mean nothing)."""
    opts = {"credentials": setup.credentials, "tls": setup.tls}
    ensure_topic(setup.masters, topic, PARTITIONS, "async", **opts)
    produced = run_produce(setup.masters, topic, count, size, None, False, **opts)
    if produced["failures"]:
        raise RuntimeError(f"{setup.name}: {produced['failures']} of {count} records failed")
    in_topic = count + 1  # with run_produce's warm-up record, which is not timed
    consumed = run_consume(setup.masters, topic, in_topic, False, **opts)
    if not consumed["complete"]:
        raise RuntimeError(f"{setup.name}: consumed {consumed['messages']} of {in_topic}")
    return {"produce_msgs_per_s": produced["msgs_per_s"], "produce_MBps": produced["MBps"],
            "consume_msgs_per_s": consumed["msgs_per_s"], "consume_MBps": consumed["MBps"],
            "records_produced": in_topic, "records_consumed": consumed["messages"]}


def interleaved(setups: list[Setup], count: int, size: int,
                rounds: int) -> dict[str, list[dict[str, float]]]:
    """Every round runs every setup once, starting one setup later than the round before."""
    runs: dict[str, list[dict[str, float]]] = {s.name: [] for s in setups}
    for n in range(rounds):
        for setup in setups[n % len(setups):] + setups[:n % len(setups)]:
            got = one_run(setup, f"sec-{setup.name}-{n}", count, size)
            runs[setup.name].append(got)
            print(f"round {n + 1}/{rounds} {setup.name:<5}  produce "
                  f"{got['produce_msgs_per_s']:>8,} msgs/s  consume "
                  f"{got['consume_msgs_per_s']:>8,} msgs/s", file=sys.stderr, flush=True)
    return runs


def median(runs: list[dict[str, float]]) -> dict[str, float]:
    """Per figure the median over the rounds (msgs/s whole, MB/s to one decimal)."""
    mid = {k: statistics.median(r[k] for r in runs) for k in FIGURES}
    return {k: round(v) if k.endswith("msgs_per_s") else round(v, 1) for k, v in mid.items()}


def ratios(figures: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """token/none and tls/none, of msgs/s (MB/s give the same: same records everywhere)."""
    base = figures["none"]
    return {op: {f"{name}_vs_none": round(figures[name][f"{op}_msgs_per_s"]
                                          / base[f"{op}_msgs_per_s"], 3)
                 for name in ("token", "tls")}
            for op in ("produce", "consume")}


def run(count: int, size: int, rounds: int) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    for var in CLIENT_ENV:
        os.environ.pop(var, None)
    root = Path(tempfile.mkdtemp(prefix="tubeq-bench-security-"))
    clusters: list[Cluster] = []
    try:
        setups = start_setups(root, clusters)
        runs = interleaved(setups, count, size, rounds)
    finally:
        for cluster in clusters:
            cluster.stop_all()
        shutil.rmtree(root, ignore_errors=True)
    figures = {name: median(r) for name, r in runs.items()}
    rel = ratios(figures)
    met = {op: r["tls_vs_none"] >= TLS_TARGET for op, r in rel.items()}
    return {
        "setup": f"per setup 1 master, 1 broker, async topics of {PARTITIONS} partitions; "
                 f"{count} records of {size} B per run, {rounds} rounds interleaved, median "
                 f"round; clients in one process; {os.cpu_count()} CPUs",
        "setups": {"none": "auth = none, plaintext", "token": "token auth, plaintext",
                   "tls": "token auth, TLS"},
        "figures": figures,
        "ratios": rel,
        "target": {"tls_vs_none_at_least": TLS_TARGET},
        "met": met,
        "all_met": all(met.values()),
        "rounds": runs,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m load.bench_security", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, default=200_000, help="records per run")
    p.add_argument("--size", type=int, default=1024, help="value bytes")
    p.add_argument("--rounds", type=int, default=5, help="runs per setup; the median counts")
    p.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    args = p.parse_args(argv)
    stop_on_sigterm()
    if args.count < 1 or args.size < 1 or args.rounds < 1:
        p.error("--count, --size and --rounds must be >= 1")
    result = run(args.count, args.size, args.rounds)
    table = {k: v for k, v in result.items() if k != "rounds"}  # every round: in --json
    print(json.dumps(result, indent=2) if args.json else render(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
