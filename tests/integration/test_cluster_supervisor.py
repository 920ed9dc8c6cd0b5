"""``tubeq cluster up`` keeps its cluster up: a child that dies is restarted on the same
address and data dir with a backoff while the rest keep serving; Ctrl-C still stops it all.
Real processes: ``cluster up`` runs in its own process group, on free ports of 127.0.0.1."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from lib.cli.supervisor import RESTART_BACKOFF_S, pinned_argv, restart_delay
from lib.process import pid_alive

ROOT = Path(__file__).resolve().parents[2]


def _pids_using(data: Path) -> list[int]:
    """Processes whose command line names ``data``: every child ``cluster up`` started there,
    including one mid-restart that no cluster.json lists yet."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes() if entry.name.isdigit() else b""
        except OSError:
            continue  # gone meanwhile
        if str(data).encode() in cmdline and int(entry.name) != os.getpid():
            pids.append(int(entry.name))
    return pids


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what} not within {timeout} s"
        time.sleep(0.1)


@dataclass
class LocalCluster:
    proc: subprocess.Popen
    data: Path
    stderr: Path

    def summary(self) -> dict:
        try:
            return json.loads((self.data / "cluster.json").read_text())
        except (OSError, ValueError):
            return {}

    def errors(self) -> str:
        return self.stderr.read_text(errors="replace")


@pytest.fixture
def local_cluster(tmp_path, monkeypatch):
    """``tubeq cluster up --masters 1 --brokers 1 --no-portal`` on free ports; clients log in
    with the credentials file it wrote. Stopped by PID (SIGINT, then SIGKILL to its group and
    to every child still running on its data dir)."""
    for var in ("TUBEQ_USER", "TUBEQ_PASSWORD", "TUBEQ_CLUSTER_SECRET"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    data, stderr = tmp_path / "data", tmp_path / "cluster-up.err"
    with open(tmp_path / "cluster-up.out", "wb") as out, open(stderr, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lib.cli", "cluster", "up", "--data-dir", str(data),
             "--master-port", "0", "--broker-port", "0", "--kafka-port", "0", "--no-portal",
             "--masters", "1", "--brokers", "1"], cwd=ROOT, stdin=subprocess.DEVNULL,
            stdout=out, stderr=err,
            start_new_session=True)
    cluster = LocalCluster(proc, data, stderr)
    try:
        _wait_for(lambda: cluster.summary() or proc.poll() is not None, 60, "cluster.json")
        assert proc.poll() is None, cluster.errors()
        monkeypatch.setenv("TUBEQ_CREDENTIALS_FILE", cluster.summary()["credentials_file"])
        yield cluster
    finally:
        _stop(proc, data)


def _stop(proc: subprocess.Popen, data: Path) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    for pid in _pids_using(data):  # never leave a child behind, even on failure
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _round_trip(masters: str, topic: str, values: list[bytes]) -> list[bytes]:
    from lib import Producer, PullConsumer

    with Producer(masters, linger_ms=0, retries=100, retry_backoff_ms=100,
                  request_timeout_ms=3000) as producer:
        for value in values:
            producer.send_sync(topic, value, timeout=30)
    got: list[bytes] = []
    with PullConsumer(masters, group="after-restart", auto_offset_reset="earliest") as consumer:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(got) < len(values) and time.monotonic() < deadline:
            got += [r.value for r in consumer.poll(max_records=500, timeout=1.0)]
    return got


def test_a_killed_broker_is_restarted_on_its_address_and_serves_again(local_cluster):
    from lib import AdminClient

    before = local_cluster.summary()
    masters, broker, master = before["masters"], before["broker1"], before["master0"]
    with AdminClient(masters) as admin:
        admin.create_topic("survivor", partitions=2)  # on the broker's disk before it dies

    os.kill(broker["pid"], signal.SIGKILL)
    after = _wait_for(lambda: (s := local_cluster.summary()).get("broker1", {}).get("pid")
                      not in (None, broker["pid"]) and s, 30, "a restarted broker1")

    assert after["broker1"]["address"] == broker["address"]
    assert after["broker1"]["metrics"] == broker["metrics"]
    assert pid_alive(after["broker1"]["pid"]) and not pid_alive(broker["pid"])
    assert after["master0"]["pid"] == master["pid"] and pid_alive(master["pid"])
    assert local_cluster.proc.poll() is None
    values = [b"after-restart-%d" % i for i in range(20)]
    assert sorted(_round_trip(masters, "survivor", values)) == sorted(values)
    errors = local_cluster.errors()
    assert (f"tubeq: broker1 exited (killed by SIGKILL); restarting it in "
            f"{RESTART_BACKOFF_S[0]:.1f} s (restart 1; see "
            f"{local_cluster.data / 'broker1' / 'log.txt'})") in errors, errors
    assert "tubeq: broker1 restarted: pid" in errors


def test_ctrl_c_stops_every_child_and_removes_cluster_json(local_cluster):
    pids = [c["pid"] for c in local_cluster.summary().values() if isinstance(c, dict)]
    assert len(pids) == 2 and all(pid_alive(p) for p in pids)
    local_cluster.proc.send_signal(signal.SIGINT)
    assert local_cluster.proc.wait(30) == 0
    _wait_for(lambda: not any(pid_alive(p) for p in pids), 10, "every child stopped")
    assert not (local_cluster.data / "cluster.json").exists()
    assert not _pids_using(local_cluster.data)
    assert "restarting" not in local_cluster.errors()  # stopping children is no crash


def test_restart_delay_doubles_from_one_second_up_to_the_cap():
    assert [restart_delay(n) for n in range(1, 8)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert restart_delay(10_000) == RESTART_BACKOFF_S[1]


def test_a_restart_reuses_the_ports_the_first_start_bound():
    argv = ["broker", "--data-dir", "d", "--port", "0", "--metrics-port", "0", "--host", "h"]
    info = {"address": "127.0.0.1:40001", "metrics": "127.0.0.1:40002", "pid": 7}
    assert pinned_argv(argv, info) == ["broker", "--data-dir", "d", "--port", "40001",
                                       "--metrics-port", "40002", "--host", "h"]
    assert pinned_argv(argv, {}) == argv  # nothing bound reported: nothing changed
