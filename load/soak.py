"""The soak's sampler: RSS, open descriptors, CPU and disk use of every process, over a run.

A soak (``tubeq load run --scenario soak``) is the mixed load held for a long time; what it
checks is that nothing creeps: memory, descriptors and disk of every server stay flat under a
steady load. The sampler reads ``/proc`` every ``every_s`` seconds for each watched process
(the cluster's masters, brokers and portal from ``cluster.json`` of ``tubeq cluster up``, or
the run's own cluster, and the Locust process), and the bytes under each server's data dir.
At the end it writes ``soak.csv`` (one row per process and sample) and ``soak.html`` (one SVG
chart per figure, a line per process) into the run folder, and judges memory: every
process's RSS at the end within ``RSS_GROWTH_LIMIT`` of its RSS at the baseline (one minute
in, or a third of the run when that is shorter, since a process warms up first). Locust's
processes are charted but not judged: their loss ledger grows with every message by design.
"""
from __future__ import annotations

import csv
import html
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RSS_GROWTH_LIMIT = 0.10
BASELINE_S = 60.0
FIGURES = ("rss_mib", "open_fds", "cpu_s", "disk_mib")


@dataclass(frozen=True)
class Watched:
    name: str
    pid: int
    data_dir: Path | None = None
    judged: bool = True  # False: charted, not held to flat memory (the load generator)


def cluster_processes(cluster_json: Path) -> list[Watched]:
    """The servers ``tubeq cluster up`` started, from its ``cluster.json``; each child's data
    dir is the cluster's data dir / its name."""
    try:
        summary = json.loads(cluster_json.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the cluster's processes from {cluster_json}: {exc} "
                         "(give --cluster-json of a running `tubeq cluster up`)") from None
    return [Watched(name, int(info["pid"]), cluster_json.parent / name)
            for name, info in summary.items() if isinstance(info, dict) and "pid" in info]


def sample(w: Watched) -> dict[str, float] | None:
    """One sample of ``w``, or None once the process is gone."""
    try:
        with open(f"/proc/{w.pid}/status") as f:
            rss_kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        with open(f"/proc/{w.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        fds = len(os.listdir(f"/proc/{w.pid}/fd"))
    except (OSError, StopIteration):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return {"rss_mib": round(rss_kib / 1024, 1), "open_fds": fds,
            "cpu_s": round((int(fields[11]) + int(fields[12])) / ticks, 2),
            "disk_mib": round(_dir_bytes(w.data_dir) / 2**20, 1) if w.data_dir else 0.0}


def _dir_bytes(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass  # deleted by retention meanwhile
    return total


@dataclass
class Sampler:
    """Samples what ``watched()`` lists (asked at every sample: a restarted process has a new
    PID) every ``every_s`` on a thread of its own until :meth:`stop`."""

    watched: Callable[[], list[Watched]]
    every_s: float = 5.0
    rows: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-sampler", daemon=True)
        self._t0 = 0.0
        self._unjudged: set[str] = set()

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while True:
            self.sample_once()
            if self._stop.wait(self.every_s):
                self.sample_once()  # the end of the run is the figure that counts
                return

    def sample_once(self) -> None:
        t = round(time.monotonic() - self._t0, 1)
        for w in self.watched():
            figures = sample(w)
            if figures is not None:
                self.rows.append({"t_s": t, "process": w.name, "pid": w.pid, **figures})
                if not w.judged:
                    self._unjudged.add(w.name)

    def report(self, folder: Path) -> dict[str, Any]:
        """Write soak.csv and soak.html into ``folder``; per process the baseline and end
        figures, and whether memory stayed flat."""
        with (folder / "soak.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, ["t_s", "process", "pid", *FIGURES])
            writer.writeheader()
            writer.writerows(self.rows)
        (folder / "soak.html").write_text(chart_page(self.rows))
        processes = {}
        end_t = max((r["t_s"] for r in self.rows), default=0.0)
        baseline_t = min(BASELINE_S, end_t / 3)
        for name in dict.fromkeys(r["process"] for r in self.rows):
            mine = [r for r in self.rows if r["process"] == name]
            base = next((r for r in mine if r["t_s"] >= baseline_t), mine[0])
            last = mine[-1]
            growth = (last["rss_mib"] - base["rss_mib"]) / max(base["rss_mib"], 1e-9)
            processes[name] = {
                "samples": len(mine), "baseline_t_s": base["t_s"], "end_t_s": last["t_s"],
                "rss_baseline_mib": base["rss_mib"], "rss_end_mib": last["rss_mib"],
                "rss_growth": round(growth, 3), "rss_flat": growth <= RSS_GROWTH_LIMIT,
                "judged": name not in self._unjudged,
                "open_fds_baseline": base["open_fds"], "open_fds_end": last["open_fds"],
                "disk_end_mib": last["disk_mib"], "cpu_s": last["cpu_s"]}
        return {"every_s": self.every_s, "rss_growth_limit": RSS_GROWTH_LIMIT,
                "processes": processes,
                "flat_memory": all(p["rss_flat"] for p in processes.values() if p["judged"]),
                "csv": "soak.csv", "chart": "soak.html"}


def chart_page(rows: list[dict[str, Any]]) -> str:
    """An HTML page with one SVG line chart per figure (a line per process), no scripts."""
    names = list(dict.fromkeys(r["process"] for r in rows))
    charts = "\n".join(_chart(rows, names, figure) for figure in FIGURES)
    return ("<!doctype html><meta charset=utf-8><title>tubeq soak</title>"
            "<style>body{font-family:sans-serif} svg{border:1px solid #ccc;margin:8px}</style>"
            f"<h1>tubeq soak: {len(names)} processes, {len(rows)} samples</h1>{charts}")


COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f")


def _chart(rows: list[dict[str, Any]], names: list[str], figure: str,
           width: int = 720, height: int = 220) -> str:
    pad = 40
    t_max = max((r["t_s"] for r in rows), default=1.0) or 1.0
    y_max = max((r[figure] for r in rows), default=1.0) or 1.0
    lines, legend = [], []
    for i, name in enumerate(names):
        colour = COLOURS[i % len(COLOURS)]
        points = " ".join(
            f"{pad + r['t_s'] / t_max * (width - 2 * pad):.1f},"
            f"{height - pad - r[figure] / y_max * (height - 2 * pad):.1f}"
            for r in rows if r["process"] == name)
        lines.append(f'<polyline fill="none" stroke="{colour}" points="{points}"/>')
        legend.append(f'<text x="{pad + 110 * i}" y="14" fill="{colour}" font-size="12">'
                      f"{html.escape(name)}</text>")
    axes = (f'<text x="{pad}" y="{height - 8}" font-size="11">0 s</text>'
            f'<text x="{width - pad - 40}" y="{height - 8}" font-size="11">{t_max:.0f} s</text>'
            f'<text x="2" y="{pad}" font-size="11">{y_max:g}</text>'
            f'<text x="{width / 2 - 30}" y="{height - 8}" font-size="12">'
            f"{html.escape(figure)}</text>")
    return (f'<svg width="{width}" height="{height}" role="img" aria-label="{figure}">'
            f"{''.join(legend)}{axes}{''.join(lines)}</svg>")


def local_processes(cluster) -> list[Watched]:
    """The processes of a ``tests/cluster.py`` Cluster (the run's own) that are running."""
    return [Watched(proc.data_dir.name, proc.pid, proc.data_dir)
            for proc in cluster.all_processes() if proc.alive()]
