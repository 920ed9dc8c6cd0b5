"""Real master and broker processes for tests: started on 127.0.0.1, stopped by PID.

``Cluster`` is used through the fixtures in tests/integration/conftest.py; every process it
starts is recorded and stopped (SIGTERM, then SIGKILL) when the fixture ends, even on failure.
Each process logs to ``<data_dir>/log.txt`` so a failing test can show what a server said.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lib.process import clear_ready, free_ports, wait_ready

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class ServerProcess:
    role: str
    data_dir: Path
    args: list[str]
    popen: subprocess.Popen | None = None
    info: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    # Run through this first, e.g. ``["ip", "netns", "exec", NS]`` (tests/deploy), which execs
    # the server: the pid is still the server's.
    prefix: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    @property
    def address(self) -> str:
        return self.info["address"]

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def start(self, timeout: float = 30.0) -> ServerProcess:
        return self.launch().await_ready(timeout)

    def launch(self) -> ServerProcess:
        """Start the process without waiting for it (:meth:`await_ready` waits): a cluster's
        brokers start side by side, as they would on their machines."""
        # 0700, as the servers make it: they refuse a data dir others can read (and a test's
        # umask is usually 022)
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        clear_ready(self.data_dir)
        log = open(self.data_dir / "log.txt", "ab")  # noqa: SIM115 - owned by the child
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **self.env}
        self.popen = subprocess.Popen(
            [*self.prefix, sys.executable, "-m", self.role, *self.args], cwd=ROOT, env=env,
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        return self

    def await_ready(self, timeout: float = 30.0) -> ServerProcess:
        """Block until the launched process is ready; stopped (with its log in the error) if
        it dies or times out first."""
        try:
            self.info = wait_ready(self.data_dir, self.pid, timeout, alive=self.alive)
        except BaseException as exc:  # also SIGTERM/Ctrl-C meanwhile: no child left behind
            self.stop()
            if isinstance(exc, TimeoutError | RuntimeError):
                raise RuntimeError(f"{exc}\n--- log ---\n{self.log_tail()}") from exc
            raise
        return self

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; returns the exit code."""
        self.terminate()
        return self.reap(timeout)

    def terminate(self) -> None:
        """SIGTERM without waiting (:meth:`reap` waits)."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)

    def reap(self, timeout: float = 15.0) -> int | None:
        """Wait up to ``timeout`` for the process to exit, then SIGKILL it."""
        if self.popen is None:
            return None
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(10)
        return self.popen.returncode

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(10)

    def log_events(self, name: str) -> list[dict]:
        """The JSON log lines of event ``name`` this process wrote so far."""
        out = []
        try:
            text = (self.data_dir / "log.txt").read_text(errors="replace")
        except OSError:
            return out
        for line in text.splitlines():
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if isinstance(entry, dict) and entry.get("event") == name:
                    out.append(entry)
        return out

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = (self.data_dir / "log.txt").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


class Cluster:
    """Masters and N brokers under one temp dir; ``stop_all()`` ends every process.

    With ``masters > 1`` the masters get fixed gRPC and Raft ports (a restarted master keeps
    its address, as in production) and share a Raft password through the environment.
    """

    def __init__(self, root: Path, master_args: list[str] | None = None,
                 broker_args: list[str] | None = None, masters: int = 1,
                 given_admin_password: bool = True, tls=None) -> None:
        """``given_admin_password``: the masters' bootstrap takes the session's admin password
        (tests/conftest.py); False: they generate one into ``admin-password``. ``tls``
        (lib.tls.Tls): how the harness's own clients reach servers started with TLS."""
        self.root = root
        self.tls = tls
        self.admin_password_file = (os.environ.get("TUBEQ_TEST_ADMIN_PASSWORD_FILE", "")
                                    if given_admin_password else "")
        # the session's (tests/conftest.py), else one of its own (load/ runs outside pytest)
        self.cluster_secret = os.environ.get("TUBEQ_CLUSTER_SECRET") or secrets.token_urlsafe(32)
        self.master_args = master_args or []
        self.broker_args = broker_args or []
        self.masters: list[ServerProcess] = []
        self.brokers: dict[int, ServerProcess] = {}
        self.master_count = masters
        self._ports = free_ports(2 * masters) if masters > 1 else []

    @property
    def master_addresses(self) -> str:
        if self._ports:
            return ",".join(f"127.0.0.1:{p}" for p in self._ports[:self.master_count])
        return ",".join(m.address for m in self.masters)

    def master_process(self, i: int) -> ServerProcess:
        """Master ``i``'s process record (created on first use, restartable with .start())."""
        while len(self.masters) <= i:
            self.masters.append(self._new_master(len(self.masters)))
        return self.masters[i]

    def _new_master(self, i: int) -> ServerProcess:
        d = self.root / f"master{i}"
        args = ["--data-dir", str(d), "--host", "127.0.0.1", "--metrics-port", "0"]
        if self.admin_password_file:
            args += ["--admin-password-file", self.admin_password_file]
        env = {"TUBEQ_CLUSTER_SECRET": self.cluster_secret}
        if self._ports:
            n = self.master_count
            raft = [f"127.0.0.1:{p}" for p in self._ports[n:]]
            args += ["--port", str(self._ports[i]), "--raft-port", str(self._ports[n + i]),
                     "--raft-peers", ",".join(r for j, r in enumerate(raft) if j != i)]
            env["TUBEQ_RAFT_PASSWORD"] = f"test-{self.root.name}"
        else:
            args += ["--port", "0"]
        return ServerProcess("master", d, [*args, *self.master_args], env=env)

    def start_master(self, i: int | None = None) -> ServerProcess:
        return self.master_process(len(self.masters) if i is None else i).start()

    def leader(self, timeout: float = 20.0) -> ServerProcess:
        """The active master (asks each live one for its status)."""
        from lib.admin import AdminClient

        deadline = time.monotonic() + timeout
        while True:
            with AdminClient(self.master_addresses, tls=self.tls) as admin:
                seen = admin.master_status()
            for st in seen:
                if st.role == "leader":
                    for m in self.masters:
                        if m.alive() and m.info.get("address") == st.address:
                            return m
            if time.monotonic() > deadline:
                raise TimeoutError(f"no active master after {timeout} s: {seen}")
            time.sleep(0.1)

    def broker_process(self, broker_id: int) -> ServerProcess:
        """The broker's process record (created on first use, restartable with .start())."""
        if broker_id not in self.brokers:
            d = self.root / f"broker{broker_id}"
            self.brokers[broker_id] = ServerProcess(
                "broker", d, ["--data-dir", str(d), "--broker-id", str(broker_id),
                              "--masters", self.master_addresses, "--host", "127.0.0.1",
                              "--port", "0", "--metrics-port", "0", *self.broker_args],
                env={"TUBEQ_CLUSTER_SECRET": self.cluster_secret})
        return self.brokers[broker_id]

    def start_broker(self, broker_id: int) -> ServerProcess:
        return self.broker_process(broker_id).start()

    def start(self, brokers: int = 2) -> Cluster:
        """Start the masters side by side, then the brokers side by side (each group waits
        for all of its members to be ready; a test that starts one at a time still can)."""
        self._launch_all([self.master_process(i) for i in range(self.master_count)])
        self._launch_all([self.broker_process(i) for i in range(1, brokers + 1)])
        self.wait_brokers_registered()
        return self

    @staticmethod
    def _launch_all(procs: list[ServerProcess]) -> None:
        try:
            for proc in procs:
                proc.launch()
            for proc in procs:
                proc.await_ready()
        except BaseException:
            for proc in procs:
                proc.stop()
            raise

    def wait_brokers_registered(self, timeout: float = 30.0) -> None:
        """Block until the master lets the admin in and lists every running broker as alive
        at the address it listens on now.

        A broker writes ready.json once it listens, before its registration reaches the
        master; a test that creates a topic at once would race it (NotEnoughBrokers). A
        restarted broker listens on a new port while the master still lists the old one as
        alive until the new registration arrives: routes would point at the dead port.
        """
        from lib.admin import AdminClient
        from lib.errors import Unauthenticated

        want = {(b, proc.address) for b, proc in self.brokers.items() if proc.alive()}
        deadline = time.monotonic() + timeout
        with AdminClient(self.master_addresses, credentials=self.admin_credentials(),
                         tls=self.tls) as admin:
            while True:
                try:
                    alive = {(b.broker_id, b.address) for b in admin.list_brokers() if b.alive}
                except Unauthenticated:  # the admin is not replicated yet
                    alive = None
                if alive is not None and want <= alive:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"brokers {sorted(want - (alive or set()))} not registered "
                                       f"after {timeout} s")
                time.sleep(0.05)

    def admin_credentials(self, timeout: float = 20.0):
        """The first admin's credentials, from the password file the active master writes."""
        from lib.auth.client import Credentials

        if self.admin_password_file:
            return Credentials("admin", Path(self.admin_password_file).read_text().strip())
        deadline = time.monotonic() + timeout
        while True:
            for proc in self.masters:
                path = proc.data_dir / "admin-password"
                if path.exists() and path.read_text().strip():
                    return Credentials("admin", path.read_text().strip())
            if time.monotonic() > deadline:
                raise TimeoutError("no master wrote admin-password")
            time.sleep(0.05)

    def channel(self, address: str):
        """A channel to one of this cluster's servers whose calls carry the admin's token."""
        import grpc

        from lib.auth.client import ClientAuth, TokenSource
        from lib.rpc import channel

        source = TokenSource(self.admin_credentials(), self.master_addresses, tls=self.tls)
        return grpc.intercept_channel(channel(address, self.tls), ClientAuth(source))

    def master_client(self, timeout: float = 10.0):
        """A MasterClient that logs in as the admin."""
        from lib.auth.client import auth_for
        from lib.rpc import ChannelPool, MasterClient

        pool = ChannelPool(auth_for(self.master_addresses, self.admin_credentials(), timeout,
                                    self.tls), self.tls)
        return MasterClient(self.master_addresses, pool, timeout=timeout)

    def use_admin_env(self) -> None:
        """Make the admin's credentials this process's (and its children's) client
        credentials: for tools that run a cluster outside pytest (load/), where every client
        they make, in process or in a subprocess, then logs in as the admin."""
        creds = self.admin_credentials()
        for var in ("TUBEQ_API_KEY", "TUBEQ_TOKEN", "TUBEQ_CREDENTIALS_FILE"):
            os.environ.pop(var, None)
        os.environ.update({"TUBEQ_USER": creds.user, "TUBEQ_PASSWORD": creds.password})

    def all_processes(self) -> list[ServerProcess]:
        return [*self.brokers.values(), *self.masters]

    def stop_all(self) -> None:
        """SIGTERM the brokers together and wait for them (a clean shutdown still reaches
        the masters), then the masters together."""
        for group in (list(self.brokers.values()), self.masters):
            for proc in group:
                proc.terminate()
            for proc in group:
                proc.reap()
