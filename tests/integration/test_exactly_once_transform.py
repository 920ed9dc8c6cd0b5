"""Consume-transform-produce, exactly once (load/exactly_once.py, docs/transactions.md): two
worker processes of one group turn an input topic into an output topic while one of them is
SIGKILLed every few seconds and started again under its transactional_id; the output, read
committed, holds every input record exactly once. The kills land mid-transaction, between a
commit and the next poll, and across rebalances (each restart joins the group again)."""
from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from lib import AdminClient, Producer, TopicPartition
from tests.cluster import ROOT
from tests.integration.reads import read_to_end

INPUT, OUTPUT, GROUP = "eos-in", "eos-out", "eos-upper"
PARTITIONS = 4
RECORDS = 6000
KILLS = 4


class Worker:
    """One ``load.exactly_once`` process, stopped by its PID."""

    def __init__(self, masters: str, tid: str, log: Path) -> None:
        self.log = log.open("a")
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "load.exactly_once", "--masters", masters, "--input", INPUT,
             "--output", OUTPUT, "--group", GROUP, "--transactional-id", tid,
             "--max-records", "200", "--progress"],
            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)

    def commits(self) -> int:
        """Transactions it committed so far (its --progress lines)."""
        self.log.flush()
        return Path(self.log.name).read_text().count("committed ")

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(10)


def feed(masters: str, values: list[bytes], seconds: float = 40.0) -> None:
    """The input, in slices spread over ``seconds``."""
    slices = 70
    step = len(values) // slices
    with Producer(masters) as producer:
        for n in range(slices):
            for i in range(n * step, len(values) if n == slices - 1 else (n + 1) * step):
                producer.send(INPUT, values[i], key=b"k%d" % (i % 97))
            producer.flush(60)
            time.sleep(seconds / slices)  # pacing the input, not waiting for a result


def output_values(masters: str) -> list[bytes]:
    got = read_to_end(masters, [TopicPartition(OUTPUT, p) for p in range(PARTITIONS)],
                      "read_committed", 120)
    return [r.value for records in got.values() for r in records]


@pytest.mark.shared_cluster(brokers=2)
def test_the_output_holds_every_input_exactly_once_through_worker_kills(cluster, tmp_path):
    masters = cluster.master_addresses
    with AdminClient(masters) as admin:
        for topic in (INPUT, OUTPUT):
            admin.create_topic(topic, partitions=PARTITIONS)
    want = [f"record-{i:05d}".encode() for i in range(RECORDS)]
    feeder = threading.Thread(target=feed, args=(masters, want), daemon=True)
    rng = random.Random(7)
    steady = Worker(masters, "eos-steady", tmp_path / "steady.log")
    killed: list[Worker] = []
    feeder.start()  # the input arrives while the kills happen: workers are busy when killed
    try:
        for _ in range(KILLS):
            before = killed[-1].commits() if killed else 0
            killed.append(Worker(masters, "eos-crashy", tmp_path / "crashy.log"))
            deadline = time.monotonic() + 60
            while killed[-1].commits() < before + 2:  # busy: mid-stream when killed
                assert time.monotonic() < deadline and feeder.is_alive(), "never got busy"
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 0.4))  # the fault's timing, not a wait for a result
            killed[-1].kill()
        killed.append(Worker(masters, "eos-crashy", tmp_path / "crashy.log"))
        feeder.join(120)
        assert not feeder.is_alive()
        deadline = time.monotonic() + 240
        while len(got := output_values(masters)) < RECORDS:
            assert time.monotonic() < deadline, (
                f"{len(got)} of {RECORDS} after 240 s; crashy worker's log:\n"
                + (tmp_path / "crashy.log").read_text()[-3000:])
            time.sleep(1)
    finally:
        for w in [*killed, steady]:
            w.kill()
            w.log.close()
    counts = Counter(got)
    assert not [v for v, n in counts.items() if n > 1], "an input record written twice"
    assert sorted(got) == sorted(v.upper() for v in want), \
        f"{len(set(v.upper() for v in want) - set(got))} input records missing"
