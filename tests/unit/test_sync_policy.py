"""Write and fsync decisions (storage/sync_policy.py) on a fake clock; the TubeMQ aliases."""
from __future__ import annotations

import numpy as np
import pytest

from lib.config import build
from lib.errors import ConfigError
from storage.cache import CacheBlock
from storage.config import StoreConfig
from storage.index import INDEX_DTYPE
from storage.sync_policy import SMALLEST_CHUNK, SyncPolicy


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def policy(clock: FakeClock) -> SyncPolicy:
    cfg = StoreConfig(cache_block_messages=10, cache_flush_interval_ms=200,
                      fsync_every_messages=100, fsync_every_bytes=1000, fsync_interval_ms=1000)
    return SyncPolicy.of(cfg, clock)


def block_with(clock: FakeClock, messages: int, capacity: int = 1 << 16) -> CacheBlock:
    block = CacheBlock(0, capacity, clock())
    if messages:
        block.add(0, 0, b"h" * 32, memoryview(b"x" * messages), np.zeros(messages, INDEX_DTYPE))
    return block


def test_an_empty_block_is_never_due_however_old(policy, clock):
    block = block_with(clock, 0)
    clock.now += 3600
    assert not policy.block_due(block) and not policy.write_due(block, waited_for=True)


def test_a_block_is_due_when_full_by_count_by_bytes_or_by_age(policy, clock):
    assert not policy.block_due(block_with(clock, 9))
    assert policy.block_full(block_with(clock, 10)) and policy.block_due(block_with(clock, 10))
    assert policy.block_full(block_with(clock, 1, capacity=32 + SMALLEST_CHUNK))
    young = block_with(clock, 1)
    clock.now += 0.199
    assert not policy.block_due(young)
    clock.now += 0.001
    assert policy.block_due(young) and not policy.block_full(young)


def test_a_waiter_makes_a_block_due_at_once(policy, clock):
    block = block_with(clock, 1)
    assert not policy.write_due(block, waited_for=False)
    assert policy.write_due(block, waited_for=True)


def test_fsync_is_due_by_messages_bytes_or_time_since_the_last_one(policy, clock):
    synced = policy.synced_now()
    assert not policy.fsync_due(synced, waited_for=True)  # nothing to sync
    assert not policy.fsync_due(synced.add(99, 999), waited_for=False)
    assert policy.fsync_due(synced.add(100, 1), waited_for=False)
    assert policy.fsync_due(synced.add(1, 1000), waited_for=False)
    assert policy.fsync_due(synced.add(1, 1), waited_for=True)
    clock.now += 0.999
    assert not policy.fsync_due(synced.add(1, 1), waited_for=False)
    clock.now += 0.001
    assert policy.fsync_due(synced.add(1, 1), waited_for=False)
    assert policy.synced_now().since == clock.now


def test_the_idle_flusher_sleeps_until_the_next_deadline(policy, clock):
    empty = block_with(clock, 0)
    assert policy.wait_s(empty, policy.synced_now(), 30.0) == 30.0  # nothing due: housekeeping
    block = block_with(clock, 1)
    clock.now += 0.15
    assert policy.wait_s(block, policy.synced_now(), 30.0) == pytest.approx(0.05)
    assert policy.wait_s(block, policy.synced_now(), 0.01) == pytest.approx(0.01)
    unsynced = policy.synced_now().add(1, 1)
    clock.now += 0.98
    assert policy.wait_s(empty, unsynced, 30.0) == pytest.approx(0.02)
    clock.now += 5
    assert policy.wait_s(block, unsynced, 30.0) == 0.0


def test_tubemq_names_are_aliases_of_the_fsync_settings():
    cfg = build(StoreConfig, {"unflush_threshold": 7, "unflush_data_hold": 1 << 20,
                              "unflush_interval_ms": 50})
    assert (cfg.fsync_every_messages, cfg.fsync_every_bytes, cfg.fsync_interval_ms) == \
        (7, 1 << 20, 50)
    assert build(StoreConfig, {}, unflush_interval_ms=20).fsync_interval_ms == 20
    with pytest.raises(ConfigError, match="not both"):
        build(StoreConfig, {"fsync_interval_ms": 5, "unflush_interval_ms": 50})
    with pytest.raises(ConfigError, match="fsync_every_messages"):
        build(StoreConfig, {"unflush_threshold": 0})
