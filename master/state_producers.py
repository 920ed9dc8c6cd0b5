"""The producer ids part of the master's state: the next id no block has reserved yet.

Command: ``reserve_producer_ids`` (``count``): the active master reserves the block
``[next, next + count)`` for the ids it hands out from memory (master/producer_ids.py), and
``next`` moves past it on every master. Ids are never handed out twice: the counter only
grows, it is replicated like every command, and a block is used only by the leadership whose
command reserved it (the command carries its epoch: one from a deposed master is refused).
The unused rest of a block is skipped, never handed out later.

Stored as the key ``next_producer_id`` of the ``meta`` database (absent: 1, the first id;
0 and negative ids are never handed out: -1 means "not idempotent" on the wire), so a data
dir of a version without it opens unchanged.
"""
from __future__ import annotations

from typing import Any

from lib.errors import InvalidArgument, StorageError
from master.state_tables import Context, Handler, dump, load

FIRST_ID = 1
LAST_ID = (1 << 63) - 1  # ids are int64 on the wire
MAX_BLOCK = 1 << 20  # a reservation larger than this is a bug, not a need
_KEY = b"next_producer_id"


class ProducerIdCounter:
    """The next unreserved producer id (cached; a key of the ``meta`` database)."""

    def __init__(self, env: Any, meta_db: Any) -> None:
        self._db = meta_db
        with env.begin(db=meta_db) as txn:
            raw = txn.get(_KEY)
        self._next = FIRST_ID if raw is None else int(load(raw))

    def handlers(self) -> dict[str, Handler]:
        """op -> the handler :class:`~master.state.MetaState` applies it with."""
        return {"reserve_producer_ids": self._reserve}

    @property
    def next_id(self) -> int:
        """The first id no block has reserved yet."""
        return self._next

    def _reserve(self, ctx: Context, cmd: dict[str, Any]) -> dict[str, int]:
        txn, staged = ctx
        count = cmd.get("count")
        if not isinstance(count, int) or isinstance(count, bool) or not 0 < count <= MAX_BLOCK:
            raise InvalidArgument(f"a producer id block holds 1 to {MAX_BLOCK} ids, not "
                                  f"{count!r:.40}")
        raw = txn.get(_KEY, db=self._db)
        first = FIRST_ID if raw is None else int(load(raw))
        if first + count - 1 > LAST_ID:
            raise StorageError("every 63-bit producer id has been handed out", next_id=first)
        after = first + count
        txn.put(_KEY, dump(after), db=self._db)
        staged.append(lambda: setattr(self, "_next", after))
        return {"first": first, "count": count}
