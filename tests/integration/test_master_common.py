"""Helpers for the master tests (no tests here): a real master process, stubs, fake brokers.

"Brokers" in master-only tests are this test process calling RegisterBroker/BrokerHeartbeat
with made-up addresses; nothing listens there, so live calls to them fail fast and the master
falls back to heartbeat stats.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lib.auth.settings import CLUSTER_SECRET_ENV, cluster_header
from lib.proto import admin_pb2_grpc, master_pb2, master_pb2_grpc
from lib.rpc import channel, invoke
from tests.cluster import Cluster

FAST = {  # short timeouts so expiry tests finish in seconds
    "broker_heartbeat_interval_ms": 200,
    # A made-up broker registered once must stay alive through a test's few calls even on a
    # loaded machine (a full run once took one past 1.2 s); one test waits for the expiry.
    "broker_timeout_ms": 3000,
    "group_min_session_timeout_ms": 500,
    "group_reaper_interval_ms": 100,
}


def write_config(path: Path, values: dict[str, Any]) -> Path:
    lines = ["[master]"] + [f"{k} = {v!r}" if not isinstance(v, str) else f'{k} = "{v}"'
                            for k, v in values.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


class MasterSession:
    """One real master process (stopped by PID via ``close``) and stubs to talk to it."""

    def __init__(self, root: Path, **config: Any) -> None:
        root.mkdir(parents=True, exist_ok=True)
        cfg = write_config(root / "master.toml", {**FAST, **config})
        self.cluster = Cluster(root, master_args=["--config", str(cfg)])
        try:
            self.proc = self.cluster.start_master()
            self._connect()
        except BaseException:
            self.cluster.stop_all()
            raise

    def _connect(self) -> None:
        self.channel = self.cluster.channel(self.proc.address)
        self.master = master_pb2_grpc.MasterStub(self.channel)
        self.admin = admin_pb2_grpc.AdminStub(self.channel)
        # the made-up brokers present the cluster secret, as real ones do
        self.broker_channel = channel(self.proc.address)
        self.as_broker = master_pb2_grpc.MasterStub(self.broker_channel)

    @property
    def epoch(self) -> int:
        return self.proc.info["epoch"]

    def restart(self) -> None:
        self.channel.close()
        self.broker_channel.close()
        self.proc.stop()
        self.proc.start()
        self._connect()

    def call(self, method: Callable[..., Any], request: Any, principal: str | None = None,
             timeout: float = 5.0) -> Any:
        metadata = [("tubeq-principal", principal)] if principal else None
        return invoke(method, request, timeout, metadata)

    def register(self, broker_id: int, address: str | None = None, rack: str = "") -> Any:
        req = master_pb2.RegisterBrokerRequest(broker_id=broker_id,
                                               address=address or f"127.0.0.1:{broker_id}",
                                               rack=rack)
        return invoke(self.as_broker.RegisterBroker, req, 5.0, _broker_credential())

    def heartbeat(self, broker_id: int, stats: list | None = None, **fields: Any) -> Any:
        req = master_pb2.BrokerHeartbeatRequest(broker_id=broker_id, stats=stats or [],
                                                **fields)
        return invoke(self.as_broker.BrokerHeartbeat, req, 5.0, _broker_credential())

    def close(self) -> None:
        self.channel.close()
        self.broker_channel.close()
        self.cluster.stop_all()


def _broker_credential() -> tuple[tuple[str, str], ...]:
    return cluster_header(os.environ.get(CLUSTER_SECRET_ENV, ""))


class Repeater:
    """Calls ``fn`` every ``interval`` s in a thread until closed (heartbeats in tests)."""

    def __init__(self, fn: Callable[[], Any], interval: float = 0.2) -> None:
        self._fn, self._interval = fn, interval
        self._stop = threading.Event()
        self.errors: list[Exception] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._fn()
            except Exception as exc:  # noqa: BLE001 - inspected by the test
                self.errors.append(exc)
            self._stop.wait(self._interval)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)


def wait_for(condition: Callable[[], Any], timeout: float, what: str,
             interval: float = 0.05) -> Any:
    """Poll ``condition`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
