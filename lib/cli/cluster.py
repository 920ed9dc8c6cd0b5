"""``tubeq cluster up``: a local cluster (masters, brokers, the portal) as child processes.

The CLI never imports server code: it starts ``python -m master`` / ``python -m broker`` with
the same interpreter, waits for each one's ready.json, prints the addresses and stops every child
(SIGTERM, then SIGKILL after a grace period) on Ctrl-C or SIGTERM. While the cluster is up, a
child that exits is restarted on the ports it bound first, with a backoff (:class:`Supervisor`),
so one can kill a master or a broker and watch the others carry on.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import click

from lib.auth.client import CLUSTER_UP_MARK, Credentials, user_credentials_path
from lib.auth.pki import LocalPki
from lib.auth.settings import CLUSTER_SECRET_ENV
from lib.cli.supervisor import STOP_GRACE_S, Child, Supervisor, say
from lib.errors import TubeqError
from lib.private_files import own_data_dirs, private_umask, write_private
from lib.process import free_ports
from lib.tls import TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV

RAFT_PORT_OFFSET = 100  # master i's Raft port: --master-port + 100 + i
ADMIN_PASSWORD = "admin-password"  # the first admin's, given to the masters' bootstrap
CREDENTIALS = "credentials"  # user = admin, password = ...: for the CLI and clients


@dataclass(frozen=True)
class ClusterPlan:
    data_dir: Path
    host: str
    masters: int
    brokers: int
    master_port: int
    broker_port: int
    portal: bool
    portal_port: int
    tls: bool = False  # a private CA and certificates under <data_dir>/tls (lib/auth/pki.py)
    tls_client_auth: bool = False  # mutual TLS: clients present certificates too
    kafka_port: int = -1  # the first broker's Kafka port (0: any free one; -1: none)

    @property
    def pki(self) -> LocalPki:
        return LocalPki(self.data_dir / "tls")

    def tls_args(self) -> list[str]:
        """The TLS options every master and broker gets."""
        return self.pki.server_args(self.tls_client_auth) if self.tls else []

    def client_tls(self) -> dict[str, str]:
        """TUBEQ_TLS_* for clients of this cluster (with mutual TLS, the admin's certificate)."""
        if not self.tls:
            return {}
        pki = self.pki
        env = {TLS_CA_ENV: str(pki.ca)}
        if self.tls_client_auth:
            env.update({TLS_CERT_ENV: str(pki.admin_cert), TLS_KEY_ENV: str(pki.admin_key)})
        return env

    def master_children(self) -> list[Child]:
        """The masters; with more than one, fixed gRPC and Raft ports and a shared password."""
        n = self.masters
        secret = {CLUSTER_SECRET_ENV: secret_file(self.data_dir, "cluster-secret")}
        if n == 1:
            return [self._master(0, [], secret)]
        spare = iter(free_ports(2 * n, self.host))
        base = self.master_port
        grpc_ports = [base + i if base else next(spare) for i in range(n)]
        raft = [f"{self.host}:{base + RAFT_PORT_OFFSET + i if base else next(spare)}"
                for i in range(n)]
        env = {"TUBEQ_RAFT_PASSWORD": secret_file(self.data_dir, "raft-password"), **secret}
        return [self._master(i, ["--port", str(grpc_ports[i]),
                                 "--raft-port", raft[i].rsplit(":", 1)[1],
                                 "--raft-peers", ",".join(r for r in raft if r != raft[i])], env)
                for i in range(n)]

    def _master(self, i: int, args: list[str], env: dict) -> Child:
        d = self.data_dir / f"master{i}"
        args = args or ["--port", str(self._port(self.master_port, i))]
        secret_file(self.data_dir, ADMIN_PASSWORD)
        return Child(f"master{i}", d, ["master", "--data-dir", str(d), "--host", self.host,
                                       "--metrics-port", "0", "--admin-password-file",
                                       str(self.data_dir / ADMIN_PASSWORD), *args,
                                       *self.tls_args()], env=env)

    def credentials_file(self) -> Path:
        """The admin's credentials for clients (TUBEQ_CREDENTIALS_FILE), made once: the
        password is the one the masters' bootstrap gave the admin of a new data dir."""
        path = self.data_dir / CREDENTIALS
        if not path.exists():
            Credentials("admin", secret_file(self.data_dir, ADMIN_PASSWORD)).to_file(path)
        return path

    def broker_children(self, masters: str) -> list[Child]:
        return [Child(f"broker{b}", self.data_dir / f"broker{b}",
                      ["broker", "--data-dir", str(self.data_dir / f"broker{b}"),
                       "--broker-id", str(b), "--masters", masters, "--host", self.host,
                       "--port", str(self._port(self.broker_port, b - 1)),
                       "--metrics-port", "0", *self._kafka_args(b - 1), *self.tls_args()],
                      env={CLUSTER_SECRET_ENV: secret_file(self.data_dir, "cluster-secret")})
                for b in range(1, self.brokers + 1)]

    def portal_child(self, masters: str) -> Child:
        d = self.data_dir / "portal"
        tls = (["--tls-cert", str(self.pki.server_cert), "--tls-key", str(self.pki.server_key)]
               if self.tls else [])
        return Child("portal", d, ["portal_web", "--data-dir", str(d), "--masters", masters,
                                   "--host", self.host, "--port", str(self.portal_port),
                                   "--monitor-credentials-file", str(self.credentials_file()),
                                   *tls])

    def _kafka_args(self, i: int) -> list[str]:
        if self.kafka_port < 0:
            return []
        return ["--kafka-port", str(self._port(self.kafka_port, i))]

    @staticmethod
    def _port(base: int, i: int) -> int:
        return 0 if base == 0 else base + i


def secret_file(data_dir: Path, name: str) -> str:
    """A secret the cluster's processes share (the masters' Raft password, the cluster secret
    brokers and masters present to each other, the first admin's password): made once per
    data dir, kept in a 0600 file."""
    path = data_dir / name
    if not path.exists():
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_private(path, secrets.token_urlsafe(32))
    return path.read_text().strip()


def portal_available() -> bool:
    return (Path(__file__).resolve().parents[2] / "portal_web" / "__main__.py").exists()


def run_cluster(plan: ClusterPlan) -> None:
    """Start everything, print where it is, keep it up (restarting a child that exits) until
    Ctrl-C/SIGTERM, stop everything. A child that fails to start at first stops it all."""
    children: list[Child] = []
    stop = {"now": False}

    def on_signal(signum, _frame):
        stop["now"] = True

    check_data_dirs(plan)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        _start_all(plan, children)
        _announce(plan, children)
        supervisor = Supervisor(children, stopping=lambda: stop["now"],
                                restarted=lambda: _update_summary(plan, children))
        while not stop["now"]:
            supervisor.poll()
            time.sleep(0.5)
    finally:
        stop_all(plan, children)


def _update_summary(plan: ClusterPlan, children: list[Child]) -> None:
    """cluster.json with a restarted child's pid; a failure to write it must not stop the
    supervision of a cluster that is otherwise fine."""
    try:
        write_summary(plan, children)
    except OSError as err:
        say(f"tubeq: could not update {plan.data_dir / 'cluster.json'}: {err}")


def check_data_dirs(plan: ClusterPlan) -> None:
    """The cluster's directory as a server's own (lib/private_files.py), checked with the
    children's before any starts: this process's umask (which they inherit) makes cluster.json,
    the logs and the secrets 0600."""
    private_umask()
    names = [f"master{i}" for i in range(plan.masters)] + ["portal", "tls"]
    try:
        own_data_dirs(plan.data_dir, [*names, *(f"broker{b + 1}" for b in range(plan.brokers))])
    except TubeqError as err:
        raise click.ClickException(err.message) from None


def stop_all(plan: ClusterPlan, children: list[Child]) -> None:
    """Stop every child (portal, brokers, then masters), killing what outlives the grace."""
    say("tubeq: stopping...")
    for child in reversed(children):
        child.stop()
    deadline = time.monotonic() + STOP_GRACE_S
    for child in reversed(children):
        child.wait_or_kill(deadline)
    (plan.data_dir / "cluster.json").unlink(missing_ok=True)
    say("tubeq: stopped")


def _start_all(plan: ClusterPlan, children: list[Child]) -> None:
    credentials = Credentials.from_file(plan.credentials_file())
    use_cluster_tls(plan)
    for child in plan.master_children():
        children.append(child)
        child.start()
    masters = ",".join(c.info["address"] for c in children)
    wait_leader(masters)
    for child in plan.broker_children(masters):
        children.append(child)
        child.start()
    wait_brokers_registered(masters, plan.brokers, credentials)
    if plan.portal and portal_available():
        child = plan.portal_child(masters)
        children.append(child)
        child.start()


def use_cluster_tls(plan: ClusterPlan) -> None:
    """Make (or drop) the cluster's certificates, and have this process's clients (the
    waits below) use them: never a CA of an earlier run."""
    for var in (TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV):
        os.environ.pop(var, None)
    if plan.tls:
        plan.pki.ensure([plan.host])
    elif plan.pki.root.exists():
        shutil.rmtree(plan.pki.root)  # ours: made by an earlier cluster up --tls
    os.environ.update(plan.client_tls())


def wait_leader(masters: str, timeout: float = 30.0) -> None:
    """Return once one master is active (the masters elect one within a few seconds)."""
    from lib.admin import AdminClient

    deadline = time.monotonic() + timeout
    with AdminClient(masters) as admin:
        while not any(s.role == "leader" for s in admin.master_status()):
            if time.monotonic() > deadline:
                raise click.ClickException(f"no master became active within {timeout} s")
            time.sleep(0.1)


def wait_brokers_registered(masters: str, count: int, credentials: Credentials,
                            timeout: float = 30.0) -> None:
    """Return once the master lists ``count`` live brokers, so topics can be created at once."""
    from lib.admin import AdminClient

    deadline = time.monotonic() + timeout
    with AdminClient(masters, credentials=credentials) as admin:
        while sum(b.alive for b in admin.list_brokers()) < count:
            if time.monotonic() > deadline:
                raise click.ClickException(f"brokers did not register within {timeout} s")
            time.sleep(0.1)


def write_summary(plan: ClusterPlan, children: list[Child]) -> None:
    """``<data_dir>/cluster.json``: each child's ready info (pid, addresses), the master list,
    the client credentials and TLS files; rewritten when a child is restarted."""
    summary = {c.name: {k: v for k, v in c.info.items() if k != "role"} for c in children}
    summary["masters"] = _masters(children)
    kafka = _kafka_bootstrap(children)
    if kafka:
        summary["kafka_bootstrap"] = kafka
    summary["credentials_file"] = str(plan.data_dir / CREDENTIALS)
    # tls_ca, tls_cert, tls_key: the TUBEQ_TLS_* of its clients (the CLI reads them here)
    summary.update({var.removeprefix("TUBEQ_").lower(): path
                    for var, path in plan.client_tls().items()})
    # Whole or absent, never half written: scripts and tests poll for this file and read it
    # the moment it appears (a plain write_text was once read while still empty).
    tmp = plan.data_dir / "cluster.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2))
    os.replace(tmp, plan.data_dir / "cluster.json")


def _masters(children: list[Child]) -> str:
    return ",".join(c.info["address"] for c in children if c.name.startswith("master"))


def _kafka_bootstrap(children: list[Child]) -> str:
    """The brokers' Kafka listeners, as Kafka clients' bootstrap.servers ("" when none)."""
    return ",".join(c.info["kafka"] for c in children if c.info.get("kafka"))


def _announce(plan: ClusterPlan, children: list[Child]) -> None:
    masters = _masters(children)
    credentials = plan.data_dir / CREDENTIALS  # made before the masters started
    installed = install_user_credentials(credentials)  # before cluster.json: all is ready
    write_summary(plan, children)
    for c in children:
        extra = f"  metrics http://{c.info['metrics']}" if c.info.get("metrics") else ""
        where = c.info.get("url") or c.info["address"]
        click.echo(f"{c.name:<9} pid {c.info['pid']:<7} {where}{extra}")
    portal = next((c.info["url"] for c in children if c.name == "portal"), "")
    exports = "".join(f"export {k}={v}\n" for k, v in plan.client_tls().items())
    click.echo(f"\nauth on: the admin's user and password are in {credentials} (0600)"
               + (f", and in {installed}, where clients look by default" if installed else "")
               + ("\nTLS on" + (" (mutual: clients present a certificate)"
                                if plan.tls_client_auth else "")
                  + f": the cluster's CA and certificates are in {plan.pki.root}"
                  if plan.tls else "")
               + (f"\nKafka clients: bootstrap.servers={_kafka_bootstrap(children)}"
                  + (" (SASL/PLAIN with a tubeq user: docs/kafka.md)") if
                  _kafka_bootstrap(children) else "")
               + f"\nexport TUBEQ_MASTERS={masters}\n"
               f"export TUBEQ_CREDENTIALS_FILE={credentials}\n{exports}"
               + (f"portal: {portal} (log in as admin with the password in {credentials})\n"
                  if portal else "")
               + f"logs and data under {plan.data_dir}; Ctrl-C stops the cluster")


def install_user_credentials(credentials: Path) -> Path | None:
    """Copy the admin's credentials to the user's default file (lib/auth/client.py
    ``user_credentials_path``), as ``kind`` writes ~/.kube/config, so clients of the local
    cluster need no setting; a file the user made is never replaced (None: left alone)."""
    target = user_credentials_path()
    try:
        if target.exists() and not target.read_text().startswith(CLUSTER_UP_MARK):
            return None
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        Credentials.from_file(credentials).to_file(target, comment=CLUSTER_UP_MARK)
    except (OSError, TubeqError):
        return None  # a read-only home, no admin file: TUBEQ_CREDENTIALS_FILE still works
    return target
