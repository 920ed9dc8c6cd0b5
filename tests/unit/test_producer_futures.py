"""RecordFuture and settle(): real concurrent.futures behaviour with batch-shared conditions."""
from __future__ import annotations

import threading
from concurrent.futures import FIRST_COMPLETED, Future, as_completed, wait

import pytest

from lib.futures import RecordFuture, settle


def _batch(n: int) -> tuple[threading.Condition, list[RecordFuture]]:
    cond = threading.Condition()
    return cond, [RecordFuture(cond) for _ in range(n)]


def test_settled_futures_return_their_own_values_in_order():
    cond, futures = _batch(3)
    assert all(isinstance(f, Future) and not f.done() for f in futures)
    settle(cond, futures, lambda i: i * 10)
    assert [f.result(0) for f in futures] == [0, 10, 20]


def test_settle_with_an_error_fails_every_future_with_it():
    cond, futures = _batch(2)
    err = ValueError("boom")
    settle(cond, futures, error=err)
    assert all(f.exception(0) is err for f in futures)
    with pytest.raises(ValueError):
        futures[0].result(0)


def test_waiting_threads_wake_when_the_batch_is_settled():
    cond, futures = _batch(4)
    results: list[int] = []
    threads = [threading.Thread(target=lambda f=f: results.append(f.result(10)))
               for f in futures]
    for t in threads:
        t.start()
    settle(cond, futures, lambda i: i)
    for t in threads:
        t.join(10)
    assert sorted(results) == [0, 1, 2, 3]


def test_done_callbacks_run_once_in_record_order_and_late_ones_run_at_once():
    cond, futures = _batch(3)
    calls: list[int] = []
    for i, f in enumerate(futures):
        f.add_done_callback(lambda fut, i=i: calls.append(i))
    settle(cond, futures, lambda i: i)
    futures[0].add_done_callback(lambda fut: calls.append(99))
    assert calls == [0, 1, 2, 99]


def test_concurrent_futures_wait_and_as_completed_see_settled_records():
    cond, futures = _batch(3)
    threading.Timer(0.05, lambda: settle(cond, futures, lambda i: i)).start()
    done, _ = wait(futures, timeout=10, return_when=FIRST_COMPLETED)
    assert done
    assert sorted(f.result() for f in as_completed(futures, timeout=10)) == [0, 1, 2]


def test_already_finished_futures_are_left_alone_and_records_cannot_be_cancelled():
    cond, futures = _batch(2)
    assert futures[0].cancel() is False
    settle(cond, futures[:1], lambda i: "first")
    settle(cond, futures, error=RuntimeError("late"))
    assert futures[0].result(0) == "first"
    assert isinstance(futures[1].exception(0), RuntimeError)


def test_result_times_out_while_pending():
    _, (f,) = _batch(1)
    with pytest.raises(TimeoutError):
        f.result(0.01)
