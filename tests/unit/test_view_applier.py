"""ViewApplier: views are applied on its own thread in the order they came, a view still
waiting is replaced by a newer one, and ``digest`` names only a view applied whole."""
from __future__ import annotations

import threading

from broker.view_applier import ViewApplier


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
        assert not applier.wait_idle(0.2) and applier.digest == b"", "nothing whole yet"
        applier.offer("second", b"d2")
        applier.offer("third", b"d3")  # replaces the second, never applied
        gate.set()
        assert applier.wait_idle(10)
        assert applied == ["first", "third"] and applier.digest == b"d3"
        applier.offer("broken", b"d4")  # part of it failed: ask for the whole view again
        assert applier.wait_idle(10) and applier.digest == b""
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
