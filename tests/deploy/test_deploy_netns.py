"""docs/deploy.md, followed on one machine: every master and broker on a host of its own (a
network namespace with the page's address), TLS on with certificates naming those addresses,
the portal on a host of its own, and a producer and a group consumer on a client host; then a
broker is added and one drained, and no acknowledged record is lost.

Everything the page shows comes from the page (tests/deploy/doc.py): the secrets and
certificate commands run as written, the TOML files are its blocks (master2, master3 and the
other brokers changed as its table and text say), the servers start with its systemd unit's
command and environment file, and the client host runs its client commands, its reassign and
its drain. Only the directories move: each host's ``/etc/tubeq`` and ``/var/lib/tubeq`` are
under the test's temporary directory.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cluster import ROOT, ServerProcess
from tests.deploy.doc import Page, env_file, on_host

pytestmark = [pytest.mark.slow, pytest.mark.netns]

CLIENT, CLIENT_ADDRESS = "client", "10.0.0.100"
MASTERS, BROKERS, NEW_BROKER, DRAINED = (1, 2, 3), (1, 2, 3), 4, 1
CLI_TIMEOUT_S = 150.0
PROGRESS = 300  # acknowledged records between steps: the clients kept going

# An operator's first call through the portal: HTTPS checked against the CA, a login that the
# portal passes to the active master over TLS.
PORTAL_LOGIN = """
import json, os, ssl, sys, urllib.request
body = json.dumps({"user": os.environ["TUBEQ_USER"], "password": os.environ["TUBEQ_PASSWORD"]})
request = urllib.request.Request(sys.argv[1], data=body.encode(),
                                 headers={"Content-Type": "application/json"})
context = ssl.create_default_context(cafile=os.environ["TUBEQ_TLS_CA"])
print(urllib.request.urlopen(request, context=context, timeout=30).read().decode())
"""


class Deploy:
    """The hosts of one run, set up as the page says."""

    def __init__(self, page: Page, net, procs, root: Path) -> None:
        self.page, self.net, self.procs, self.root = page, net, procs, root
        self.work = root / "workstation"  # where the secrets and certificates are made
        self.work.mkdir()
        # every "issue NAME ADDRESS" of the page: the certificates block's and the new broker's
        self.addresses = dict(re.findall(r"(?:^\s*|`)issue (\w+) ([\d.]+)(?:$|`)", page.text,
                                         re.M))
        self.servers: dict[str, ServerProcess] = {}

    def bash(self, script: str, timeout: float = 60.0) -> None:
        subprocess.run(["bash", "-ec", script], cwd=self.work, check=True, timeout=timeout,
                       capture_output=True)

    def issue(self, name: str) -> None:
        """The page's ``issue NAME ADDRESS`` for a server its certificates block leaves out."""
        block = self.page.block("# certificates")
        self.bash(block[block.index("issue() {"):block.index("\n}\n") + 3]
                  + f"issue {name} {self.addresses[name]}\n")

    def install(self, host: str, role: str, config: str) -> Path:
        """Lay out a server host as the page's Install, Secrets and TLS sections do."""
        tree = self.root / host
        (tree / "var/lib/tubeq").mkdir(mode=0o700, parents=True)
        (tree / "etc/tubeq/tls").mkdir(mode=0o750, parents=True)
        if role in ("master", "broker"):
            shutil.copy(self.work / "secrets.env", tree / "etc/tubeq/secrets.env")
        if role == "master":
            shutil.copy(self.work / "admin-password", tree / "etc/tubeq/admin-password")
        for name in ("ca.pem", f"{host}.pem", f"{host}.key"):
            shutil.copy(self.work / name, tree / "etc/tubeq/tls" / name)
        Path(on_host(self.page.file_of(config), tree)).write_text(on_host(config, tree))
        return tree

    def start(self, host: str, role: str, config: str) -> ServerProcess:
        """Install ``host`` and launch its server as the systemd unit would (not waited for)."""
        tree = self.install(host, role, config)
        args, secrets, env = self.page.unit_command(role)
        env = {k: on_host(v, tree) for k, v in env.items()}
        if secrets:
            env.update(env_file(Path(on_host(secrets, tree))))
        data_dir = re.search(r'^data_dir = "(.*)"$', config, re.M)[1]
        self.net.add(host, self.addresses[host])
        server = ServerProcess(role, Path(on_host(data_dir, tree)),
                               [on_host(a, tree) for a in args], env=env,
                               prefix=self.net.run_in(host))
        self.procs.servers.append(server)
        self.servers[host] = server
        return server.launch()

    def client_script(self, *lines: str) -> str:
        exports = [c for c in self.page.commands("# client environment") if c.startswith("export")]
        return on_host("\n".join([*exports, *lines]), self.root / CLIENT)

    def client_env(self) -> dict[str, str]:
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        return {**os.environ, "PATH": path, "PYTHONPATH": str(ROOT)}

    def client(self, *lines: str, check: bool = True) -> subprocess.CompletedProcess:
        """Run command lines on the client host, in the page's client environment."""
        done = subprocess.run([*self.net.run_in(CLIENT), "bash", "-ec",
                               self.client_script(*lines)], cwd=self.work, text=True,
                              capture_output=True, env=self.client_env(), timeout=CLI_TIMEOUT_S)
        if check and done.returncode != 0:
            raise AssertionError(f"{lines} failed ({done.returncode}):\n{done.stdout}\n"
                                 f"{done.stderr}\n{self.logs()}")
        return done

    def json(self, command: str):
        return json.loads(self.client(f"{command} --json").stdout)

    def brokers(self) -> dict[int, dict]:
        return {b["broker_id"]: b for b in self.json("tubeq broker list")}

    def logs(self) -> str:
        return "\n".join(f"--- {host} ---\n{s.log_tail(15)}" for host, s in self.servers.items())


