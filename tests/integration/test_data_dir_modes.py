"""Secrets at rest (issue 49, item 2): what servers write is their owner's alone, and a data
dir that group or others can read is refused (PostgreSQL's rule), over real processes.

Every process here starts with the umask most shells have (022): the modes checked are the
servers' own doing, not the test's.
"""
from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lib.process import pid_alive
from tests.cluster import ROOT, ServerProcess

SHELL_UMASK = 0o022
SECRET = "a-cluster-secret-for-the-mode-tests"


def _modes(root: Path) -> dict[str, int]:
    """Every directory and file under ``root`` (itself included) -> its permission bits."""
    found = {str(root): stat.S_IMODE(root.stat().st_mode)}
    for path in root.rglob("*"):
        if not path.is_symlink():
            found[str(path)] = stat.S_IMODE(path.lstat().st_mode)
    return found


def _stop_cluster_up(proc: subprocess.Popen, info: dict) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for child in info.values():  # never leave a child behind, even on failure
        if isinstance(child, dict) and "pid" in child and pid_alive(child["pid"]):
            os.kill(child["pid"], signal.SIGKILL)


def _tubeq(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lib.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, timeout=60)


def test_cluster_up_keeps_every_directory_and_file_to_its_owner(tmp_path):
    """cluster.json, the logs, the masters' LMDB state and Raft journal (the signing keys),
    the brokers' segments and offsets, the portal's dir: nothing for group or others."""
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items()
           if k not in ("TUBEQ_USER", "TUBEQ_PASSWORD", "TUBEQ_CLUSTER_SECRET")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    proc = subprocess.Popen(
        [sys.executable, "-m", "lib.cli", "cluster", "up", "--data-dir", str(data),
         "--master-port", "0", "--broker-port", "0", "--kafka-port", "0", "--portal-port", "0",
         "--masters", "1", "--brokers", "1"], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, umask=SHELL_UMASK)
    summary, info = data / "cluster.json", {}
    try:
        deadline = time.monotonic() + 90
        while not summary.exists():
            assert proc.poll() is None, proc.stdout.read().decode()
            assert time.monotonic() < deadline, "cluster up did not start in 90 s"
            time.sleep(0.1)
        info = json.loads(summary.read_text())
        env["TUBEQ_CREDENTIALS_FILE"] = info["credentials_file"]
        made = _tubeq("--masters", info["masters"], "topic", "create", "modes", "--partitions",
                      "1", "--replication-factor", "1", "--min-insync-replicas", "1", env=env)
        assert made.returncode == 0, made.stderr
        sent = subprocess.run([sys.executable, "-m", "lib.cli", "--masters", info["masters"],
                               "produce", "modes"], cwd=ROOT, env=env, input=b"a\nb\n",
                              capture_output=True, timeout=60)
        assert sent.returncode == 0, sent.stderr
        modes = _modes(data)
    finally:
        _stop_cluster_up(proc, info)
    for must in ("cluster.json", "master0/meta/data.mdb", "master0/raft/journal",
                 "master0/log.txt", "broker1/log.txt", "broker1/offsets", "portal/ready.json"):
        assert str(data / must) in modes, f"{must} missing: {sorted(modes)}"
    assert str(data / "broker1" / "topics" / "modes") in modes, sorted(modes)
    open_to_others = {p: f"{m:04o}" for p, m in modes.items() if m & 0o077}
    assert not open_to_others


@pytest.mark.parametrize("role", ["master", "broker", "portal_web"])
def test_server_refuses_a_data_dir_others_can_read(tmp_path, role):
    """The issue's reproduction: a 0755 data dir (as ``mkdir`` makes it under umask 022). The
    server exits non-zero with one line naming the dir, its mode and the chmod, and writes
    nothing into it."""
    d = tmp_path / role
    d.mkdir(mode=0o755)
    d.chmod(0o755)
    args = {"master": ["--port", "0", "--metrics-port", "-1"],
            "broker": ["--broker-id", "1", "--masters", "127.0.0.1:1", "--port", "0",
                       "--metrics-port", "-1"],
            "portal_web": ["--masters", "127.0.0.1:1", "--port", "0"]}[role]
    try:
        done = subprocess.run([sys.executable, "-m", role, "--data-dir", str(d), *args],
                              cwd=ROOT, capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONPATH": str(ROOT),
                                   "TUBEQ_CLUSTER_SECRET": SECRET}, umask=SHELL_UMASK)
    except subprocess.TimeoutExpired:  # (run() has killed it)
        pytest.fail(f"{role} started on a 0755 data dir")
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if "data directory" in line]
    assert len(lines) == 1, done.stderr
    error = lines[0] if role == "portal_web" else json.loads(lines[0])["error"]
    assert f"data directory {d} has mode 0755" in error and f"chmod 700 {d}" in error, error
    assert list(d.iterdir()) == []


