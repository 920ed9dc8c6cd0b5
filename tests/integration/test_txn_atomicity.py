"""Transactions stay atomic through crashes, over real processes (docs/transactions.md).

A transactional producer runs as a child process (tests/integration/txn_worker.py) so that it
can be SIGKILLed and SIGSTOPped like a real application:

- it commits transactions of 10 records over 6 partitions of 2 topics (replication factor 2,
  acks="all") while it, a partition leader broker and the active master (of 3) are
  SIGKILLed and restarted at random points (``TXN_ATOMICITY_SEED`` replays a run's order
  and pauses): a read_committed consumer sees each transaction whole or not at all, every
  transaction whose commit() returned among them, in transaction order within each
  partition; a read_uncommitted consumer sees all of that at the same offsets and the
  aborted ones too, nothing twice, nothing skipped (dense but for the markers); consumers
  reading during the faults read exactly what the final log holds;
- a transaction left open by a SIGKILLed producer is aborted after its
  transaction_timeout_ms, after which read_committed consumers read past it, never into it;
- a zombie instance SIGSTOPped mid-transaction while a new instance of its transactional_id
  commits is fenced when it wakes: nothing it sends after the fence is stored;
- a commit never returns with a record of the transaction lost: acks="1" is refused for a
  transactional producer (a leader failover could lose a record only the leader held), and an
  async topic's cached records lost in a broker crash make the commit refuse
  (TxnRecordsLost: the pre-commit check, Broker.SyncTxn).

Each test is bounded: faults wait for conditions with generous deadlines (a 2-core machine
running other tests), never for fixed sleeps to assert.
"""
from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from lib import AdminClient, Producer, PullConsumer, TopicPartition
from lib.errors import ConfigError, TubeqError
from tests.cluster import ROOT, Cluster, ServerProcess
from tests.integration.fault_kit import FAST_FAILOVER, REPLICA_LAG_MAX_MS, wait_until
from tests.integration.reads import read_to_end
from tests.integration.test_broker_cluster import Harness
from tests.integration.txn_worker import RECORDS

TOPICS = ("atom-a", "atom-b")
PARTITIONS = 3
PLACES = [(t, p) for t in TOPICS for p in range(PARTITIONS)]
FAULTS_EACH = 3  # SIGKILLs of the producer, of a leader broker and of the active master
PROGRESS = 3  # transactions committed between two faults
PACE_MS = 20  # between two records of a transaction: kills land among the sends too
DEADLINE_S = 60.0  # for any one condition (a busy machine); an idle one needs a few seconds
VALUE = re.compile(rb"t(\d{6})-(\d{2})")


class Workers:
    """txn_worker child processes: started with their output in ``root``, stopped by PID."""

    def __init__(self, root: Path) -> None:
        self.root, self.procs = root, []

    def start(self, mode: str, masters: str, tid: str, *args: str) -> tuple[subprocess.Popen,
                                                                           Path]:
        n = len(self.procs)
        out, log = self.root / f"{tid}-{n}.out", self.root / f"{tid}-{n}.log"
        with open(log, "ab") as log_file:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.integration.txn_worker", mode, masters, tid,
                 str(out), *args], cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log_file,
                stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        self.procs.append(proc)
        return proc, out

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)  # a stopped one too
                proc.kill()
                proc.wait(10)


@pytest.fixture
def workers(tmp_path):
    made = Workers(tmp_path)
    try:
        yield made
    finally:
        made.stop_all()


def lines(path: Path) -> list[list[str]]:
    """The worker's output lines, split (a line it had not finished is left out)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [line.split() for line in text.splitlines(keepends=True) if line.endswith("\n")]


def numbers(outs: list[Path], word: str) -> list[int]:
    return [int(fields[1]) for out in outs for fields in lines(out) if fields[0] == word]


def logs(root: Path) -> str:
    """The workers' outputs and logs, for a failing assertion."""
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                     for p in sorted(root.glob("*.out")) + sorted(root.glob("*.log")))


