"""Where a command's CPU goes, by kind of process: ``python -m load.cpu_profile -- make test``.

Why: on a small machine the test suite (and many benchmarks) is bound by CPU, not by waiting,
so the question "what makes it slow" is "which processes burn the CPU". This runs the command,
reads every process's CPU time from ``/proc`` twice a second, and sorts it into kinds (Spark's
JVM, Spark's Python workers, brokers, masters, the portal, the ``tubeq`` CLI, Chromium, test
processes, other), next to the whole machine's busy and idle seconds from ``/proc/stat`` (which
also count what ended between two samples, and anything else the machine ran). JSON on stdout
(``--out`` for a file). ``--hog N`` runs N busy loops beside the command (stopped by PID at
the end), to prove that something passes on a machine busy with other work. Linux only.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import click

TICK = os.sysconf("SC_CLK_TCK")
# (kind, a substring of the command line): the first that matches names the process
HOG = "while True: pass"
KINDS = (
    ("hog", HOG),
    ("spark_jvm", "org.apache.spark"),
    ("spark_python", "pyspark.daemon"),
    ("spark_python", "spark_sink.daemon"),
    ("spark_python", "pyspark/python"),
    ("spark_python", "pyspark.sql.worker"),
    ("spark_python", "pyspark.sql.streaming"),
    ("broker", "-m broker"),
    ("master", "-m master"),
    ("portal", "portal_web"),
    ("tubeq_cli", "lib.cli"),
    ("tubeq_cli", "bin/tubeq"),
    ("chromium", "chrom"),
    ("locust", "locust"),
    ("tests", "pytest"),
    ("tests", "xdist"),
    ("tests", "exec(eval(sys.stdin"),  # pytest-xdist's workers (execnet)
)


def kind_of(cmdline: str) -> str:
    return next((kind for kind, mark in KINDS if mark in cmdline), "other")


def machine_seconds() -> tuple[float, float]:
    """(busy, idle) CPU-seconds of the whole machine since boot (iowait counts as idle)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields) - idle) / TICK, idle / TICK


def processes() -> dict[int, tuple[float, str]]:
    """pid -> (user + system CPU-seconds, command line)."""
    out = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            cmdline = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # it ended while we looked
            continue
        fields = stat.rsplit(")", 1)[1].split()
        out[int(entry.name)] = ((int(fields[11]) + int(fields[12])) / TICK, cmdline)
    return out


def start_hogs(n: int) -> list[subprocess.Popen]:
    """``n`` processes that each keep a core busy until killed."""
    return [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(n)]


def profile(command: list[str], interval: float = 0.5, top: int = 0) -> dict:
    before = {pid: cpu for pid, (cpu, _) in processes().items()}
    busy0, idle0 = machine_seconds()
    start = time.monotonic()
    seen: dict[int, tuple[float, str]] = {}
    child = subprocess.Popen(command)
    while child.poll() is None:
        for pid, (cpu, cmdline) in processes().items():
            # an ended process not yet reaped has lost its command line: keep the one seen
            seen[pid] = (cpu - before.get(pid, 0.0), cmdline or seen.get(pid, (0, ""))[1])
        time.sleep(interval)
    busy1, idle1 = machine_seconds()
    by_kind: Counter[str] = Counter()
    by_command: Counter[str] = Counter()
    for cpu, cmdline in seen.values():
        by_kind[kind_of(cmdline)] += cpu
        by_command[cmdline[:160]] += cpu
    return {"command": command, "returncode": child.returncode,
            "wall_s": round(time.monotonic() - start, 1),
            "machine_busy_s": round(busy1 - busy0, 1), "machine_idle_s": round(idle1 - idle0, 1),
            "seen_cpu_s": round(sum(by_kind.values()), 1),
            "by_kind_s": {k: round(v, 1) for k, v in by_kind.most_common()},
            "top_commands_s": {k: round(v, 1) for k, v in by_command.most_common(top)}}


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the JSON here too.")
@click.option("--interval", default=0.5, show_default=True, help="Seconds between samples.")
@click.option("--hog", default=0, show_default=True,
              help="Busy loops to run beside COMMAND (their CPU is the kind hog).")
@click.option("--top", default=0, show_default=True,
              help="Also list the TOP command lines (first 160 characters) by CPU.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def main(out: Path | None, interval: float, hog: int, top: int,
         command: tuple[str, ...]) -> None:
    """Run COMMAND and print where its CPU went; exits with COMMAND's status."""
    hogs = start_hogs(hog)
    try:
        result = profile(list(command), interval, top)
    finally:
        for process in hogs:
            process.kill()
            process.wait()
    result["hogs"] = hog
    text = json.dumps(result, indent=2)
    click.echo(text)
    if out is not None:
        out.write_text(text + "\n")
    sys.exit(result["returncode"])


if __name__ == "__main__":
    main()
