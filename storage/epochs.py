"""The leader-epoch cache of one partition (Kafka's ``leader-epoch-checkpoint``, KIP-101).

Replication numbers each leadership of a partition with an epoch; this cache remembers, for
each epoch, the first offset its leader assigned: an ordered list of (epoch, start_offset),
epochs strictly growing, start offsets never falling. A follower that lost track of the
leader (a leader change, a restart) asks the leader where its own latest epoch ends
(:meth:`LeaderEpochs.end_offset_for`) and truncates its log there, instead of trusting a high
watermark that may hide divergent records.

Epoch 0 is "no epoch": what a chunk written without replication (or before chunks carried an
epoch) says, so a partition's log records epochs from 1 on (storage/partition_log.py).

The list is kept in ``<store dir>/p<partition>/leader-epochs``, sealed with a CRC
(``storage.recovery.seal``) and rewritten whole, durably (temp file, fsync, rename, directory
fsync), on every change: changes are rare (a new leader epoch, a truncation, retention moving
the earliest offset) and an entry must never be lost once records of its epoch were
acknowledged. A missing file is an empty cache. A damaged one is logged
(``store.leader_epochs_unreadable``) and read as empty too: the follower then finds no epoch
to ask about, falls back to the leader's answers and rebuilds the entries from the epochs of
the batches the leader sends.

Not thread-safe: its owner (the store) serialises calls.
"""
from __future__ import annotations

import bisect
import logging
from itertools import pairwise
from pathlib import Path

from lib.errors import InvalidArgument
from lib.logs import event
from storage.fsutil import atomic_write
from storage.recovery import seal, unseal

log = logging.getLogger(__name__)
FILE = "leader-epochs"
FORMAT_VERSION = 1
UNDEFINED = (-1, -1)  # end_offset_for's answer when this log cannot tell where an epoch ends


class LeaderEpochs:
    """(epoch, start_offset) entries of one partition, persisted in ``directory / FILE``."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / FILE
        self._epochs: list[int] = []
        self._starts: list[int] = []
        loaded = _load(self.path)
        if loaded:
            self._epochs, self._starts = [e for e, _ in loaded], [s for _, s in loaded]

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset``; a known latest epoch is a no-op.

        Raises InvalidArgument for an epoch below the latest or a start below the latest
        entry's start: both must only grow (a log truncation first trims the cache with
        :meth:`truncate_from_end`).
        """
        if epoch < 0 or start_offset < 0:
            raise InvalidArgument(f"leader epoch {epoch} at offset {start_offset}: both must be "
                                  f">= 0 ({self.path})", epoch=epoch, offset=start_offset)
        latest = self.latest()
        if latest is not None:
            if epoch == latest[0]:
                return
            if epoch < latest[0] or start_offset < latest[1]:
                raise InvalidArgument(
                    f"leader epoch {epoch} at offset {start_offset} goes back: the latest is "
                    f"epoch {latest[0]} from offset {latest[1]} ({self.path})",
                    epoch=epoch, offset=start_offset, latest_epoch=latest[0],
                    latest_start=latest[1])
        self._save([*self._epochs, epoch], [*self._starts, start_offset])

    def latest(self) -> tuple[int, int] | None:
        """The newest (epoch, start_offset), or None when the cache is empty."""
        return (self._epochs[-1], self._starts[-1]) if self._epochs else None

    def entries(self) -> list[tuple[int, int]]:
        """Every (epoch, start_offset), oldest first."""
        return list(zip(self._epochs, self._starts, strict=True))

    def end_offset_for(self, epoch: int, log_end: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch, as Kafka answers it: the largest known epoch <= ``epoch`` and
        the offset where it ends (the start of the next entry, or ``log_end`` for the latest).

        A follower truncates its log to the answer for its own latest epoch: records past it
        were never written by that epoch's leader. An epoch below every known one ends where
        the first known epoch starts (answered with the epoch asked about); an epoch above
        every known one, or an empty cache, is ``(-1, -1)``: this log cannot tell.
        """
        if not self._epochs or epoch > self._epochs[-1]:
            return UNDEFINED
        if epoch == self._epochs[-1]:
            return epoch, log_end
        i = bisect.bisect_right(self._epochs, epoch) - 1
        if i < 0:
            return epoch, self._starts[0]
        return self._epochs[i], self._starts[i + 1]

    def truncate_from_end(self, offset: int) -> None:
        """Forget the entries starting at or after ``offset``: the log was cut there, so their
        epochs no longer have records (a follower truncating, a crash that lost the tail)."""
        keep = bisect.bisect_left(self._starts, offset)
        if keep < len(self._starts):
            self._save(self._epochs[:keep], self._starts[:keep])

    def truncate_from_start(self, offset: int) -> None:
        """Retention moved the earliest offset to ``offset``: entries wholly below it go, and
        the one covering it keeps its epoch and starts at ``offset``."""
        covering = bisect.bisect_right(self._starts, offset) - 1
        if covering < 0 or (covering == 0 and self._starts[0] == offset):
            return  # nothing starts below ``offset``
        self._save(self._epochs[covering:], [offset, *self._starts[covering + 1:]])

    def clear(self) -> None:
        """Forget every entry (the log was reset: none of its old records remain)."""
        if self._epochs:
            self._save([], [])

    def _save(self, epochs: list[int], starts: list[int]) -> None:
        """Write the new list, then adopt it: a failed write (StorageError) changes nothing."""
        body = {"version": FORMAT_VERSION,
                "entries": [[e, s] for e, s in zip(epochs, starts, strict=True)]}
        atomic_write(self.path, seal(body))
        self._epochs, self._starts = epochs, starts


def _load(path: Path) -> list[tuple[int, int]]:
    """The entries in ``path``: none when it is missing, or damaged (logged; module docstring)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        return _unreadable(path, exc)
    try:
        body = unseal(raw)
        if body["version"] != FORMAT_VERSION:
            raise ValueError(f"version {body['version']!r}")
        entries = [(int(e), int(s)) for e, s in body["entries"]]
        if any(a[0] >= b[0] or a[1] > b[1] for a, b in pairwise(entries)):
            raise ValueError("entries out of order")
        return entries
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return _unreadable(path, exc)


def _unreadable(path: Path, exc: BaseException) -> list[tuple[int, int]]:
    event(log, "store.leader_epochs_unreadable", logging.WARNING, path=str(path),
          error=repr(exc))
    return []
