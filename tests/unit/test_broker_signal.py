"""broker.signals.Signal for coroutines: parked waiters hold no thread and are woken from any
thread (appends run in the broker's executor, long polls wait on its event loop)."""
from __future__ import annotations

import asyncio
import threading
import time

from broker.signals import Signal


def test_parked_waiters_are_woken_by_a_bump_from_another_thread():
    sig = Signal()

    async def main():
        seen = sig.version
        waiters = [asyncio.ensure_future(sig.wait_async(seen, 10)) for _ in range(500)]
        await asyncio.sleep(0.05)
        assert threading.active_count() < 50  # parked futures, not threads
        started = time.monotonic()
        threading.Timer(0.05, sig.bump).start()
        assert all(await asyncio.gather(*waiters))
        return time.monotonic() - started

    assert asyncio.run(main()) < 5
    assert sig._parked == {}


def test_a_bump_between_read_and_wait_is_not_lost():
    sig = Signal()

    async def main():
        seen = sig.version
        sig.bump()  # lands after the reader noted the version, before it parks
        return await sig.wait_async(seen, 10)

    started = time.monotonic()
    assert asyncio.run(main()) is True
    assert time.monotonic() - started < 1


def test_timeout_and_cancel_unpark_the_waiter():
    sig = Signal()

    async def main():
        assert await sig.wait_async(sig.version, 0.05) is False
        task = asyncio.ensure_future(sig.wait_async(sig.version, 10))
        await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    assert sig._parked == {}
    sig.bump()  # nothing left to wake, and no closed loop is called


def test_close_wakes_parked_waiters():
    sig = Signal()

    async def main():
        task = asyncio.ensure_future(sig.wait_async(sig.version, 10))
        await asyncio.sleep(0.01)
        threading.Thread(target=sig.close).start()
        return await task

    assert asyncio.run(main()) is True and sig.closed
