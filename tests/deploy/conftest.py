"""Fixtures of the deploy tests: hosts as network namespaces, and every process started in
them stopped by PID at the end (clients first, then brokers, then masters), even on failure;
the namespaces, veths and bridge are deleted after that."""
from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from tests.cluster import ServerProcess
from tests.deploy.netns import Network, why_not

STOP_S = 15.0


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "netns: servers on hosts of their own (Linux network namespaces: root; "
                   "skipped elsewhere)")


@pytest.fixture
def network() -> Iterator[Network]:
    reason = why_not()
    if reason:
        pytest.skip(f"no network namespaces here: {reason}")
    net = Network()
    try:
        yield net
    finally:
        net.close()


class Processes:
    """Servers (``ServerProcess``) and clients (``Popen``) a test started, by PID."""

    def __init__(self) -> None:
        self.clients: list[subprocess.Popen] = []
        self.servers: list[ServerProcess] = []

    def stop_all(self) -> None:
        for popen in self.clients:
            if popen.poll() is None:
                popen.terminate()
        for popen in self.clients:
            try:
                popen.wait(STOP_S)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait()
        # The portal (and any other client-side server) first, then brokers (they still reach
        # the masters as they stop), then the masters: every server started, whatever its role.
        order = [[s for s in self.servers if s.role not in ("broker", "master")],
                 [s for s in self.servers if s.role == "broker"],
                 [s for s in self.servers if s.role == "master"]]
        for group in order:
            group = [s for s in group if s.popen is not None]
            for server in group:
                server.terminate()
            for server in group:
                server.reap(STOP_S)


@pytest.fixture
def processes(network) -> Iterator[Processes]:
    """Requested after ``network``: torn down before it, so no process outlives its host."""
    made = Processes()
    try:
        yield made
    finally:
        made.stop_all()