def _master_with(tmp_path: Path, d: Path, settings: str) -> ServerProcess:
    config = tmp_path / "master.toml"
    config.write_text(f"[master]\n{settings}\n")
    return ServerProcess("master", d, ["--config", str(config), "--data-dir", str(d),
                                       "--host", "127.0.0.1", "--port", "0",
                                       "--metrics-port", "-1"],
                         env={"TUBEQ_CLUSTER_SECRET": SECRET})


def test_group_access_lets_the_group_read_and_nobody_else(tmp_path):
    """``data_dir_group_access = true`` (PostgreSQL's --allow-group-access): a 0750 data dir
    is taken and what the master writes is 0640; group write or anything for others is still
    refused."""
    d = tmp_path / "m"
    d.mkdir(mode=0o750)
    d.chmod(0o750)
    master = _master_with(tmp_path, d, "data_dir_group_access = true")
    master.popen = subprocess.Popen(  # launch() with the shell's umask
        [sys.executable, "-m", "master", *master.args], cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **master.env}, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, umask=SHELL_UMASK)
    try:
        master.await_ready(60)
        modes = _modes(d)
    finally:
        master.stop()
    assert modes[str(d / "meta" / "data.mdb")] == 0o640
    assert modes[str(d / "raft" / "journal")] == 0o640
    assert not {p: f"{m:04o}" for p, m in modes.items() if m & 0o027}

    d.chmod(0o770)
    refused = subprocess.run([sys.executable, "-m", "master", *master.args], cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT), **master.env},
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0
    assert f"has mode 0770, open to others: chmod 750 {d}" in refused.stderr, refused.stderr


def test_without_group_access_a_group_readable_dir_is_refused(tmp_path):
    d = tmp_path / "m"
    d.mkdir(mode=0o750)
    d.chmod(0o750)
    master = _master_with(tmp_path, d, "data_dir_group_access = false")
    refused = subprocess.run([sys.executable, "-m", "master", *master.args], cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT), **master.env},
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0
    assert "data_dir_group_access = true" in refused.stderr, refused.stderr


def test_cluster_up_refuses_open_dirs_naming_each_before_it_starts_anything(tmp_path):
    """A dir made by an older tubeq (0755 everywhere): one line per open dir, exit 1, no child
    started (nothing new in the dirs)."""
    data = tmp_path / "data"
    for d in (data, data / "master0", data / "broker1"):
        d.mkdir(mode=0o755)
        d.chmod(0o755)
    up = [sys.executable, "-m", "lib.cli", "cluster", "up", "--data-dir", str(data),
          "--master-port", "0", "--broker-port", "0", "--kafka-port", "0", "--no-portal",
          "--masters", "1", "--brokers", "1"]
    code, err = _refused_cluster_up(up)
    assert code == 1 and f"chmod 700 {data} fixes it" in err, err
    data.chmod(0o700)
    code, err = _refused_cluster_up(up)
    assert code == 1, err
    for child in ("master0", "broker1"):
        assert f"chmod 700 {data / child} fixes it" in err, err
    assert sorted(p.name for p in data.iterdir()) == ["broker1", "master0"]
    assert list((data / "master0").iterdir()) == list((data / "broker1").iterdir()) == []


def _refused_cluster_up(argv: list[str]) -> tuple[int, str]:
    """(exit code, stderr) of a ``cluster up`` expected to refuse at once; one that starts a
    cluster instead is stopped (SIGINT: it stops its children) and fails the test."""
    proc = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, umask=SHELL_UMASK)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        pytest.fail("cluster up started on open data dirs")
    return proc.returncode, err
