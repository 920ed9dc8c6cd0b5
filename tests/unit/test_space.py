"""The free-space guard's decision (storage/space.py), with the clock and statvfs injected."""
from __future__ import annotations

import errno

import pytest

from lib.errors import DiskFull, StorageError
from lib.wire_errors import error_class, status_of
from storage.space import SpaceGuard, headroom, is_disk_full

MiB = 1 << 20


class FakeDisk:
    def __init__(self, free: int) -> None:
        self.free = free
        self.calls = 0
        self.now = 0.0

    def statvfs(self, _path) -> int:
        self.calls += 1
        return self.free

    def clock(self) -> float:
        return self.now


def guard_on(disk: FakeDisk, reserve: int = 10 * MiB) -> SpaceGuard:
    return SpaceGuard("/data", reserve, clock=disk.clock, statvfs=disk.statvfs, refresh_s=0.05)


def test_headroom_counts_unwritten_and_the_new_append_against_the_reserve():
    assert headroom(free=100, unwritten=30, need=20, reserve=50) == 0  # exactly fits
    assert headroom(free=100, unwritten=30, need=21, reserve=50) == -1


def test_append_is_refused_once_cached_bytes_would_eat_into_the_reserve():
    disk = FakeDisk(free=20 * MiB)
    guard = guard_on(disk)
    guard.admit(6 * MiB)
    guard.admit(4 * MiB)  # 20 - 10 == reserve: still fits
    with pytest.raises(DiskFull) as err:
        guard.admit(1)
    assert err.value.retriable and err.value.reserve_bytes == 10 * MiB
    assert err.value.free_bytes == 20 * MiB and err.value.unwritten_bytes == 10 * MiB
    assert "20971520 bytes free" in err.value.message and "reserve 10485760" in err.value.message
    guard.written(10 * MiB)
    assert guard.status().full  # it refused lately: a batch may not fit even if 1 B does
    disk.free, disk.now = 10 * MiB - 1, disk.now + 2.0  # the reading shows the writes
    assert guard.status().full  # below the reserve
    disk.free, disk.now = 10 * MiB, disk.now + 2.0
    assert not guard.status().full


def test_statvfs_is_read_at_most_once_per_refresh_and_writes_since_are_counted():
    disk = FakeDisk(free=30 * MiB)
    guard = guard_on(disk)
    for _ in range(100):
        guard.admit(1024)
    assert disk.calls == 1
    guard.written(100 * 1024)  # the reading cannot show these yet, the guard must
    assert guard.status().unwritten_bytes == 0
    guard.admit(20 * MiB - 100 * 1024)  # 30 - 0.1 written - 19.9 == reserve
    with pytest.raises(DiskFull):
        guard.admit(1)
    disk.now += 0.05
    disk.free = 30 * MiB - 100 * 1024  # the new reading shows the write
    with pytest.raises(DiskFull):
        guard.admit(1)
    assert disk.calls == 2


def test_space_freed_by_someone_else_is_seen_after_the_refresh_interval():
    disk = FakeDisk(free=5 * MiB)
    guard = guard_on(disk)
    with pytest.raises(DiskFull):
        guard.admit(1)
    disk.free = 50 * MiB
    disk.now += 0.01
    with pytest.raises(DiskFull):
        guard.admit(1)  # the cached reading still holds
    disk.now += 0.05
    guard.admit(1)
    assert not guard.status().full


def test_a_blocked_flusher_refuses_every_append_until_it_writes_again():
    disk = FakeDisk(free=500 * MiB)
    guard = guard_on(disk)
    guard.blocked("t/0", "[Errno 28] No space left on device")
    with pytest.raises(DiskFull, match="No space left"):
        guard.admit(1)
    assert guard.status().full and guard.status().blocked_stores == ("t/0",)
    guard.unblocked("t/0")
    guard.admit(1)
    assert not guard.status().full


def test_forgotten_bytes_no_longer_count():
    disk = FakeDisk(free=11 * MiB)
    guard = guard_on(disk)
    guard.admit(MiB)
    guard.forget(MiB)
    guard.admit(MiB)


