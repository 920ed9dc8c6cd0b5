"""How fast the portal answers on a big cluster: every page and API route with ``--topics``
topics and ``--groups`` consumer groups, and the message browser's newest 100 of a topic of
``--big-gb`` GB.

    .venv/bin/python -m load.bench_portal [--topics 1000] [--groups 200] [--big-gb 10]
        [--repeats 20] [--json]

Starts 1 master, 1 broker and ``python -m portal_web`` as real processes on 127.0.0.1
(``tests/cluster.py``), fills the cluster (topics of one partition; groups recorded by an
offsets reset; the big topic written with ``send_batch`` in 1 KiB records), logs in as the
admin over HTTP as a browser would, then asks each page ``--repeats`` times in turn and prints
p50, p95 and the slowest in ms per page, each p50 as a ratio to its target (the issue's: every
page <= 300 ms, the newest 100 messages of the big topic <= 500 ms). Every process is stopped
by PID at the end and the data removed.
"""
from __future__ import annotations

import argparse
import http.cookiejar
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from lib.cli.bench import render
from load import stop_on_sigterm

PAGE_TARGET_MS = 300.0
BROWSE_TARGET_MS = 500.0
RECORD = 1024
BATCH = 512  # records per send_batch call


def fill(masters: str, credentials: Any, topics: int, groups: int, big_gb: float) -> dict:
    """Create the topics and groups and write the big topic; what was made, and how long."""
    from lib import Producer
    from lib.admin import AdminClient

    started = time.monotonic()
    with AdminClient(masters, credentials=credentials, timeout=30) as admin:
        for i in range(topics):
            admin.create_topic(f"t{i:05d}", partitions=1)
        admin.create_topic("big", partitions=1)
        _wait_hosted(admin, "big")
        _wait_hosted(admin, f"t{topics - 1:05d}")
        for i in range(groups):
            admin.reset_group_offsets(f"g{i:04d}", f"t{i % topics:05d}", to_earliest=True)
    made_s = time.monotonic() - started
    records = int(big_gb * (1 << 30)) // RECORD
    value = b"x" * RECORD
    started = time.monotonic()
    with Producer(masters, credentials=credentials) as producer:
        pending = []
        for sent in range(0, records, BATCH):
            pending.append(producer.send_batch("big", [value] * min(BATCH, records - sent)))
            if len(pending) >= 64:
                pending.pop(0).result(120)
        for future in pending:
            future.result(120)
    return {"topics": topics, "groups": groups, "big_records": records,
            "big_bytes": records * RECORD, "create_s": round(made_s, 1),
            "write_s": round(time.monotonic() - started, 1)}


def _wait_hosted(admin: Any, topic: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not all(p.available and p.latest >= 0 for p in admin.describe_topic(topic).partitions):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic} was not hosted in {timeout} s")
        time.sleep(0.2)


def log_in(url: str, user: str, password: str) -> urllib.request.OpenerDirector:
    opener = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    form = opener.open(f"{url}/login", timeout=30).read().decode()
    token = re.search(r'name="login_token" value="([^"]+)"', form).group(1)
    data = urllib.parse.urlencode({"user": user, "password": password,
                                   "login_token": token}).encode()
    opener.open(f"{url}/login", data=data, timeout=30).read()
    return opener


def pages(topics: int, groups: int) -> dict[str, tuple[str, float]]:
    """name -> (path, target in ms)."""
    mid_topic, mid_group = f"t{topics // 2:05d}", f"g{groups // 2:04d}"
    found = {
        "dashboard": "/", "topics": "/topics", "topics_page_5": "/topics?page=5",
        "topics_search": "/topics?q=t004", "topic": f"/topics/{mid_topic}",
        "groups": "/groups", "group": f"/groups/{mid_group}", "brokers": "/brokers",
        "broker": "/brokers/1", "audit": "/audit", "security_users": "/security/users",
        "api_overview": "/api/v1/overview", "api_topics": "/api/v1/topics",
        "api_group": f"/api/v1/groups/{mid_group}",
    }
    timed = {name: (path, PAGE_TARGET_MS) for name, path in found.items()}
    timed["browse_newest_100"] = ("/topics/big/messages?mode=newest&partition=0&limit=100",
                                  BROWSE_TARGET_MS)
    return timed


def measure(opener: urllib.request.OpenerDirector, url: str,
            timed: dict[str, tuple[str, float]], repeats: int) -> dict[str, dict]:
    """Each page once per round, in turn, ``repeats`` rounds (drift falls on all alike)."""
    samples: dict[str, list[float]] = {name: [] for name in timed}
    for _ in range(repeats):
        for name, (path, _target) in timed.items():
            started = time.perf_counter()
            with opener.open(url + path, timeout=60) as answer:
                answer.read()
                if answer.status != 200:
                    raise RuntimeError(f"{path}: HTTP {answer.status}")
            samples[name].append((time.perf_counter() - started) * 1000)
    out = {}
    for name, values in samples.items():
        values.sort()
        p50 = statistics.median(values)
        target = timed[name][1]
        out[name] = {"p50_ms": round(p50, 1),
                     "p95_ms": round(values[min(len(values) - 1, int(len(values) * 0.95))], 1),
                     "max_ms": round(values[-1], 1), "target_ms": target,
                     "p50_to_target": round(p50 / target, 2), "met": p50 <= target}
    return out


def run(topics: int, groups: int, big_gb: float, repeats: int) -> dict:
    from tests.cluster import Cluster, ServerProcess  # the process handling the tests use

    root = Path(tempfile.mkdtemp(prefix="tubeq-bench-portal-"))
    cluster = Cluster(root / "cluster")
    portal = None
    try:
        cluster.start(brokers=1)
        creds = cluster.admin_credentials()
        made = fill(cluster.master_addresses, creds, topics, groups, big_gb)
        portal = ServerProcess("portal_web", root / "portal", [
            "--data-dir", str(root / "portal"), "--masters", cluster.master_addresses,
            "--host", "127.0.0.1", "--port", "0"]).start()
        url = portal.info["url"]
        opener = log_in(url, creds.user, creds.password)
        results = measure(opener, url, pages(topics, groups), repeats)
        return {"bench": "portal", "cluster": made, "repeats": repeats, "pages": results,
                "all_met": all(r["met"] for r in results.values())}
    finally:
        if portal is not None:
            portal.stop()
        cluster.stop_all()
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m load.bench_portal", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--topics", type=int, default=1000)
    p.add_argument("--groups", type=int, default=200)
    p.add_argument("--big-gb", type=float, default=10.0, help="size of the browsed topic")
    p.add_argument("--repeats", type=int, default=20, help="rounds over every page")
    p.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    args = p.parse_args(argv)
    stop_on_sigterm()
    if args.topics < 1 or args.groups < 1 or args.big_gb <= 0 or args.repeats < 1:
        p.error("--topics, --groups, --repeats must be >= 1 and --big-gb > 0")
    result = run(args.topics, args.groups, args.big_gb, args.repeats)
    table = {name: {k: v for k, v in r.items() if k != "met"}
             for name, r in result["pages"].items()}
    print(json.dumps(result, indent=2) if args.json else render(table))
    return 0 if result["all_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
