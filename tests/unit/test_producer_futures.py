"""RecordFuture and BatchOutcome: real concurrent.futures behaviour, settled per batch."""
from __future__ import annotations

import threading
from concurrent.futures import FIRST_COMPLETED, Future, as_completed, wait

import pytest

from lib.producer.futures import BatchOutcome, RecordFuture


def _batch(n: int) -> tuple[BatchOutcome, list[RecordFuture]]:
    outcome = BatchOutcome()
    return outcome, [RecordFuture(outcome, i) for i in range(n)]


def test_settled_futures_return_their_own_values_built_from_their_index():
    outcome, futures = _batch(3)
    assert all(isinstance(f, Future) and not f.done() for f in futures)
    outcome.succeed(lambda i: i * 10)
    assert all(f.done() for f in futures)
    assert [f.result(0) for f in futures] == [0, 10, 20]
    assert futures[1].exception(0) is None


def test_a_failed_batch_fails_every_future_with_its_error():
    outcome, futures = _batch(2)
    err = ValueError("boom")
    outcome.fail(err)
    assert all(f.exception(0) is err for f in futures)
    with pytest.raises(ValueError):
        futures[0].result(0)


def test_waiting_threads_wake_when_the_batch_settles():
    outcome, futures = _batch(4)
    results: list[int] = []
    threads = [threading.Thread(target=lambda f=f: results.append(f.result(10)))
               for f in futures]
    for t in threads:
        t.start()
    outcome.succeed(lambda i: i)
    for t in threads:
        t.join(10)
    assert sorted(results) == [0, 1, 2, 3]


def test_done_callbacks_run_once_in_record_order_and_late_ones_run_at_once():
    outcome, futures = _batch(3)
    calls: list[int] = []
    for i in (2, 0, 1):
        futures[i].add_done_callback(lambda fut, i=i: calls.append(i))
    futures[0].add_done_callback(lambda fut: calls.append(10))
    outcome.succeed(lambda i: i)
    futures[0].add_done_callback(lambda fut: calls.append(99))
    assert calls == [2, 0, 10, 1, 99]


def test_concurrent_futures_wait_and_as_completed_see_settled_records():
    outcome, futures = _batch(3)
    futures[0].add_done_callback(lambda fut: None)  # watched twice: still settled once
    threading.Timer(0.05, lambda: outcome.succeed(lambda i: i)).start()
    done, _ = wait(futures, timeout=10, return_when=FIRST_COMPLETED)
    assert done
    assert sorted(f.result() for f in as_completed(futures, timeout=10)) == [0, 1, 2]


def test_a_batch_settles_once_and_records_cannot_be_cancelled_or_set():
    outcome, (f,) = _batch(1)
    assert f.cancel() is False and not f.cancelled()
    outcome.succeed(lambda i: "first")
    outcome.fail(RuntimeError("late"))
    assert f.result(0) == "first"
    with pytest.raises(RuntimeError):
        f.set_result("x")


def test_result_times_out_while_pending():
    _, (f,) = _batch(1)
    with pytest.raises(TimeoutError):
        f.result(0.01)


def test_a_batch_nobody_waits_on_settles_without_making_a_condition():
    outcome, futures = _batch(3)
    outcome.succeed(lambda i: i)
    assert outcome._condition is None, "a Condition per batch is garbage for the collector"
    assert [f.result(0) for f in futures] == [0, 1, 2]
    callback_saw = []
    futures[0].add_done_callback(lambda f: callback_saw.append(f.result()))
    assert callback_saw == [0], "a callback added after settling runs at once"


def test_waiters_arriving_while_their_batch_settles_never_miss_it():
    """The condition is made by the first waiter, possibly as the sender settles the batch
    without one: each waiter either sees the outcome settled or is woken."""
    for _ in range(200):
        outcome, futures = _batch(4)
        got: list[int] = []
        start = threading.Barrier(len(futures) + 1)

        def wait_for(f: RecordFuture, start: threading.Barrier, got: list[int]) -> None:
            start.wait()
            got.append(f.result(10))

        threads = [threading.Thread(target=wait_for, args=(f, start, got)) for f in futures]
        for t in threads:
            t.start()
        start.wait()
        outcome.succeed(lambda i: i)
        for t in threads:
            t.join(15)
        assert sorted(got) == [0, 1, 2, 3]
