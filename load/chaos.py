"""``tubeq load run --chaos INTERVAL``: faults during the load, on a cluster the run starts itself.

A chaos run cannot borrow the user's cluster: it kills processes, and it may kill only what it
started. It starts 3 masters (fixed ports, so a restarted master keeps its address and the
clients' master list stays right) and 2 brokers on 127.0.0.1 in a temp dir, with the process
handling the tests use (``tests/cluster.py``), stops every one by PID at the end, keeps their
logs in the run folder (``cluster-logs/``) and removes their data.

Every ``interval_s`` the next target in turn gets SIGKILL and is started again at once:

- ``broker``: the brokers in turn. Recovered when the master lists the restarted broker as
  alive at its new address and every partition of a probe topic (two per broker) takes a sync
  send again.
- ``master``: the active master. Recovered when an admin write (an ``alter_topic`` of the probe
  topic) succeeds, which needs a new active master; the killed one comes back as a standby.
- ``consumer``: one of two consumer processes the chaos runs in a group of their own
  (``<group>-chaos``) on the load's topic. Recovered when the master shows the group with two
  members again (the dead one expired after its session timeout, the new one joined) and every
  partition assigned.

Each fault is reported (target, PID, seconds into the run, recovery seconds, or the error if
it did not recover within ``RECOVERY_TIMEOUT_S``). The probe topic is the run's own: the load's
topic holds only stamped messages, which the loss accounting reads back.
"""
from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lib.process import terminate

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ("broker", "master", "consumer")
CONSUMERS = 2  # the chaos consumers' own group: one is killed at a time
RECOVERY_TIMEOUT_S = 60.0
MASTERS, BROKERS = 3, 2


def more_faults_wanted(made: int, limit: int) -> bool:
    """Another fault is due unless ``limit`` (0: none) faults were made."""
    return not limit or made < limit


def parse_interval(text: str) -> float:
    """``"30"``, ``"30s"``, ``"2m"`` -> seconds; ValueError naming the option."""
    value = text.strip().lower()
    scale = 60.0 if value.endswith("m") else 1.0
    try:
        seconds = float(value.rstrip("sm")) * scale
    except ValueError:
        seconds = -1.0
    if seconds <= 0:
        raise ValueError(f"--chaos takes an interval such as 30s or 2m, got {text!r}")
    return seconds


def parse_targets(text: str) -> tuple[str, ...]:
    """``"broker,master"`` -> the targets in turn; ValueError naming an unknown one."""
    targets = tuple(t.strip() for t in text.split(",") if t.strip())
    unknown = [t for t in targets if t not in TARGETS]
    if not targets or unknown:
        raise ValueError(f"--chaos-targets takes {' and/or '.join(TARGETS)} separated by commas, "
                         f"got {text!r}")
    return targets


@dataclass
class Fault:
    target: str  # "broker 2", "master 0"
    pid: int
    at_s: float  # seconds since the chaos started
    recovered_s: float | None = None
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"target": self.target, "pid": self.pid, "at_s": round(self.at_s, 2),
                "recovered_s": None if self.recovered_s is None else round(self.recovered_s, 2),
                "error": self.error}


