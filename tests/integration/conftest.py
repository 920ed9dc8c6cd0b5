"""Fixtures that run a real cluster (processes on 127.0.0.1, stopped by PID at the end)."""
from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import Cluster


@pytest.fixture
def cluster_factory(tmp_path):
    """Build clusters; every process started through them is stopped after the test."""
    made: list[Cluster] = []

    def make(brokers: int = 2, master_args=None, broker_args=None, **options) -> Cluster:
        c = Cluster(tmp_path / f"cluster{len(made)}", master_args, broker_args, **options)
        made.append(c)
        return c.start(brokers)

    yield make
    for c in made:
        c.stop_all()


class FileCluster:
    """The cluster the tests of one file share, made again when a test left a server dead
    (killed, stopped, not restarted)."""

    def __init__(self, root: Path) -> None:
        self.root, self.made, self.current = root, 0, None

    def get(self, brokers: int = 2) -> Cluster:
        current = self.current
        if (current is not None and len(current.brokers) == brokers
                and all(p.alive() for p in current.all_processes())):
            current.wait_brokers_registered()  # at the address a restarted broker has now
            return current
        self.stop()
        self.current = Cluster(self.root / f"cluster{self.made}")
        self.made += 1
        return self.current.start(brokers)

    def stop(self) -> None:
        if self.current is not None:
            self.current.stop_all()
            self.current = None


@pytest.fixture(scope="module")
def file_cluster(tmp_path_factory) -> Iterator[FileCluster]:
    shared = FileCluster(tmp_path_factory.mktemp("file-cluster"))
    try:
        yield shared
    finally:
        shared.stop()


@pytest.fixture(scope="module")
def kcluster(tmp_path_factory) -> Iterator[Cluster]:
    """The Kafka port's tests: one cluster per file (tests/integration/kafka_kit.py)."""
    from tests.integration.kafka_kit import start_kafka_cluster

    cluster = start_kafka_cluster(tmp_path_factory.mktemp("kafka"))
    try:
        yield cluster
    finally:
        cluster.stop_all()


@pytest.fixture
def cluster(request, cluster_factory):
    """One master and two brokers: the test's own, or in a file marked ``shared_cluster``
    the file's (``shared_cluster(brokers=1)``: one broker). Starting a cluster costs about
    3 s and 4 s of CPU; a file whose tests make topics of their own names and leave the
    servers running (a restarted one counts) shares one, as Kafka's and Pulsar's integration
    suites share a cluster per test class."""
    shared = request.node.get_closest_marker("shared_cluster")
    if shared is None:
        return cluster_factory(2)
    return request.getfixturevalue("file_cluster").get(shared.kwargs.get("brokers", 2))


def _toml(table: str, settings: dict) -> str:
    """``settings`` as the TOML table ``[table]``; a dict value is a sub-table
    (``store={...}`` under "broker" is ``[broker.store]``)."""
    plain = {k: v for k, v in settings.items() if not isinstance(v, dict)}
    subs = {k: v for k, v in settings.items() if isinstance(v, dict)}
    text = f"[{table}]\n" if plain or not subs else ""
    # JSON's numbers and strings are TOML's; its booleans are spelled the same
    text += "".join(f"{k} = {json.dumps(v)}\n" for k, v in plain.items())
    return text + "".join(_toml(f"{table}.{k}", v) for k, v in subs.items())


@pytest.fixture
def replicated_cluster(cluster_factory, tmp_path):
    """Start clusters for the replication tests: ``make(brokers=2, master_settings=None,
    **broker_settings)`` writes the master's TOML (``master_settings``) and, given any
    ``broker_settings``, the brokers' TOML into ``tmp_path``, then starts the cluster
    through ``cluster_factory``."""
    made = itertools.count()

    def make(brokers: int = 2, *, master_settings: dict | None = None,
             **broker_settings) -> Cluster:
        n = next(made)
        master_conf = tmp_path / f"master{n}.toml"
        master_conf.write_text(_toml("master", master_settings or {}))
        broker_args = None
        if broker_settings:
            broker_conf = tmp_path / f"broker{n}.toml"
            broker_conf.write_text(_toml("broker", broker_settings))
            broker_args = ["--config", str(broker_conf)]
        return cluster_factory(brokers, master_args=["--config", str(master_conf)],
                               broker_args=broker_args)

    return make
