"""A topic's new-data signal: appends bump it, long polls and push streams wait on it.

One per topic (broker/topics.py). Threads (the broker's executor) and coroutines (its event loop)
wait on the same counter; see :class:`Signal` for why a counter and how coroutines park.
"""
from __future__ import annotations

import asyncio
import threading


class Signal:
    """An event counter: appends bump it, waiters sleep until it moves past what they saw.

    Comparing versions (not a bare Event) means a bump between a reader's empty read and its
    wait is never lost. Threads wait with :meth:`wait`; coroutines await :meth:`wait_async`,
    which parks a future on its event loop and holds no thread (the broker's long polls and
    push streams). :meth:`bump` and :meth:`close` may be called from any thread (appends run
    in the broker's executor): they wake the parked futures of a loop with one
    ``call_soon_threadsafe``, and cost one empty-dict test when no coroutine waits.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.version = 0
        self.closed = False
        self._parked: dict[asyncio.AbstractEventLoop, set[asyncio.Future[None]]] = {}

    def bump(self) -> None:
        with self._cond:
            self.version += 1
            self._cond.notify_all()
            parked = self._take_parked()
        if parked:
            _wake(parked)

    def wait(self, seen: int, timeout: float) -> bool:
        """True when the version moved past ``seen`` (or the signal closed) within ``timeout``."""
        with self._cond:
            return self._cond.wait_for(lambda: self.version != seen or self.closed, timeout)

    async def wait_async(self, seen: int, timeout: float) -> bool:
        """:meth:`wait` for a coroutine: parks on the running loop, no thread is held."""
        loop = asyncio.get_running_loop()
        with self._cond:
            if self.version != seen or self.closed:
                return True
            fut: asyncio.Future[None] = loop.create_future()
            self._parked.setdefault(loop, set()).add(fut)
        try:
            async with asyncio.timeout(timeout):
                await fut
        except TimeoutError:
            pass
        finally:
            # Woken, timed out or cancelled (either cancels ``fut``): unpark it, unless a
            # bump already took the whole set.
            with self._cond:
                parked = self._parked.get(loop)
                if parked is not None:
                    parked.discard(fut)
                    if not parked:
                        del self._parked[loop]
        return self.version != seen or self.closed

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()
            parked = self._take_parked()
        if parked:
            _wake(parked)

    def _take_parked(self) -> dict[asyncio.AbstractEventLoop, set[asyncio.Future[None]]]:
        parked = self._parked
        if parked:
            self._parked = {}
        return parked


def _wake(parked: dict[asyncio.AbstractEventLoop, set[asyncio.Future[None]]]) -> None:
    for loop, futures in parked.items():
        try:
            loop.call_soon_threadsafe(_resolve, futures)
        except RuntimeError:
            pass  # that loop is closed: nobody is left to wake


def _resolve(futures: set[asyncio.Future[None]]) -> None:
    for fut in futures:
        if not fut.done():
            fut.set_result(None)
