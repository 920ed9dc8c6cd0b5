"""broker/heap.py: a settle frees cyclic garbage (frozen or not) and freezes the rest; the
settler settles when the stores changed, at most every min_s, at least every 600 s."""
from __future__ import annotations

import gc
import threading
import weakref

import pytest

from broker import heap


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the cyclic collector frees it


@pytest.fixture
def thawed():
    yield
    gc.unfreeze()  # the rest of the test process keeps Python's usual collector


def test_a_settle_frees_cyclic_garbage_even_when_frozen_and_freezes_the_rest(thawed):
    kept, dropped = Node(), Node()
    gone = weakref.ref(dropped)
    heap.settle()
    assert gc.get_freeze_count() > 0
    del dropped  # garbage now, but frozen: the collector's own runs do not see it
    gc.collect()
    assert gone() is not None
    heap.settle()  # unfreezes first
    assert gone() is None and kept.me is kept


def test_the_settler_settles_on_a_changed_shape_at_most_every_min_s_at_least_every_600_s():
    now, shape, settles = [0.0], [(1, 1)], []
    settler = heap.HeapSettler(lambda: shape[0], 10.0, threading.Event(),
                               clock=lambda: now[0], settle_heap=lambda: settles.append(now[0]))
    assert settler.maybe_settle()  # the first look: never settled
    now[0] = 5.0
    assert not settler.maybe_settle()  # nothing changed
    shape[0] = (2, 2)
    assert not settler.maybe_settle()  # changed, but 5 s after the last settle
    now[0] = 10.0
    assert settler.maybe_settle()
    now[0] = 300.0
    assert not settler.maybe_settle()  # unchanged
    now[0] = 610.0
    assert settler.maybe_settle()  # unchanged, but 600 s on
    assert settles == [0.0, 10.0, 610.0]
