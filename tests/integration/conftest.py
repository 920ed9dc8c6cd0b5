"""Fixtures that run a real cluster (processes on 127.0.0.1, stopped by PID at the end)."""
from __future__ import annotations

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
