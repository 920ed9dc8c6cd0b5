"""Consumer groups against a real cluster: split, rebalance on join, failover on SIGKILL."""
from __future__ import annotations

import bisect
import os
import random
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from lib import errors
from lib.consumer.pull import PullConsumer
from lib.types import TopicPartition
from tests.integration.test_consumer_common import Feeder, poll_until, wait_for

pytestmark = pytest.mark.shared_cluster

ROOT = Path(__file__).resolve().parents[2]
SESSION_MS = 3000
TOPIC = "events"
PARTS = 6

CHILD = textwrap.dedent("""
    import sys, time
    from lib import errors
    from lib.consumer.pull import PullConsumer
    from lib.types import TopicPartition
    masters, topic, out = sys.argv[1], sys.argv[2], open(sys.argv[3], "a", buffering=1)
    c = PullConsumer(masters, group="grp", auto_offset_reset="earliest",
                     enable_auto_commit=False, session_timeout_ms=int(sys.argv[4]),
                     max_poll_records=50)
    c.subscribe([topic])
    while True:
        out.write("assigned %s\\n" % ",".join(str(tp.partition) for tp in c.assignment()))
        recs = c.poll(timeout=0.2)
        now = time.time()
        out.write("".join("got %d %d %f\\n" % (r.partition, r.offset, now) for r in recs))
        ends = {TopicPartition(topic, r.partition): r.offset + 1 for r in recs}
        try:
            c.commit(ends)
            now = time.time()
            out.write("".join("commit %d %d %f\\n" % (tp.partition, o, now)
                              for tp, o in ends.items()))
        except errors.TubeqError:
            pass
        time.sleep(0.02)
""")