class LocalCluster:
    """The chaos run's own cluster (module docstring); a context manager that stops it all."""

    def __init__(self, logs_to: Path | None = None) -> None:
        sys.path.insert(0, str(ROOT))
        from tests.cluster import Cluster  # the same process handling the tests use

        self.logs_to = logs_to
        self.root = Path(tempfile.mkdtemp(prefix="tubeq-chaos-"))
        self.cluster = Cluster(self.root, masters=MASTERS)

    def __enter__(self) -> LocalCluster:
        try:
            self.cluster.start(brokers=BROKERS)
            self.cluster.use_admin_env()  # auth is on: the load's clients log in as the admin
        except BaseException:
            self.cluster.stop_all()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop every process; keep their logs in ``logs_to`` (if set), drop their data."""
        self.cluster.stop_all()
        if self.logs_to is not None:
            self.logs_to.mkdir(parents=True, exist_ok=True)
            for proc in self.cluster.all_processes():
                log = proc.data_dir / "log.txt"
                if log.exists():
                    shutil.copyfile(log, self.logs_to / f"{proc.data_dir.name}.log")
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def masters(self) -> str:
        return self.cluster.master_addresses


@dataclass
class Chaos:
    """Kills and restarts processes of ``local`` every ``interval_s`` until stopped."""

    local: LocalCluster
    interval_s: float
    topic: str  # the load's: the chaos consumers read it
    targets: tuple[str, ...] = TARGETS
    max_faults: int = 0  # 0: no limit
    faults: list[Fault] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos", daemon=True)
        self._started = 0.0
        self._admin = self._producer = None
        self.probe_topic = f"{self.topic}-chaos-probe"
        self.group = f"{self.topic}-chaos"
        self._consumers: list[subprocess.Popen] = []
        self._logs = (self.local.logs_to or self.local.root) / "chaos-consumers.log"

    def start(self) -> None:
        from lib import Producer
        from lib.admin import AdminClient

        self._admin = AdminClient(self.local.masters, timeout=10)
        self._admin.create_topic(self.probe_topic, partitions=2 * BROKERS, durability="sync")
        self._producer = Producer(self.local.masters, linger_ms=0)
        if "consumer" in self.targets:
            self._logs.parent.mkdir(parents=True, exist_ok=True)
            self._consumers = [self._start_consumer() for _ in range(CONSUMERS)]
        self._started = time.monotonic()
        warm = Fault("warm-up", 0, 0.0)
        self._recover(warm, self._probe_sends)  # the probe topic is served before any fault
        if warm.error:
            raise RuntimeError(f"the chaos probe topic is not served: {warm.error}")
        self._started = time.monotonic()
        self._thread.start()

    def stop(self) -> list[dict[str, Any]]:
        """Stop injecting (a fault under way finishes its recovery); returns the faults."""
        self._stop.set()
        if self._thread.ident is not None:  # start() may have failed before it
            self._thread.join(RECOVERY_TIMEOUT_S + 30)
        for client in (self._producer, self._admin):
            if client is not None:
                client.close()
        for proc in self._consumers:
            terminate(proc)
        return [f.as_dict() for f in self.faults]

    def _run(self) -> None:
        brokers = itertools.cycle(sorted(self.local.cluster.brokers))
        for target in itertools.cycle(self.targets):
            if self._stop.wait(self.interval_s) or \
                    not more_faults_wanted(len(self.faults), self.max_faults):
                return
            try:
                if target == "broker":
                    self._broker_fault(next(brokers))
                elif target == "master":
                    self._master_fault()
                else:
                    self._consumer_fault(len(self.faults) % CONSUMERS)
            except Exception as exc:  # noqa: BLE001 - reported; the run fails on it
                self.faults.append(Fault(target, 0, time.monotonic() - self._started,
                                         error=f"could not inject: {exc!r}"))

    def _broker_fault(self, broker_id: int) -> None:
        cluster = self.local.cluster
        proc = cluster.brokers[broker_id]
        fault = self._kill(f"broker {broker_id}", proc)

        def serving() -> None:
            if not proc.alive():
                proc.start()
            cluster.wait_brokers_registered()
            self._probe_sends()
        self._recover(fault, serving)

    def _master_fault(self) -> None:
        cluster = self.local.cluster
        proc = cluster.leader()
        fault = self._kill(f"master {cluster.masters.index(proc)}", proc)
        self._recover(fault, self._admin_write)
        try:
            proc.start()
        except Exception as exc:  # noqa: BLE001 - reported with the fault
            fault.error = f"restart failed: {exc}"

    def _consumer_fault(self, i: int) -> None:
        proc = self._consumers[i]
        before = {m.member_id for m in self._admin.describe_group(self.group).members}
        fault = Fault(f"consumer {i}", proc.pid, time.monotonic() - self._started)
        self.faults.append(fault)
        proc.kill()
        proc.wait(10)
        self._consumers[i] = self._start_consumer()
        self._recover(fault, lambda: self._group_whole(before))

    def _start_consumer(self) -> subprocess.Popen:
        with self._logs.open("ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "load.chaos", "--masters", self.local.masters,
                 "--topic", self.topic, "--group", self.group],
                cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)

    def _group_whole(self, before: set[str]) -> None:
        """Raises until the group has its two members again, one of them new (the killed
        one's session expired), with every partition assigned."""
        group = self._admin.describe_group(self.group)
        members = {m.member_id for m in group.members}
        assigned = {p for m in group.members for p in m.assignments.get(self.topic, [])}
        partitions = len(self._admin.describe_topic(self.topic).partitions)
        if (len(members) != CONSUMERS or len(members & before) != CONSUMERS - 1
                or len(assigned) != partitions):
            raise RuntimeError(f"group {self.group}: {len(members)} members "
                               f"({len(members - before)} new), {len(assigned)} of "
                               f"{partitions} partitions assigned")

    def _kill(self, target: str, proc) -> Fault:
        fault = Fault(target, proc.pid, time.monotonic() - self._started)
        self.faults.append(fault)
        proc.kill()
        return fault

    def _recover(self, fault: Fault, until) -> None:
        """Retry ``until`` until it succeeds; the fault's recovery time is from the kill."""
        killed = self._started + fault.at_s
        deadline = killed + RECOVERY_TIMEOUT_S
        while True:
            try:
                until()
                fault.recovered_s = time.monotonic() - killed
                return
            except Exception as exc:  # noqa: BLE001 - anything but success means "not yet"
                if time.monotonic() > deadline:
                    fault.error = f"not recovered after {RECOVERY_TIMEOUT_S:.0f} s: {exc}"
                    return
                time.sleep(0.05)

    def _probe_sends(self) -> None:
        for p in range(2 * BROKERS):
            self._producer.send_sync(self.probe_topic, b"probe", partition=p, timeout=5)

    def _admin_write(self) -> None:
        self._admin.alter_topic(self.probe_topic,
                                retention_ms=3_600_000 + len(self.faults))


def consume(masters: str, topic: str, group: str) -> None:
    """A chaos consumer: polls ``topic`` in ``group`` until SIGTERM (or SIGKILL)."""
    from lib import PullConsumer

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    with PullConsumer(masters, group=group, auto_offset_reset="earliest") as consumer:
        consumer.subscribe([topic])
        while not stopping:
            consumer.poll(timeout=0.5)


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m load.chaos",
                                description="a chaos consumer (load/chaos.py starts these)")
    p.add_argument("--masters", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    args = p.parse_args(argv)
    consume(args.masters, args.topic, args.group)
    return 0


if __name__ == "__main__":
    sys.exit(main())