def test_unreadable_data_dir_refuses_rather_than_guesses():
    def broken(_path):
        raise FileNotFoundError(errno.ENOENT, "gone")

    guard = SpaceGuard("/gone", 0, statvfs=broken)
    with pytest.raises(DiskFull):
        guard.admit(1)


def test_enospc_and_edquot_are_disk_full_through_wrapping_errors_and_others_are_not():
    def wrapped(err: OSError) -> StorageError:
        try:
            try:
                raise err
            except OSError as exc:
                raise StorageError(f"write failed: {exc}") from exc
        except StorageError as outer:
            return outer

    assert is_disk_full(wrapped(OSError(errno.ENOSPC, "No space left on device")))
    assert is_disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert not is_disk_full(wrapped(OSError(errno.EIO, "Input/output error")))
    assert not is_disk_full(ValueError("x"))


def test_disk_full_travels_as_its_own_retriable_code_not_internal():
    import grpc

    err = DiskFull("full", free_bytes=1, reserve_bytes=2)
    assert status_of(err) == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error_class("DISK_FULL") is DiskFull
    assert isinstance(err, StorageError) and err.retriable


def test_a_negative_reserve_is_refused_at_config_time():
    from lib.config import build
    from lib.errors import ConfigError
    from storage.config import StoreConfig

    with pytest.raises(ConfigError, match="disk_reserve_bytes"):
        build(StoreConfig, {"disk_reserve_bytes": -1})
    assert build(StoreConfig, {"disk_reserve_bytes": 0}).disk_reserve_bytes == 0


def test_appends_wait_while_the_unwritten_bound_is_passed_and_go_on_as_flushers_write():
    """The memory bound: past ``max_unwritten`` an append that cannot wait is turned back
    (the broker retries it off its event loop), one that can waits for a flusher's write."""
    import threading

    guard = SpaceGuard("/data", 0, statvfs=lambda _p: 1 << 40, max_unwritten=100,
                       unwritten_wait_s=60)
    assert guard.room(False)
    guard.admit(150)
    assert not guard.room(False)
    let_in = threading.Event()
    waiter = threading.Thread(target=lambda: guard.room(True) and let_in.set())
    waiter.start()
    assert not let_in.wait(0.2), "an append went in past the bound"
    guard.written(40)  # 110 unwritten: still past it
    assert not let_in.wait(0.2)
    guard.written(20)  # 90
    assert let_in.wait(30)
    waiter.join(30)
    assert guard.unwritten_waits == 1 and guard.room(False)


def test_an_append_waits_at_most_unwritten_wait_s_then_goes_on():
    guard = SpaceGuard("/data", 0, statvfs=lambda _p: 1 << 40, max_unwritten=10,
                       unwritten_wait_s=0.05)
    guard.admit(11)
    assert guard.room(True)  # a bound on memory, never a refusal
    unbounded = SpaceGuard("/data", 0, statvfs=lambda _p: 1 << 40)
    unbounded.admit(1 << 30)
    assert unbounded.room(False)


def test_a_store_turns_back_an_append_that_cannot_wait_past_the_bound_and_takes_it_later(
        tmp_path):
    from storage.config import StoreConfig
    from storage.store import Store
    from tests.helpers import batch_of, read_all

    guard = SpaceGuard(tmp_path, 0, statvfs=lambda _p: 1 << 40, max_unwritten=1,
                       unwritten_wait_s=60)
    store = Store(tmp_path, "bounded", 0, [0], StoreConfig(cache_flush_interval_ms=2000),
                  space=guard)
    try:
        assert store.append_batch(0, batch_of([b"first"]), wait=False) is not None
        assert store.append_batch(0, batch_of([b"second"]), wait=False) is None  # past it
        assert store.append_batch(0, batch_of([b"second"]), wait=True)[0] == 1  # flushed
        assert guard.unwritten_waits == 1
        store.flush()
        assert [r.value for r in read_all(store, 0)] == [b"first", b"second"]
    finally:
        store.close()
