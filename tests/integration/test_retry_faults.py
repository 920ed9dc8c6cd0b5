"""Retries and dead letters through consumer crashes (issue 52): 20,000 records, 10 % of them
failing (half of those twice and then taken, half always), consumed by a group of two worker
processes with retries, one of them SIGKILLed every few seconds and restarted. Every record
is taken or dead-lettered after max_attempts with its metadata; none lost, none in both,
none dead-lettered twice; a replay brings the dead letters back."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lib import AdminClient, Producer, TopicPartition
from lib.dead_letters import H_REPLAYED, DeadLetters
from lib.retry import H_ATTEMPTS, H_ERROR, H_OFFSET, H_PARTITION, H_TOPIC
from tests.integration.reads import read_to_end

ROOT = Path(__file__).resolve().parents[2]
TOPIC, GROUP, PARTITIONS, RECORDS, KILLS = "rtf-in", "rtf-g", 4, 20_000, 5


class Worker:
    def __init__(self, masters: str, out: Path, log: Path) -> None:
        self.log = log.open("a")
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.retry_worker", masters, TOPIC, GROUP,
             str(out)], cwd=ROOT, stdin=subprocess.DEVNULL, stdout=self.log,
            stderr=subprocess.STDOUT)

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(10)


def kind(n: int) -> str:
    return "bad" if n % 20 == 0 else "flaky" if n % 20 == 10 else "ok"


def taken(paths: list[Path]) -> set[str]:
    return {line for p in paths if p.exists() for line in p.read_text().split("\n") if line}


@pytest.mark.shared_cluster(brokers=2)
def test_every_record_is_taken_or_dead_lettered_once_through_consumer_kills(cluster, tmp_path):
    masters = cluster.master_addresses
    with AdminClient(masters) as admin:
        admin.create_topic(TOPIC, partitions=PARTITIONS)
        admin.create_topic("rtf-replayed", partitions=1)
    values = [f"{kind(n)}-{n}" for n in range(RECORDS)]
    where: dict[str, tuple[int, int]] = {}
    with Producer(masters, linger_ms=5) as producer:
        futures = [(v, producer.send(TOPIC, v.encode(), partition=n % PARTITIONS))
                   for n, v in enumerate(values)]
        for v, f in futures:
            md = f.result(60)
            where[v] = (md.partition, md.offset)
    bad = {v for v in values if v.startswith("bad")}
    outs = [tmp_path / f"taken-{i}.txt" for i in range(2 + KILLS)]
    workers = [Worker(masters, outs[0], tmp_path / "w0.log"),
               Worker(masters, outs[1], tmp_path / "w1.log")]
    try:
        for k in range(KILLS):
            time.sleep(3)  # paces the faults: the workers consume between them
            victim = workers.pop(0)
            victim.kill()
            workers.append(Worker(masters, outs[2 + k], tmp_path / f"w{2 + k}.log"))
        deadline = time.monotonic() + 180
        want = set(values) - bad
        while time.monotonic() < deadline and not want <= taken(outs):
            time.sleep(1)
        dlq = f"{GROUP}.dlq"
        while time.monotonic() < deadline:
            dead = read_to_end(masters, [TopicPartition(dlq, 0)], "read_committed")
            if sum(len(rs) for rs in dead.values()) >= len(bad):
                break
            time.sleep(1)
        time.sleep(2)  # anything moved twice would show up now
        dead = [r for rs in read_to_end(masters, [TopicPartition(dlq, 0)],
                                        "read_committed").values() for r in rs]
    finally:
        for w in workers:
            w.kill()
    logs = ", ".join(str(p) for p in sorted(tmp_path.glob("w*.log")))
    got = taken(outs)
    dead_values = [r.value.decode() for r in dead]
    assert not (set(values) - bad) - got, f"records neither taken nor dead-lettered ({logs})"
    assert not got & bad, "a record that always fails was taken"
    assert sorted(dead_values) == sorted(bad), \
        f"dead letters: {len(dead_values)} ({len(set(dead_values))} distinct), want {len(bad)}"
    for r in dead:
        v = r.value.decode()
        assert (r.headers[H_TOPIC].decode(), int(r.headers[H_PARTITION]),
                int(r.headers[H_OFFSET])) == (TOPIC, *where[v])
        assert r.headers[H_ATTEMPTS] == b"3"
        assert r.headers[H_ERROR] == f"RuntimeError: bad record {v}".encode()

    with AdminClient(masters) as admin:
        letters = DeadLetters(masters, admin)
        assert [(t.group, t.topic) for t in letters.topics() if t.group == GROUP] == \
            [(GROUP, f"{GROUP}.dlq")]
        assert letters.replay(GROUP, to="rtf-replayed") == len(bad)
        entry = next(e for e in admin.audit_log(50) if e.action == "dlq_replay")
        assert entry.target == GROUP and json.loads(entry.details)["records"] == len(bad)
    replayed = [r for rs in read_to_end(masters, [TopicPartition("rtf-replayed", 0)],
                                        "read_committed").values() for r in rs]
    assert sorted(r.value.decode() for r in replayed) == sorted(bad)
    assert all(H_ATTEMPTS not in r.headers and r.headers[H_REPLAYED].startswith(b"rtf-g.dlq/")
               for r in replayed), "a replayed record starts its failures again"