def read_all(masters: str, tps: list[TopicPartition], isolation: str,
             wait_s: float = DEADLINE_S) -> dict[TopicPartition, list[tuple[int, bytes]]]:
    """(offset, value) per partition that a consumer of ``isolation`` reads from the start of
    each partition up to its end now (the last stable offset for read_committed)."""
    return {tp: [(r.offset, r.value) for r in records]
            for tp, records in read_to_end(masters, tps, isolation, wait_s).items()}


def open_transactions(masters: str) -> dict[str, str]:
    """transactional_id -> state of every transaction open or ending."""
    with AdminClient(masters, timeout=30) as admin:
        return {t.transactional_id: t.state for t in admin.list_transactions()}


# -- 1. atomicity through SIGKILLs of the producer, a leader broker and the active master ---


@pytest.fixture
def ha_cluster(cluster_factory, tmp_path):
    """3 masters, 2 brokers; leaders move about 2 s after a broker dies."""
    master_conf, broker_conf = tmp_path / "master.toml", tmp_path / "broker.toml"
    master_conf.write_text("[master]\n" + "".join(f"{k} = {v}\n"
                                                  for k, v in FAST_FAILOVER.items()))
    broker_conf.write_text(f"[broker]\nreplica_lag_max_ms = {REPLICA_LAG_MAX_MS}\n")
    cluster = cluster_factory(2, masters=3, master_args=["--config", str(master_conf)],
                              broker_args=["--config", str(broker_conf)])
    with AdminClient(cluster.master_addresses, timeout=30) as admin:
        for topic in TOPICS:
            admin.create_topic(topic, partitions=PARTITIONS, replication_factor=2)
    return cluster


class LiveReader(threading.Thread):
    """A consumer of ``isolation`` reading the partitions from their start while the faults
    happen; keeps (offset, value) per partition. After ``finish(ends)`` it reads up to
    ``ends`` and stops."""

    def __init__(self, masters: str, tps: list[TopicPartition], isolation: str) -> None:
        super().__init__(daemon=True)
        self.masters, self.tps, self.isolation = masters, tps, isolation
        self.got: dict[TopicPartition, list[tuple[int, bytes]]] = defaultdict(list)
        self.errors: list[str] = []
        self.ends: dict[TopicPartition, int] | None = None
        self.done = threading.Event()

    def run(self) -> None:
        try:
            with PullConsumer(self.masters, isolation_level=self.isolation,
                              fetch_max_wait_ms=100, rpc_timeout_s=30) as consumer:
                consumer.assign(self.tps)
                consumer.seek_to_beginning(*self.tps)
                while self.ends is None or any(consumer.position(tp) < end
                                               for tp, end in self.ends.items()):
                    self._poll(consumer)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(repr(exc))
        finally:
            self.done.set()

    def _poll(self, consumer: PullConsumer) -> None:
        try:
            for r in consumer.poll(timeout=0.3):
                self.got[TopicPartition(r.topic, r.partition)].append((r.offset, r.value))
        except TubeqError as exc:  # a leader or master gone: the consumer finds the next
            self.errors.append(repr(exc))
            time.sleep(0.2)

    def finish(self, ends: dict[TopicPartition, int]) -> dict[TopicPartition, list]:
        self.ends = ends
        assert self.done.wait(DEADLINE_S), f"{self.isolation} live reader: {self.errors}"
        return self.got


