"""lib/lockfree.py, and the broker's heartbeat loop that died of the race it fixes."""
from __future__ import annotations

import gc
import threading

import pytest

from broker.master_link import MasterLink
from lib.lockfree import copied


def test_a_collection_that_changes_the_dict_mid_copy_breaks_a_list_of_items_not_a_copy():
    """What killed a broker's heartbeat thread at 10,000 topics: a collection ran Python code
    in the middle of ``list(d.items())`` and the dict grew meanwhile (here the collection's
    callback grows it, as another thread did)."""
    d = {i: i for i in range(20_000)}

    def grow(phase: str, info: dict) -> None:
        if phase == "start":
            d[len(d) + 10**9] = 0

    old = gc.get_threshold()
    gc.callbacks.append(grow)
    gc.set_threshold(1)  # a young collection at nearly every tracked allocation
    try:
        with pytest.raises(RuntimeError, match="changed size during iteration"):
            list(d.items())
        snapshot = copied(d)
    finally:
        gc.set_threshold(*old)
        gc.callbacks.remove(grow)
    assert all(snapshot[i] == i for i in range(20_000))


def test_a_copy_that_meets_a_change_is_taken_again():
    class Flaky(dict):
        calls = 0

        def copy(self):
            Flaky.calls += 1
            if Flaky.calls == 1:
                raise RuntimeError("dictionary changed size during iteration")
            return dict(self)

    assert copied(Flaky(a=1)) == {"a": 1} and Flaky.calls == 2


def test_the_heartbeat_loop_outlives_a_failing_step():
    """Its thread used to end on any error a step raised: no heartbeat again, and the master
    declared the broker dead for good."""
    link = object.__new__(MasterLink)  # the loop alone: its steps are replaced below
    link._stop, link._soon, link.registered = threading.Event(), threading.Event(), \
        threading.Event()
    link.registered.set()
    link.interval = 0.01
    beats = []

    def heartbeat() -> None:
        beats.append(1)
        if len(beats) == 1:
            raise RuntimeError("dictionary changed size during iteration")
        if len(beats) == 3:
            link._stop.set()

    link._heartbeat = heartbeat
    runner = threading.Thread(target=link._run, daemon=True)
    runner.start()
    runner.join(30)
    assert not runner.is_alive() and len(beats) == 3