def wait_for(what: str, check, timeout: float, deploy: Deploy):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except (AssertionError, subprocess.CalledProcessError, ValueError, KeyError):
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}\n{deploy.logs()}")
        time.sleep(0.3)


def settled(rows: list[dict]) -> list[dict] | None:
    """The masters' status rows once one leads and every one names it as the leader."""
    leaders = [r["address"] for r in rows if r["role"] == "leader"]
    return rows if len(leaders) == 1 and all(r["leader"] == leaders[0] for r in rows) else None


def progress(worker_dir: Path) -> dict:
    try:
        return json.loads((worker_dir / "status.json").read_text())
    except (OSError, ValueError):
        return {"acked": 0, "consumed": 0, "failed": 0}


def wait_progress(worker_dir: Path, more: int, deploy: Deploy, timeout: float = 60.0) -> None:
    start = progress(worker_dir)
    wait_for(f"{more} more records acknowledged and consumed (from {start})",
             lambda: (progress(worker_dir)["acked"] >= start["acked"] + more
                      and progress(worker_dir)["consumed"] >= start["consumed"] + more),
             timeout, deploy)


def test_the_deploy_page_runs_three_masters_and_brokers_on_their_own_hosts(
        network, processes, tmp_path):
    page = Page()
    deploy = Deploy(page, network, processes, tmp_path)
    deploy.bash(page.block("# secrets"))
    deploy.bash(page.block("# certificates"))

    network.add(CLIENT, CLIENT_ADDRESS)
    (tmp_path / CLIENT / "etc/tubeq/tls").mkdir(parents=True)
    shutil.copy(deploy.work / "ca.pem", tmp_path / CLIENT / "etc/tubeq/tls/ca.pem")
    for n in MASTERS:
        deploy.start(f"master{n}", "master", page.master_file(n))
    for n in BROKERS:
        deploy.start(f"broker{n}", "broker",
                     page.broker_file(n, deploy.addresses[f"broker{n}"]))
    deploy.issue("portal")
    deploy.start("portal", "portal_web", page.block("# portal: /etc/tubeq/portal.toml"))
    for server in deploy.servers.values():
        server.await_ready(60)

    first = page.commands("# client environment")
    checks = [c for c in first if not c.startswith("export")]
    wait_for("a master is active (tubeq master status)",
             lambda: deploy.client(checks[0]), 60, deploy)
    wait_for("every broker registered and alive",
             lambda: all(deploy.brokers().get(b, {}).get("alive") for b in BROKERS), 60, deploy)
    rows = wait_for("one active master that the standbys name by its advertised address",
                    lambda: settled(deploy.json("tubeq master status")), 30, deploy)
    assert {r["address"] for r in rows} == {
        f"{deploy.addresses[f'master{n}']}:8715" for n in MASTERS}, rows
    login = deploy.client(f"{sys.executable} -c {shlex.quote(PORTAL_LOGIN)} "
                          f"https://{deploy.addresses['portal']}:8080/api/v1/login")
    assert json.loads(login.stdout)["principal"] == "admin", login.stdout
    for command in checks[1:]:  # broker list, topic create
        deploy.client(command)
    topic = deploy.json("tubeq topic describe orders")
    assert all(len(p["isr"]) == 3 for p in topic["partitions"]), topic  # the masters' defaults

    worker_dir = tmp_path / "client-worker"
    worker_dir.mkdir()
    log = open(worker_dir / "log.txt", "wb")  # noqa: SIM115 - the child's; closed below
    worker = subprocess.Popen(
        [*network.run_in(CLIENT), "bash", "-ec", deploy.client_script(
            f"exec {sys.executable} -m tests.deploy.client_worker {worker_dir}")],
        cwd=deploy.work, env=deploy.client_env(), stdout=log, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL)
    log.close()
    processes.clients.append(worker)
    wait_progress(worker_dir, PROGRESS, deploy)

    # Adding a broker: its certificate, its file, its unit; then the page's reassign.
    deploy.issue(f"broker{NEW_BROKER}")
    deploy.start(f"broker{NEW_BROKER}", "broker",
                 page.broker_file(NEW_BROKER, deploy.addresses[f"broker{NEW_BROKER}"]))
    wait_for("the new broker registered",
             lambda: deploy.brokers().get(NEW_BROKER, {}).get("alive"), 60, deploy)
    deploy.client(*page.commands("tubeq topic describe orders"))
    moved = {p["partition"]: p["replicas"] for p in
             deploy.json("tubeq topic describe orders")["partitions"]}
    assert moved[0][0] == NEW_BROKER and moved[1][0] == NEW_BROKER, moved
    wait_progress(worker_dir, PROGRESS, deploy)

    # Draining one: every replica it held moves away, the clients keep going, then it stops.
    deploy.client(*page.commands(f"tubeq broker drain {DRAINED}"))
    assert deploy.brokers()[DRAINED]["replicas"] == 0, deploy.brokers()
    topic = deploy.json("tubeq topic describe orders")
    assert all(DRAINED not in p["replicas"] for p in topic["partitions"]), topic
    wait_progress(worker_dir, PROGRESS, deploy)
    deploy.servers[f"broker{DRAINED}"].stop()  # systemctl disable --now tubeq-broker
    wait_progress(worker_dir, PROGRESS, deploy)

    (worker_dir / "stop").touch()
    worker.wait(120)
    result = json.loads((worker_dir / "result.json").read_text())
    assert result["missing_count"] == 0 and result["reader_ended"], result
    assert result["acked"] >= 4 * PROGRESS, result
    # followers copied over the page's replica stream port, across hosts, under TLS
    for n in (*BROKERS, NEW_BROKER):
        server = deploy.servers[f"broker{n}"]
        opened = server.log_events("replica.stream_opened")
        assert opened and all(e["port"] == 8124 for e in opened), (n, opened)
        failed = [e for e in server.log_events("replica.stream_failed")
                  if "SSL" in e.get("error", "") or "CERTIFICATE" in e.get("error", "")]
        assert not failed, (n, failed)
