"""The transaction coordinator (master/transactions.py) and its marker writer
(master/txn_markers.py) over a real LMDB state, with brokers faked as a function that
answers WriteTxnMarkers: markers grouped per leader, retried until every partition has
one, a coordinator that takes over a decided transaction (a failover), timeouts that abort
with the epoch bumped, and calls that answer ConcurrentTransactions while markers are
pending."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from lib.errors import ConcurrentTransactions, ProducerFenced, Unavailable, UnknownTopic
from lib.proto import broker_pb2 as bpb
from master.producer_ids import ProducerIdBlocks
from master.state import MetaState
from master.transactions import TransactionCoordinator, TxnSettings
from master.txn_markers import MarkerWriter

SETTINGS = {"partitions": 2, "stores": 1, "durability": "async", "retention_ms": 1000,
            "retention_bytes": -1, "max_message_bytes": 1024}


class Brokers:
    """WriteTxnMarkers answered from a table: the calls seen, and per address what fails."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int, bool, list[tuple[str, int]]]] = []
        self.down: set[str] = set()
        self.refuse: dict[tuple, int] = {}  # partition (, group) -> errors left to answer
        self.offsets: list[tuple[str, bool, list]] = []  # (address, commit, offsets) sent
        self.lock = threading.Lock()

    def send(self, address, producer_id, epoch, commit, partitions, offsets=()):
        with self.lock:
            self.calls.append((address, producer_id, epoch, commit, list(partitions)))
            if offsets:
                self.offsets.append((address, commit, list(offsets)))
            if address in self.down:
                raise Unavailable(f"{address} is down")
            out = []
            for topic, p in partitions:
                result = bpb.TxnMarkerResult(topic=topic, partition=p, offset=1)
                if self.refuse.get((topic, p), 0) > 0:
                    self.refuse[(topic, p)] -= 1
                    result.error_code, result.offset = "NOT_LEADER", -1
                out.append(result)
            for group, topic, p, _ in offsets:
                result = bpb.TxnMarkerResult(topic=topic, partition=p, offset=-1, group=group)
                if self.refuse.get((topic, p, group), 0) > 0:
                    self.refuse[(topic, p, group)] -= 1
                    result.error_code = "NOT_LEADER"
                out.append(result)
            return out

    def marked(self) -> set[tuple[str, int]]:
        return {tp for c in self.calls if c[0] not in self.down for tp in c[4]}


def each(jobs: dict) -> dict:
    out = {}
    for key, job in jobs.items():
        try:
            out[key] = job()
        except Exception as exc:  # noqa: BLE001 - as BrokerCalls.each
            out[key] = exc
    return out


@pytest.fixture
def state(tmp_path):
    s = MetaState(tmp_path / "meta", map_size=1 << 24)
    for topic in ("a", "b"):
        s.apply({"op": "create_topic", "time_ms": 1, "topic": topic, "settings": SETTINGS,
                 "placement": [1, 2]})
    yield s
    s.close()


def coordinator(state: MetaState, brokers: Brokers, active: Callable[[], bool] = lambda: True,
                **settings) -> TransactionCoordinator:
    def reserve(count: int) -> int:
        return state.apply({"op": "reserve_producer_ids", "time_ms": 1, "count": count})["first"]

    def leader(topic: str, p: int) -> str:
        return f"broker{state.topic(topic)['placement'][p]}"
    txns = TransactionCoordinator(
        TxnSettings(**{"check_interval_ms": 50, "end_wait_ms": 5000, **settings}), state,
        state.apply, ProducerIdBlocks(reserve, lambda: 1),
        MarkerWriter(state, leader, brokers.send, each), active)
    txns.start()
    return txns


@pytest.fixture
def run(state):
    made: list[TransactionCoordinator] = []

    def make(brokers: Brokers, active: Callable[[], bool] = lambda: True,
             **settings) -> TransactionCoordinator:
        made.append(coordinator(state, brokers, active, **settings))
        return made[-1]
    yield make
    for c in made:
        c.stop()


def until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.02)


ALL = [("a", 0), ("a", 1), ("b", 0), ("b", 1)]


def test_a_commit_marks_every_partition_on_its_leader_once_and_completes(state, run):
    brokers = Brokers()
    txns = run(brokers)
    pid, epoch = txns.init("t", 0, 1)
    txns.add_partitions("t", pid, epoch, ALL)
    assert txns.end("t", pid, epoch, True, 5) == (pid, epoch + 1), "each end bumps the epoch"
    assert state.txn("t")["state"] == "COMPLETE_COMMIT"
    assert sorted((c[0], tuple(c[4])) for c in brokers.calls) == [
        ("broker1", (("a", 0), ("b", 0))), ("broker2", (("a", 1), ("b", 1)))]
    assert {(c[1], c[2], c[3]) for c in brokers.calls} == {(pid, epoch + 1, True)}, \
        "the markers carry the bumped epoch"
    assert txns.end("t", pid, epoch, True, 5) == (pid, epoch + 1), "a retry: answered again"
    assert len(brokers.calls) == 2, "nothing sent again"
    txns.add_partitions("t", pid, epoch + 1, [("a", 0)])  # the next transaction
    with pytest.raises(ProducerFenced):
        txns.add_partitions("t", pid, epoch, [("a", 0)])


