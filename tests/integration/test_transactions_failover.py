"""A decided transaction survives the active master's death: 3 masters, a commit decided
(PREPARE_COMMIT replicated) while one broker cannot take its markers, the active master
SIGKILLed; the new active master writes the markers and completes the commit, and every
record of the transaction is read once by read_committed consumers."""
from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from lib import errors
from tests.integration.test_broker_cluster import Harness
from tests.integration.test_transactions import (
    RawTxnProducer,
    ensure_topics,
    every_partition,
    read,
    transactions,
)


def freeze(proc) -> None:
    """SIGSTOP a broker and wait until every thread of it stopped."""
    proc.signal(signal.SIGSTOP)
    deadline = time.monotonic() + 10
    tasks = Path(f"/proc/{proc.pid}/task")
    while not all(Path(t, "stat").read_text().rsplit(")", 1)[1].split()[0] in "tT"
                  for t in tasks.iterdir()):
        assert time.monotonic() < deadline, "the broker did not stop"
        time.sleep(0.02)


def test_the_new_active_master_finishes_the_markers_of_a_decided_commit(cluster_factory):
    cluster = cluster_factory(2, masters=3)
    h = Harness(cluster)
    frozen = cluster.brokers[2]
    try:
        ensure_topics(h)
        producer = RawTxnProducer(h, "tx-failover").init()
        producer.add(every_partition())
        for t, p in every_partition():
            producer.send(t, p, f"{t}{p}".encode())
        assert {h.address(t, p) for t, p in every_partition()} == \
            {cluster.brokers[1].address, frozen.address}, "both brokers lead some partitions"
        freeze(frozen)
        with pytest.raises(errors.ConcurrentTransactions, match="PREPARE_COMMIT"):
            producer.end(commit=True, timeout=3)  # decided; broker 2 takes no marker
        assert transactions(h)["tx-failover"].state == "PREPARE_COMMIT"
        cluster.leader().kill()
        frozen.signal(signal.SIGCONT)
        deadline = time.monotonic() + 60
        while transactions(h)["tx-failover"].state != "COMPLETE_COMMIT":
            assert time.monotonic() < deadline, transactions(h)["tx-failover"]
            time.sleep(0.2)
        producer.end(commit=True)  # the producer's retry at the new master: success
        values = read(h, 7, wait_s=10)
        assert Counter(values) == Counter(f"{t}{p}".encode() for t, p in every_partition())
    finally:
        frozen.signal(signal.SIGCONT)
        h.close()