class Faults:
    """The faults of the atomicity test, one at a time, each waited out."""

    def __init__(self, cluster: Cluster, workers: Workers, rng: random.Random) -> None:
        self.cluster, self.workers, self.rng = cluster, workers, rng
        self.masters = cluster.master_addresses
        self.outs: list[Path] = []
        self.worker: subprocess.Popen | None = None
        self.stop_file, self.hold_file = workers.root / "stop", workers.root / "hold"
        self.held: list[int] = []  # transactions killed with half their records acknowledged

    def start_worker(self) -> None:
        start = max(numbers(self.outs, "begin"), default=-1) + 1
        self.worker, out = self.workers.start(
            "loop", self.masters, "atom-loop", "--places",
            ",".join(f"{t}:{p}" for t, p in PLACES), "--start", str(start),
            "--stop", str(self.stop_file), "--hold", str(self.hold_file),
            "--pace-ms", str(PACE_MS))
        self.outs.append(out)

    def committed(self) -> list[int]:
        return numbers(self.outs, "commit")

    def progress(self, count: int = PROGRESS) -> None:
        """Until ``count`` more transactions committed, then a random pause."""
        want = len(self.committed()) + count
        wait_until(lambda: len(self.committed()) >= want or self.worker.poll() is not None,
                   f"{count} more commits", DEADLINE_S)
        assert self.worker.poll() is None, f"the worker exited\n{logs(self.workers.root)}"
        time.sleep(self.rng.uniform(0, 1.0))  # a random point of the next transaction

    def kill_producer(self) -> None:
        """The first time in the middle of a transaction (half of it acknowledged), then at
        a random point."""
        if not self.held:
            self.hold_file.touch()
            wait_until(lambda: numbers(self.outs[-1:], "holding") or self.worker.poll()
                       is not None, "a transaction half sent", DEADLINE_S)
            assert self.worker.poll() is None, f"the worker exited\n{logs(self.workers.root)}"
            self.held += numbers(self.outs[-1:], "holding")
            self.hold_file.unlink()
        self.worker.kill()
        self.worker.wait(10)
        self.start_worker()

    def kill_leader_broker(self) -> None:
        with AdminClient(self.masters, timeout=30) as admin:
            wait_until(lambda: all(len(p.isr) == 2 for p in self.partitions(admin)),
                       "every partition's replicas in sync", DEADLINE_S)
            victim = self.rng.choice(self.partitions(admin)).broker_id
            self.cluster.brokers[victim].kill()
            wait_until(lambda: all(p.broker_id != victim and p.available
                                   for p in self.partitions(admin)),
                       f"leaders elected instead of broker {victim}", DEADLINE_S)
        self.cluster.start_broker(victim)
        self.cluster.wait_brokers_registered(DEADLINE_S)

    @staticmethod
    def partitions(admin: AdminClient) -> list:
        return [p for t in TOPICS for p in admin.describe_topic(t).partitions]

    def kill_active_master(self) -> None:
        old = self.cluster.leader(timeout=DEADLINE_S)
        old.kill()
        assert self.cluster.leader(timeout=DEADLINE_S) is not old
        old.start()

    def stop_worker(self) -> None:
        self.stop_file.touch()
        self.worker.wait(DEADLINE_S * 2)
        assert self.worker.returncode == 0, f"worker exit {self.worker.returncode}\n" \
                                            f"{logs(self.workers.root)}"


def transactions_of(values: list[bytes]) -> dict[int, Counter]:
    """Transaction number -> how many times each record index was read."""
    got: dict[int, Counter] = defaultdict(Counter)
    for value in values:
        match = VALUE.fullmatch(value)
        assert match, f"a value no transaction wrote: {value!r}"
        got[int(match[1])][int(match[2])] += 1
    return got


def txn_of(value: bytes) -> int:
    return int(VALUE.fullmatch(value)[1])