class Log:
    """Deliveries and acknowledged commits of every member, with wall-clock times."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.got: list[tuple[str, int, int, float]] = []  # member, partition, offset, time
        self.commits: list[tuple[int, int, float]] = []  # partition, offset, ack time

    def check_no_committed_record_redelivered(self, live: set[str]) -> None:
        per_part: dict[int, list[tuple[float, int]]] = {}
        for p, off, t in self.commits:
            per_part.setdefault(p, []).append((t, off))
        for p, rows in per_part.items():
            rows.sort()
            times = [t for t, _ in rows]
            best, top = [], -1
            for _, off in rows:
                top = max(top, off)
                best.append(top)
            for member, part, off, t in self.got:
                if part != p or member not in live:
                    continue
                i = bisect.bisect_left(times, t) - 1
                assert i < 0 or off >= best[i], (
                    f"{member} got {p}:{off} after offset {best[i]} was committed")


class Member(threading.Thread):
    """A group member in this process: polls slowly and commits after every poll."""

    def __init__(self, name: str, masters: str, log: Log) -> None:
        super().__init__(name=name, daemon=True)
        self.masters, self.log = masters, log
        self.stop = threading.Event()
        self.consumer: PullConsumer | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with PullConsumer(self.masters, group="grp", auto_offset_reset="earliest",
                              enable_auto_commit=False, session_timeout_ms=SESSION_MS,
                              max_poll_records=50) as c:
                self.consumer = c
                c.subscribe([TOPIC])
                while not self.stop.is_set():
                    self.step(c)
        except BaseException as exc:  # surfaced by the test
            self.error = exc

    def step(self, c: PullConsumer) -> None:
        recs = c.poll(timeout=0.2)
        now = time.time()
        ends = {TopicPartition(TOPIC, r.partition): r.offset + 1 for r in recs}
        with self.log.lock:
            self.log.got += [(self.name, r.partition, r.offset, now) for r in recs]
        try:
            c.commit(ends)
        except errors.Fenced:
            return
        now = time.time()
        with self.log.lock:
            self.log.commits += [(tp.partition, o, now) for tp, o in ends.items()]
        time.sleep(0.02)

    def assigned(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()} if self.consumer else set()


@pytest.fixture
def feeder(cluster):
    f = Feeder(cluster.master_addresses)
    yield f
    f.close()


@pytest.fixture
def child(tmp_path):
    """Start the third member as a child process; always stopped by PID at the end."""
    procs: list[subprocess.Popen] = []

    def start(masters: str) -> tuple[subprocess.Popen, Path]:
        out = tmp_path / f"child{len(procs)}.txt"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        p = subprocess.Popen([sys.executable, "-c", CHILD, masters, TOPIC, str(out),
                              str(SESSION_MS)], cwd=ROOT,
                             env=env, stdin=subprocess.DEVNULL)
        procs.append(p)
        return p, out

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(10)


def child_lines(path: Path, kind: str) -> list[list[str]]:
    if not path.exists():
        return []
    return [line.split()[1:] for line in path.read_text().splitlines()
            if line.startswith(kind + " ") and len(line.split()) == 4]


def child_assignment(path: Path) -> set[int]:
    rows = [line for line in path.read_text().splitlines() if line.startswith("assigned")] \
        if path.exists() else []
    last = rows[-1].split(" ", 1)[1] if rows else ""
    return {int(x) for x in last.split(",") if x.strip()}


def test_group_splits_rebalances_on_join_and_moves_partitions_of_a_killed_member(
        cluster, feeder, child):
    masters = cluster.master_addresses
    feeder.create_topic(TOPIC, PARTS)
    feeder.fill(TOPIC, PARTS, 200)
    log = Log()
    a, b = Member("a", masters, log), Member("b", masters, log)
    stop_feed = threading.Event()
    feed = threading.Thread(target=_feed, args=(feeder, stop_feed), daemon=True)
    try:
        a.start()
        b.start()
        feed.start()
        wait_for(lambda: len(a.assigned()) == 3 and len(b.assigned()) == 3
                 and a.assigned() | b.assigned() == set(range(PARTS)), 20, "3 + 3 split")

        proc, out = child(masters)
        wait_for(lambda: len(child_assignment(out)) == 2 and len(a.assigned()) == 2
                 and len(b.assigned()) == 2, 20, "rebalance to 2 + 2 + 2 after a join")
        wait_for(lambda: len(child_lines(out, "commit")) >= 2, 20, "the child to commit")

        proc.kill()
        proc.wait(10)
        killed = time.monotonic()
        wait_for(lambda: a.assigned() | b.assigned() == set(range(PARTS)), 15,
                 "the killed member's partitions to move")
        moved_after = time.monotonic() - killed
        # The master expires the session after SESSION_MS; members hear at their next beat.
        assert moved_after < SESSION_MS / 1000 + SESSION_MS / 3000 + 1.5, moved_after

        stop_feed.set()
        feed.join(30)
        latest = _latest(feeder)
        wait_for(lambda: _committed_all(log, latest), 40, "everything consumed and committed")
    finally:
        stop_feed.set()
        for m in (a, b):
            m.stop.set()
        for m in (a, b):
            m.join(20)
    assert a.error is None and b.error is None, (a.error, b.error)

    with log.lock:
        got = {(p, o) for _, p, o, _ in log.got}
        got |= {(int(p), int(o)) for p, o, _ in child_lines(out, "got")}
        log.commits += [(int(p), int(o), float(t)) for p, o, t in child_lines(out, "commit")]
    expected = {(p, o) for p, n in latest.items() for o in range(n)}
    assert expected - got == set(), "records skipped"
    log.check_no_committed_record_redelivered({"a", "b"})


def _feed(feeder: Feeder, stop: threading.Event) -> None:
    """Keep appending while the group rebalances (small batches to random partitions)."""
    n = 0
    while not stop.is_set():
        p = random.randrange(PARTS)
        feeder.produce(TOPIC, p, [f"live-{n}-{i}".encode() for i in range(10)])
        n += 1
        time.sleep(0.02)


def _latest(feeder: Feeder) -> dict[int, int]:
    with PullConsumer(feeder.masters.masters) as c:
        tps = [TopicPartition(TOPIC, p) for p in range(PARTS)]
        c.assign(tps)
        c.seek_to_end()
        return {tp.partition: c.position(tp) for tp in tps}


def _committed_all(log: Log, latest: dict[int, int]) -> bool:
    with log.lock:
        top: dict[int, int] = {}
        for p, o, _ in log.commits:
            top[p] = max(top.get(p, 0), o)
    return all(top.get(p, 0) >= n for p, n in latest.items())


def test_two_groups_each_receive_every_message(cluster, feeder):
    feeder.create_topic("fanout", 3)
    feeder.fill("fanout", 3, 100)
    masters = cluster.master_addresses
    with PullConsumer(masters, group="g-one", auto_offset_reset="earliest",
                      session_timeout_ms=SESSION_MS) as one, \
            PullConsumer(masters, group="g-two", auto_offset_reset="earliest",
                         session_timeout_ms=SESSION_MS) as two:
        one.subscribe(["fanout"])
        two.subscribe(["fanout"])
        got_one, got_two = poll_until(one, 300), poll_until(two, 300)
    want = {(p, o) for p in range(3) for o in range(100)}
    assert {(r.partition, r.offset) for r in got_one} == want
    assert {(r.partition, r.offset) for r in got_two} == want
    assert len(got_one) == len(got_two) == 300


def test_leaving_member_hands_its_partitions_over_at_the_committed_offset(cluster, feeder):
    feeder.create_topic("handover", 2)
    feeder.fill("handover", 2, 50)
    masters = cluster.master_addresses
    kw = dict(group="gh", auto_offset_reset="earliest", session_timeout_ms=SESSION_MS,
              max_poll_records=10)
    first = PullConsumer(masters, **kw)
    first.subscribe(["handover"])
    got = poll_until(first, 10)
    first.close()  # commits what poll returned, then leaves: the master rebalances at once
    with PullConsumer(masters, **kw) as second:
        second.subscribe(["handover"])
        rest = poll_until(second, 90)
    seen = [(r.partition, r.offset) for r in got + rest]
    assert sorted(seen) == [(p, o) for p in range(2) for o in range(50)]


def test_a_manual_assignment_commit_makes_describe_group_list_its_topic(cluster, feeder):
    """A consumer that never joins (assign + commit) still shows in describe_group: the
    broker reports the new (group, topic) in its next heartbeat."""
    from lib.admin import AdminClient

    feeder.create_topic("manual", 2)
    feeder.fill("manual", 2, 10)
    masters = cluster.master_addresses
    with PullConsumer(masters, group="g-manual", enable_auto_commit=False) as consumer:
        consumer.assign([TopicPartition("manual", 0), TopicPartition("manual", 1)])
        consumer.commit({TopicPartition("manual", 0): 4, TopicPartition("manual", 1): 10})
    with AdminClient(masters) as admin:
        rows = wait_for(lambda: admin.describe_group("g-manual").partitions, 20,
                        "the master to list the manual group's topic")
        assert sorted((r.topic, r.partition, r.committed, r.lag) for r in rows) == \
            [("manual", 0, 4, 6), ("manual", 1, 10, 0)]
        assert "g-manual" in admin.list_groups()


def test_heartbeats_without_a_change_do_not_reassign(cluster, feeder):
    """A heartbeat answering the same member, generation and partitions is no rebalance: no
    on_assign call, no claim of the offsets again (it used to do both at every heartbeat)."""
    feeder.create_topic("steady", 2)
    calls: list[set] = []

    class Counting(PullConsumer):
        def on_assign(self, tps):
            calls.append(set(tps))
            super().on_assign(tps)

    with Counting(cluster.master_addresses, group="g-steady", auto_offset_reset="earliest",
                  session_timeout_ms=SESSION_MS) as consumer:
        consumer.subscribe(["steady"])
        wait_for(lambda: consumer.poll(timeout=0.2) is not None and calls, 20, "the assignment")
        deadline = time.monotonic() + 3 * SESSION_MS / 1000 / 3 + 0.5  # three heartbeats
        while time.monotonic() < deadline:
            consumer.poll(timeout=0.2)
    assert calls == [{TopicPartition("steady", 0), TopicPartition("steady", 1)}]
