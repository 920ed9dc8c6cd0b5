"""Reading a dict that other threads change, without their lock.

``list(d.items())`` is not one step: it allocates a tuple per item, an allocation may start a
garbage collection, and a collection may run Python code (a finalizer, a weakref callback, a
``gc.callbacks`` entry such as lib/gc_freeze.py's) between two items; the interpreter may
switch threads there, and an insert by another thread makes the copy raise ``RuntimeError:
dictionary changed size during iteration``. A broker's heartbeat thread died of exactly that
while 10,000 topics were being created (the master then declared the broker dead).
``dict.copy`` allocates no tracked object while it copies, and a copy that still meets a
change is simply taken again.
"""
from __future__ import annotations

from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


def copied(d: dict[K, V]) -> dict[K, V]:
    """A copy of ``d`` as it was at some moment, while other threads may insert or remove."""
    while True:
        try:
            return d.copy()
        except RuntimeError:  # changed size while copied: take it again
            continue