def test_transactions_are_all_or_nothing_through_producer_broker_and_master_kills(
        ha_cluster, workers):
    seed = int(os.environ.get("TXN_ATOMICITY_SEED", time.time_ns() % 1_000_000))
    print(f"TXN_ATOMICITY_SEED={seed}")
    rng = random.Random(seed)
    faults = Faults(ha_cluster, workers, rng)
    plan = ["producer", "broker", "master"] * FAULTS_EACH
    rng.shuffle(plan)
    tps = [TopicPartition(t, p) for t, p in PLACES]
    live = {isolation: LiveReader(faults.masters, tps, isolation)
            for isolation in ("read_committed", "read_uncommitted")}
    for reader in live.values():
        reader.start()
    faults.start_worker()
    for fault in plan:
        faults.progress()
        print(f"{time.strftime('%H:%M:%S')} SIGKILL {fault}")
        {"producer": faults.kill_producer, "broker": faults.kill_leader_broker,
         "master": faults.kill_active_master}[fault]()
    faults.progress()
    faults.stop_worker()
    wait_until(lambda: "atom-loop" not in open_transactions(faults.masters),
               "the last transaction ended", DEADLINE_S)

    committed = read_all(faults.masters, tps, "read_committed")
    seen = read_all(faults.masters, tps, "read_uncommitted")
    with PullConsumer(faults.masters) as consumer:
        consumer.assign(tps)
        ends = consumer.end_offsets()
    context = f"seed {seed}, plan {plan}\n{logs(workers.root)}"
    for isolation, final in (("read_committed", committed), ("read_uncommitted", seen)):
        # what a reader read while leaders and masters died is what the log holds in the
        # end: nothing later aborted or truncated away, nothing skipped, nothing twice
        got = live[isolation].finish(ends)
        differ = {tp: (got[tp], final[tp]) for tp in tps if got[tp] != final[tp]}
        assert not differ, f"{isolation} read during the faults: {differ}, errors " \
                           f"{live[isolation].errors[-5:]}; {context}"
    txns = check_committed(committed, set(faults.committed()), context)
    assert len(txns) >= PROGRESS * (len(plan) + 1), context
    aborted = check_uncommitted(seen, committed, ends, faults.held, context)
    print(f"{len(txns)} transactions committed, {len(aborted)} aborted, "
          f"{sum(map(len, seen.values()))} records read uncommitted; killed holding "
          f"{faults.held}")


def check_committed(committed: dict, recorded: set[int], context: str) -> set[int]:
    """Every transaction read committed is whole, once; every ``recorded`` one (commit()
    returned) is among them; each partition holds them in transaction order. Returns
    their numbers."""
    txns = transactions_of([v for got in committed.values() for _, v in got])
    whole = Counter({i: 1 for i in range(RECORDS)})
    partial = {n: sorted(c.elements()) for n, c in txns.items() if c != whole}
    assert not partial, f"transactions read in part or twice: {partial}; {context}"
    missing = sorted(recorded - set(txns))
    assert not missing, f"commit() returned, not read committed: {missing}; {context}"
    for tp, got in committed.items():
        order = [txn_of(v) for _, v in got]
        assert order == sorted(order), f"{tp} out of transaction order: {order}; {context}"
    return set(txns)


def check_uncommitted(seen: dict, committed: dict, ends: dict, held: list[int],
                      context: str) -> set[int]:
    """read_uncommitted holds every committed record at the offset read_committed read it
    at, nothing twice, the acknowledged half of each ``held`` transaction, and skips
    nothing: one producer wrote these partitions, so its records are dense but for one
    marker after each transaction (commit or abort). Returns the aborted transactions."""
    every = [v for got in seen.values() for _, v in got]
    twice = [v for v, c in Counter(every).items() if c > 1]
    assert not twice, f"read_uncommitted read records twice: {twice[:10]}; {context}"
    uncommitted = transactions_of(every)
    aborted = set(uncommitted) - {txn_of(v) for got in committed.values() for _, v in got}
    for n in held:  # killed mid-transaction: aborted by the next instance
        assert n in aborted, f"transaction {n} killed before its commit was read; {context}"
        assert sum(uncommitted[n].values()) >= RECORDS // 2, \
            f"the acknowledged half of transaction {n} is not stored: {uncommitted[n]}"
    for tp, got in seen.items():
        at = dict(got)
        differ = [(o, v, at.get(o)) for o, v in committed[tp] if at.get(o) != v]
        assert not differ, f"{tp}: read_committed's records not at read_uncommitted's " \
                           f"offsets: {differ[:5]}; {context}"
        want, offset = [], 0  # where each record must be: after its predecessor's marker
        for i, (_, value) in enumerate(got):
            offset += 2 if i and txn_of(value) != txn_of(got[i - 1][1]) else int(i > 0)
            want.append(offset)
        assert [o for o, _ in got] == want and ends[tp] == offset + 2, \
            f"{tp}: records and markers not dense: {[o for o, _ in got]}, end " \
            f"{ends[tp]}; {context}"
    return aborted