def test_offsets_in_a_transaction_go_with_its_markers_to_their_leaders(state, run):
    brokers = Brokers()
    brokers.refuse = {("b", 1, "g"): 2}
    txns = run(brokers)
    pid, epoch = txns.init("t", 0, 1)
    txns.add_partitions("t", pid, epoch, [("a", 0)])
    txns.add_offsets("t", pid, epoch, "g", [("b", 0, 10), ("b", 1, 20)])
    txns.add_offsets("t", pid, epoch, "g", [("b", 1, 25)])  # the later offset wins
    with pytest.raises(UnknownTopic):
        txns.add_offsets("t", pid, epoch, "g", [("nope", 0, 1)])
    txns.end("t", pid, epoch, True, 10)
    assert state.txn("t")["state"] == "COMPLETE_COMMIT"
    sent = sorted((a, c, tuple(map(tuple, o))) for a, c, o in brokers.offsets)
    assert sent[0] == ("broker1", True, (("g", "b", 0, 10),))
    assert {s[2] for s in sent[1:]} == {(("g", "b", 1, 25),)} and len(sent) == 4, \
        "broker2's offset refused twice, then taken"
    pid, epoch = txns.end("t", pid, epoch, True, 1)
    txns.add_offsets("t", pid, epoch, "g", [("a", 1, 3)])  # offsets alone: a transaction
    assert state.txn("t")["state"] == "ONGOING"
    txns.end("t", pid, epoch, False, 10)
    assert brokers.offsets[-1] == ("broker2", False, [("g", "a", 1, 3)])


def test_partitions_that_fail_are_retried_until_each_has_its_marker(state, run):
    brokers = Brokers()
    brokers.refuse = {("a", 1): 3}
    brokers.down = {"broker1"}
    txns = run(brokers)
    pid, epoch = txns.init("t", 0, 1)
    txns.add_partitions("t", pid, epoch, ALL)
    with pytest.raises(ConcurrentTransactions, match="PREPARE_ABORT .* retry the same call"):
        txns.end("t", pid, epoch, False, 0.5)
    with pytest.raises(ConcurrentTransactions):
        txns.init("t", 0, 0.2)  # the next instance waits for the abort too
    brokers.down = set()
    assert txns.end("t", pid, epoch, False, 10) == (pid, epoch + 1)
    assert state.txn("t")["state"] == "COMPLETE_ABORT"
    assert brokers.marked() == set(ALL)
    assert sum(1 for c in brokers.calls if ("a", 1) in c[4]) == 4, "3 refusals, then written"
    with pytest.raises(ProducerFenced):
        txns.end("t", pid + 1, epoch, True, 1)  # not the id's producer


def test_a_coordinator_taking_over_finishes_a_decided_transaction(state, run):
    brokers = Brokers()
    brokers.down = {"broker2"}
    first = run(brokers)
    pid, epoch = first.init("t", 0, 1)
    first.add_partitions("t", pid, epoch, ALL)
    with pytest.raises(ConcurrentTransactions):
        first.end("t", pid, epoch, True, 0.3)
    first.stop()  # the active master dies with broker2's markers unwritten
    assert state.txn("t")["state"] == "PREPARE_COMMIT"
    brokers.down, brokers.calls = set(), []
    second = run(brokers)
    until(lambda: state.txn("t")["state"] == "COMPLETE_COMMIT")
    assert brokers.marked() == set(ALL), "every partition again: written ones answer -1"
    assert second.end("t", pid, epoch, True, 1) == (pid, epoch + 1), \
        "the producer's retry, at the new master"


def test_a_transaction_open_past_its_timeout_is_aborted_with_the_epoch_bumped(state, run):
    brokers = Brokers()
    txns = run(brokers, max_timeout_ms=10_000)
    pid, epoch = txns.init("t", 200, 1)
    txns.add_partitions("t", pid, epoch, [("a", 0)])
    until(lambda: state.txn("t")["state"] == "COMPLETE_ABORT")
    assert [c[1:4] for c in brokers.calls] == [(pid, epoch + 1, False)]
    with pytest.raises(ProducerFenced):
        txns.end("t", pid, epoch, True, 1)
    assert txns.init("t", 200, 1) == (pid, epoch + 2)


def test_a_new_instance_aborts_the_open_transaction_of_the_last_one(state, run):
    brokers = Brokers()
    txns = run(brokers)
    pid, epoch = txns.init("t", 0, 1)
    txns.add_partitions("t", pid, epoch, [("b", 1)])
    assert txns.init("t", 0, 5) == (pid, epoch + 2)
    assert [c[1:] for c in brokers.calls] == [(pid, epoch + 1, False, [("b", 1)])]
    assert state.txn("t")["state"] == "EMPTY"


def test_a_standby_writes_no_marker_until_it_becomes_active(state, run):
    brokers = Brokers()
    brokers.down = {"broker1", "broker2"}
    first = run(brokers)
    pid, epoch = first.init("t", 0, 1)
    first.add_partitions("t", pid, epoch, ALL)
    with pytest.raises(ConcurrentTransactions):
        first.end("t", pid, epoch, True, 0.2)
    first.stop()
    brokers.down, brokers.calls = set(), []
    active = threading.Event()
    standby = run(brokers, active.is_set, check_interval_ms=60_000)
    time.sleep(0.3)  # what a standby does meanwhile: nothing
    assert brokers.calls == [] and state.txn("t")["state"] == "PREPARE_COMMIT"
    active.set()
    standby.wake()  # the master became active: at once, not a check interval later
    until(lambda: state.txn("t")["state"] == "COMPLETE_COMMIT", timeout=5)
