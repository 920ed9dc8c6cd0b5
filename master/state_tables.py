"""What every part of the master's state is built from: JSON records in LMDB tables, logs keyed
by sequence number and trimmed to a size, and the context a replicated command runs in.

The parts (``master/state_topics.py``, ``state_brokers.py``, ``state_groups.py`` and
``principals.py``) each own some of the LMDB's named databases and an in-memory cache of them;
``master/state.py`` opens the LMDB, hands each part its databases and applies commands. The
bytes written here are the on-disk and snapshot format: an existing data dir and every Raft
snapshot must keep reading, so the encoding (sorted-key compact JSON, 8-byte big-endian
sequence keys) does not change.
"""
from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

SEQ = struct.Struct(">Q")  # big-endian so keys sort by sequence

# A command's context: its LMDB write transaction, and the cache updates to publish once that
# transaction committed (a part appends to it; a command that fails publishes nothing).
Context = tuple[Any, list[Callable[[], None]]]
Handler = Callable[[Context, dict[str, Any]], Any]


def dump(value: Any) -> bytes:
    """``value`` as stored: compact JSON with sorted keys (every master writes the same bytes)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def load(raw: bytes) -> Any:
    return json.loads(bytes(raw))


def read_all(env: Any, db: Any) -> dict[str, Any]:
    """Every record of a table keyed by name: name -> value."""
    with env.begin(db=db) as txn:
        return {bytes(k).decode(): load(v) for k, v in txn.cursor()}


class SeqLog:
    """An append-only log in one LMDB database (the audit log, the tombstones), keyed by a
    sequence number from 1, that keeps only its newest ``kept`` entries."""

    def __init__(self, env: Any, db: Any, kept: int) -> None:
        self._env, self._db, self._kept = env, db, kept

    def append(self, txn: Any, value: dict[str, Any]) -> None:
        """Append in the command's transaction, dropping the oldest entries beyond ``kept``."""
        cursor = txn.cursor(db=self._db)
        seq = SEQ.unpack(cursor.key())[0] + 1 if cursor.last() else 1
        txn.put(SEQ.pack(seq), dump(value), db=self._db)
        oldest = seq - self._kept
        if oldest > 0 and cursor.first():
            while cursor.key() and SEQ.unpack(cursor.key())[0] <= oldest:
                if not cursor.delete():
                    break

    def entries(self) -> list[Any]:
        """Every entry kept, oldest first."""
        with self._env.begin(db=self._db) as txn:
            return [load(v) for _k, v in txn.cursor()]

    def newest(self, limit: int) -> list[Any]:
        """The newest ``limit`` entries, oldest first."""
        out: list[Any] = []
        with self._env.begin(db=self._db) as txn:
            cursor = txn.cursor()
            if cursor.last():
                for _key, raw in cursor.iterprev():
                    out.append(load(raw))
                    if len(out) >= limit:
                        break
        return out[::-1]