# -- 2. a transaction left open by a dead producer ------------------------------------------

HUNG_TIMEOUT_MS = 2000
# What the abort may take past the timeout: the coordinator looks every second
# (transaction_check_interval_ms), then writes the markers; the rest is for a busy machine.
ABORT_MARGIN_S = 45.0


def first_line(out: Path, word: str, proc: subprocess.Popen, root: Path) -> list[str]:
    """The worker's first line starting with ``word``, waited for."""
    def found() -> list[str] | None:
        return next((f for f in lines(out) if f[0] == word), None)
    wait_until(lambda: found() is not None or proc.poll() is not None, f"{word!r}",
               DEADLINE_S)
    assert found() is not None, f"the worker exited {proc.returncode}\n{logs(root)}"
    return found()


def create(cluster: Cluster, topic: str) -> None:
    harness = Harness(cluster)
    try:
        harness.create(topic, partitions=PARTITIONS)
    finally:
        harness.close()


@pytest.mark.shared_cluster(brokers=2)
def test_a_dead_producers_transaction_is_aborted_after_its_timeout_and_read_past(
        cluster, workers):
    masters, tp = cluster.master_addresses, TopicPartition("atom-hung", 1)
    create(cluster, tp.topic)
    proc, out = workers.start("hang", masters, "atom-hung", "--places", f"{tp.topic}:1",
                              "--timeout-ms", str(HUNG_TIMEOUT_MS), "--count", "3")
    hung_at = int(first_line(out, "sent", proc, workers.root)[1])
    proc.kill()  # its transaction stays open: nobody will end it but the coordinator
    proc.wait(10)
    killed = time.monotonic()
    after = [b"after-%d" % i for i in range(5)]
    with Producer(masters, transactional_id="atom-after", linger_ms=1) as producer:
        with producer.transaction():
            for value in after:
                producer.send(tp.topic, value, partition=tp.partition)
    got: list[bytes] = []
    with PullConsumer(masters, isolation_level="read_committed",
                      fetch_max_wait_ms=100) as consumer:
        consumer.assign([tp])
        stable = consumer.end_offsets()[tp]
        if open_transactions(masters).get("atom-hung") == "ONGOING":  # so it was at the read
            assert stable <= hung_at, "read_committed must stop at the open transaction"
        consumer.seek_to_beginning(tp)
        deadline = killed + HUNG_TIMEOUT_MS / 1000 + ABORT_MARGIN_S
        while not set(after) <= set(got):
            assert time.monotonic() < deadline, f"read_committed read only {got}"
            got += [r.value for r in consumer.poll(timeout=0.5)]
        waited = time.monotonic() - killed
    assert got == after, "the committed records once each, never the dead producer's"

    def hung_state() -> str:
        with AdminClient(masters) as admin:
            return next(t.state for t in admin.list_transactions(every=True)
                        if t.transactional_id == "atom-hung")

    # The reader goes past as soon as this partition's abort marker is written; the record
    # turns COMPLETE_ABORT once every marker is (a CI run read PREPARE_ABORT in between).
    ended = time.monotonic() + 30
    while hung_state() == "PREPARE_ABORT" and time.monotonic() < ended:
        time.sleep(0.2)
    assert hung_state() == "COMPLETE_ABORT"
    seen = [v for _, v in read_all(masters, [tp], "read_uncommitted")[tp]]
    assert seen == [b"hung-0", b"hung-1", b"hung-2", *after], "stored, then aborted"
    print(f"read past the hung transaction {waited:.1f} s after its producer died")


