"""ViewApplier: views are applied on its own thread in the order they came, a view still
waiting is replaced by a newer one, and ``digest`` names the newest view taken, until one fails
in part with no newer one waiting."""
from __future__ import annotations

import threading
import time

from broker.view_applier import ViewApplier


def held(seen: list, expected: list) -> None:
    """Wait (10 s at most) until the applier's thread took the first view and holds it."""
    deadline = time.monotonic() + 10
    while seen != expected:
        assert time.monotonic() < deadline, f"the applier took {seen}, not {expected}"
        time.sleep(0.01)


def test_the_newest_waiting_view_replaces_an_older_one_and_the_digest_follows_success():
    gate, applied = threading.Event(), []

    def apply(view):
        applied.append(view)
        if view == "first":
            gate.wait(10)  # held, so that the next two arrive while it is applied
        return view != "broken"

    applier = ViewApplier(apply)
    try:
        applier.offer("first", b"d1")
        held(applied, ["first"])
        # The heartbeat names the view being applied: were it to name none, the master would
        # send the whole view again while a slow apply (10,000 topics) runs, every second
        assert applier.digest == b"d1"
        applier.offer("second", b"d2")
        applier.offer("third", b"d3")  # replaces the second, never applied
        gate.set()
        assert applier.wait_idle(10)
        assert applied == ["first", "third"] and applier.digest == b"d3"
        assert applier.applied == 2
        applier.offer("broken", b"d4")  # part of it failed: ask for the whole view again
        assert applier.wait_idle(10) and applier.digest == b""
    finally:
        applier.stop()


def test_a_view_failing_in_part_while_a_newer_one_waits_leaves_the_newer_digest():
    gate, applied = threading.Event(), []

    def apply(view):
        applied.append(view)
        if view == "broken":
            gate.wait(10)
            return False
        return True

    applier = ViewApplier(apply)
    try:
        applier.offer("broken", b"d1")
        held(applied, ["broken"])
        applier.offer("newer", b"d2")
        assert applier.digest == b"d2"
        gate.set()
        assert applier.wait_idle(10)
        assert applied == ["broken", "newer"] and applier.digest == b"d2"
    finally:
        applier.stop()


def test_an_apply_that_raises_leaves_no_digest_and_the_thread_goes_on():
    def apply(view):
        if view == "boom":
            raise RuntimeError("a bug")
        return True

    applier = ViewApplier(apply)
    try:
        applier.offer("boom", b"d1")
        assert applier.wait_idle(10) and applier.digest == b""
        applier.offer("fine", b"d2")
        assert applier.wait_idle(10) and applier.digest == b"d2"
    finally:
        applier.stop()


def test_what_came_with_a_view_runs_after_it_and_no_view_keeps_the_one_waiting():
    """The ACLs of a response are applied after its topics: a client an ACL lets in finds
    the topic open (a test producing with retries=0 got PartitionNotHosted in between)."""
    gate, order = threading.Event(), []

    def apply(view):
        order.append(view)
        if view == "first":
            gate.wait(10)
        return True

    applier = ViewApplier(apply)
    try:
        applier.offer("first", b"d1", lambda: order.append("acls-1"))
        held(order, ["first"])
        applier.offer("second", b"d2", lambda: order.append("acls-2"))
        applier.offer(None, b"", lambda: order.append("acls-3"))  # unchanged: keeps "second"
        gate.set()
        assert applier.wait_idle(10)
        assert order == ["first", "acls-1", "second", "acls-3"] and applier.digest == b"d2"
        applier.offer(None, b"", lambda: order.append("acls-4"))
        assert applier.wait_idle(10) and order[-1] == "acls-4" and applier.digest == b"d2"
    finally:
        applier.stop()
