"""Fixtures that run a real cluster (processes on 127.0.0.1, stopped by PID at the end)."""
from __future__ import annotations

import itertools
import json

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


@pytest.fixture
def cluster(cluster_factory):
    """One master and two brokers."""
    return cluster_factory(2)


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