# -- 3. a zombie woken after a new instance took over ------------------------------------


def freeze(proc: subprocess.Popen | ServerProcess) -> None:
    """SIGSTOP and wait until every thread of ``proc`` stopped."""
    os.kill(proc.pid, signal.SIGSTOP)
    tasks = Path(f"/proc/{proc.pid}/task")
    wait_until(lambda: all(Path(t, "stat").read_text().rsplit(")", 1)[1].split()[0] in "tT"
                           for t in tasks.iterdir()), "the worker stopped", DEADLINE_S)


@pytest.mark.shared_cluster(brokers=2)
def test_a_zombie_woken_after_a_new_instance_committed_is_fenced(cluster, workers):
    masters, topic = cluster.master_addresses, "atom-zombie"
    create(cluster, topic)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    go = workers.root / "zombie-go"
    proc, out = workers.start("zombie", masters, "atom-zombie", "--places",
                              ",".join(f"{topic}:{p}" for p in range(PARTITIONS)),
                              "--stop", str(go))
    first_line(out, "sending", proc, workers.root)
    wait_until(lambda: len(read_all(masters, tps, "read_uncommitted")[tps[1]]) >= 5,
               "the zombie's transaction under way", DEADLINE_S)
    freeze(proc)  # mid-transaction, records queued and in flight
    try:
        with Producer(masters, transactional_id="atom-zombie", linger_ms=1) as new:
            with new.transaction():  # the new instance fenced the old, aborted its records
                for tp in tps:
                    new.send(topic, b"new-%d" % tp.partition, partition=tp.partition)
        go.touch()  # the zombie sends to every partition (one new to it) and commits
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    assert proc.wait(DEADLINE_S) == 0, logs(workers.root)
    said = [" ".join(f) for f in lines(out)]
    assert "commit_error ProducerFenced" in said and "committed" not in said, said
    committed = read_all(masters, tps, "read_committed")
    assert sorted(v for tp in tps for _, v in committed[tp]) == \
        [b"new-0", b"new-1", b"new-2"], "nothing of the zombie's, before or after the fence"
    seen = [v for tp, got in read_all(masters, tps, "read_uncommitted").items()
            for _, v in got]
    assert not [v for v in seen if v.startswith(b"zafter")], "refused, never stored"
    assert [v for v in seen if v.startswith(b"zbefore")], "stored before the fence, aborted"


# -- 4. no commit returns with a record lost -----------------------------------------------
# Each test asserts what atomicity needs: commit() refused (by the config or at the commit)
# or every record of the transaction read committed. Both were gaps once (a strict xfail
# each): acks="1" is now refused for a transactional producer, and commit() first checks
# that every partition holds, on disk, what it acknowledged.


@pytest.fixture
def gap_cluster(cluster_factory, tmp_path):
    """One master (leaders move ~2 s after a broker dies), 2 brokers whose followers stay in
    sync for 10 s without fetching and whose async cache blocks wait 60 s for the flusher:
    the windows these tests open, made wide enough to hit every time."""
    master_conf, broker_conf = tmp_path / "master.toml", tmp_path / "broker.toml"
    master_conf.write_text("[master]\n" + "".join(f"{k} = {v}\n"
                                                  for k, v in FAST_FAILOVER.items()))
    broker_conf.write_text("[broker]\nreplica_lag_max_ms = 10000\n"
                           "[broker.store]\ncache_flush_interval_ms = 60000\n")
    return cluster_factory(2, master_args=["--config", str(master_conf)],
                           broker_args=["--config", str(broker_conf)])


def committed_values(masters: str, tps: list[TopicPartition]) -> list[bytes]:
    return sorted(v for got in read_all(masters, tps, "read_committed").values()
                  for _, v in got)


