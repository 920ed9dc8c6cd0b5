"""The flusher pool (storage/flusher_pool.py): a few threads write every store's blocks, each
store's rounds run one at a time, a wake runs a due store soon, close waits for its last
round, and timers outdated by wakes do not pile up."""
from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest

from storage.config import StoreConfig
from storage.flusher_pool import FlusherPool
from storage.store import Store
from tests.helpers import batch_of, read_all, values, wait_until

SMALL = StoreConfig(cache_block_bytes=1 << 16, max_batch_bytes=1 << 15, max_message_bytes=1 << 14,
                    segment_bytes=1 << 16, cache_flush_interval_ms=20, checkpoint_interval_ms=50)


def batch(tag: str, n: int):
    return batch_of(values(tag, n))


def flusher_threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(f"{name}-")]


def test_two_hundred_stores_share_two_threads_and_lose_nothing(tmp_path):
    pool = FlusherPool(2, name="test-pool-a")
    stores = [Store(tmp_path, f"t{i:03d}", 0, [0], SMALL, pool=pool) for i in range(200)]
    try:
        for i, s in enumerate(stores):
            s.append(0, batch(f"s{i}", 5))
        sync = replace(SMALL, durability="sync")
        with Store(tmp_path, "synced", 0, [0], sync, pool=pool) as s:
            assert s.append(0, batch("sync", 3)) == (0, 2)  # returns once fsynced
        deadline = time.monotonic() + 10
        while any(s.stats()["partitions"][0]["flushed"] < 5 for s in stores):
            assert time.monotonic() < deadline, "every store's block written within 10 s"
            time.sleep(0.02)
        assert len(flusher_threads("test-pool-a")) == 2
    finally:
        for s in stores:
            s.close()
        pool.stop()
    assert not flusher_threads("test-pool-a"), "stop() ends the threads"
    for i in (0, 137, 199):
        with Store(tmp_path, f"t{i:03d}", 0, [0], SMALL) as s:
            assert [r.value for r in read_all(s, 0)] == values(f"s{i}", 5)


def test_a_round_of_one_store_never_runs_on_two_threads_at_once(tmp_path):
    pool = FlusherPool(4, name="test-pool-b")
    running, most, lock = [0], [0], threading.Lock()

    class Task:
        steps = 0

        def step(self):
            with lock:
                running[0] += 1
                most[0] = max(most[0], running[0])
            time.sleep(0.002)
            with lock:
                running[0] -= 1
            Task.steps += 1
            return None if Task.steps >= 50 else 0.0

    slot = pool.add(Task())
    for _ in range(200):
        pool.wake(slot)  # wakes while it runs ask for one more round, never a second thread
    deadline = time.monotonic() + 10
    while Task.steps < 50:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    pool.stop()
    assert most[0] == 1 and Task.steps == 50


def test_wakes_do_not_pile_up_timers(tmp_path):
    pool = FlusherPool(1, name="test-pool-c")

    class Idle:
        def step(self):
            return 3600.0  # an idle store's housekeeping timer

    slots = [pool.add(Idle()) for _ in range(10)]
    for _ in range(2000):
        for slot in slots:
            pool.wake(slot)
        time.sleep(0)
    deadline = time.monotonic() + 5
    while pool.stats()["ready"]:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert pool.stats()["timers"] <= 2 * 10 + 64
    pool.stop()


def test_a_pool_needs_a_thread():
    with pytest.raises(ValueError, match="at least 1 thread"):
        FlusherPool(0)


def test_wakes_gathered_in_a_block_are_queued_together_at_its_end():
    """A ProduceMany appending to hundreds of stores wakes their flushers once, at the end
    (FlusherPool.wakes_deferred), not one futex call per entry."""
    pool = FlusherPool(1, name="test-pool-d")
    release, busy, ran = threading.Event(), threading.Event(), []

    class Blocker:  # holds the pool's one thread, so what is queued stays queued
        def step(self):
            busy.set()
            release.wait(10)
            return None

    class Task:
        def __init__(self, n: int) -> None:
            self.n, self.steps = n, 0

        def step(self):
            self.steps += 1
            if self.steps > 1:
                ran.append(self.n)
            return 3600.0  # until woken

    tasks = [Task(i) for i in range(20)]
    slots = [pool.add(t) for t in tasks]
    wait_until(lambda: all(t.steps for t in tasks), "each task ran its first round")
    pool.add(Blocker())
    assert busy.wait(10)
    try:
        with pool.wakes_deferred():
            for slot in slots:
                pool.wake(slot)
            with pool.wakes_deferred():  # nested: the outer block applies them
                pool.wake(slots[0])
            assert pool.stats()["ready"] == 0, "gathered, not queued yet"
        assert pool.stats()["ready"] == 20, "queued together, each once"
        pool.wake(slots[1])  # outside a block: as before, and already queued
        assert pool.stats()["ready"] == 20
    finally:
        release.set()
    wait_until(lambda: len(ran) == 20, "every woken task ran its round")
    pool.stop()
    assert sorted(ran) == list(range(20))