def topic_ready(masters: str, topic: str, replicas: int) -> list:
    """The topic's partitions once each has a leader and ``replicas`` in-sync copies."""
    with AdminClient(masters, timeout=30) as admin:
        wait_until(lambda: all(p.available and len(p.isr) == replicas
                               for p in admin.describe_topic(topic).partitions),
                   f"{topic} ready", DEADLINE_S)
        return admin.describe_topic(topic).partitions


LATE = [b"r-late-%d" % i for i in range(5)]


def test_a_commit_after_a_leader_failover_holds_every_record_acknowledged_to_acks_1(
        gap_cluster):
    masters, topic = gap_cluster.master_addresses, "atom-acks1"
    with AdminClient(masters, timeout=30) as admin:
        admin.create_topic(topic, partitions=2, replication_factor=2, durability="sync")
    tps = [TopicPartition(topic, p) for p in range(2)]
    leader = topic_ready(masters, topic, 2)[0].broker_id
    follower_id = 3 - leader
    follower = gap_cluster.brokers[follower_id]
    try:
        producer = Producer(masters, transactional_id="atom-acks1", acks="1", linger_ms=1)
    except ConfigError:
        return  # refused: a transactional producer needs acks="all"
    with producer:
        producer.begin()
        for tp in tps:
            producer.send(topic, b"r-%d" % tp.partition, partition=tp.partition)
        producer.flush(timeout=30)
        wait_until(lambda: sum(map(len, read_all(masters, tps, "read_uncommitted").values()))
                   == 2, "both records below the high watermark: copied", DEADLINE_S)
        freeze(follower)  # in sync for 10 s more, copies nothing meanwhile
        try:
            # One at a time, each acknowledged by the leader alone: a fetch the follower
            # had waiting when it stopped takes the first (its answer waits in the
            # follower's socket), no later one.
            for value in LATE:
                producer.send(topic, value, partition=0).result(30)
            gap_cluster.brokers[leader].kill()
        finally:
            os.kill(follower.pid, signal.SIGCONT)
        with AdminClient(masters, timeout=30) as admin:
            wait_until(lambda: all(p.broker_id == follower_id and p.available
                                   for p in admin.describe_topic(topic).partitions),
                       "the follower leads", DEADLINE_S)
        try:
            producer.commit(timeout=30)
        except TubeqError as exc:
            print(f"commit() refused: {exc!r}")
            return  # refused at the commit: atomicity kept
    print("read_committed:", committed_values(masters, tps))
    assert committed_values(masters, tps) in ([], [b"r-0", b"r-1", *LATE]), \
        "commit() returned: every record of the transaction, or none"


def test_a_commit_after_a_broker_crash_holds_every_record_of_an_async_topic(
        gap_cluster):
    masters, topic = gap_cluster.master_addresses, "atom-async"
    with AdminClient(masters, timeout=30) as admin:
        admin.create_topic(topic, partitions=2, durability="async")  # 1 copy, the default
    tps = [TopicPartition(topic, p) for p in range(2)]
    placed = topic_ready(masters, topic, 1)
    victim = placed[0].broker_id
    assert placed[1].broker_id != victim, "partition 1 must survive the crash"
    with Producer(masters, transactional_id="atom-async", acks="all",
                  linger_ms=1) as producer:
        producer.begin()
        for tp in tps:
            producer.send(topic, b"r-%d" % tp.partition, partition=tp.partition)
        producer.flush(timeout=30)  # acknowledged, in partition 0's broker's cache block
        gap_cluster.brokers[victim].kill()
        gap_cluster.start_broker(victim)
        gap_cluster.wait_brokers_registered(DEADLINE_S)
        try:
            producer.commit(timeout=30)
        except TubeqError as exc:
            print(f"commit() refused: {exc!r}")
            return  # refused at the commit: atomicity kept
    print("read_committed:", committed_values(masters, tps))
    assert committed_values(masters, tps) in ([], [b"r-0", b"r-1"]), \
        "commit() returned: every record of the transaction, or none"
