"""Offset claims: which group member may commit each partition (fencing by generation).

A consumer that is assigned a partition calls FetchOffsets with its member id and generation:
that *claims* the partition (when its generation is >= the current claim's) and reads the
committed offset in the same step. A commit is accepted only from the claim's owner, or from a
newer generation (which then becomes the owner), or when nobody claimed the partition yet. So
once the new owner has read the offsets, nothing an older owner commits can count.

``member_id == ""`` is a manual assignment without a group: it never claims and is never fenced.
Generations are ``(master_epoch << 32) | counter``, so they only grow across master restarts.

Pure and not thread-safe: the caller serialises a claim/check with the offset read/write it
guards (see broker/offsets.py). Claims live in memory only: after a broker restart the first
member to fetch or commit becomes the owner again.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from lib.errors import Fenced

Key = tuple[str, str, int]  # group, topic, partition


@dataclass(frozen=True)
class Claim:
    member_id: str
    generation: int


def is_manual(member_id: str) -> bool:
    return member_id == ""


class ClaimTable:
    def __init__(self) -> None:
        self._claims: dict[Key, Claim] = {}

    def get(self, group: str, topic: str, partition: int) -> Claim | None:
        return self._claims.get((group, topic, partition))

    def claim(self, group: str, topic: str, partitions: Iterable[int], member_id: str,
              generation: int) -> None:
        """Make ``member_id`` the owner of every partition, or raise Fenced and change nothing."""
        def allowed(held: Claim) -> bool:
            return generation >= held.generation

        self._take(group, topic, partitions, member_id, generation, allowed, "claim")

    def check_commit(self, group: str, topic: str, partitions: Iterable[int], member_id: str,
                     generation: int) -> None:
        """Allow a commit (taking unclaimed partitions) or raise Fenced and change nothing."""
        def allowed(held: Claim) -> bool:
            return generation > held.generation or (
                generation == held.generation and member_id == held.member_id)

        self._take(group, topic, partitions, member_id, generation, allowed, "commit")

    def _take(self, group: str, topic: str, partitions: Iterable[int], member_id: str,
              generation: int, allowed, action: str) -> None:
        """Check every partition first, then record the claims: all or nothing."""
        if is_manual(member_id):
            return
        keys = [(group, topic, p) for p in partitions]
        for key in keys:
            held = self._claims.get(key)
            if held is not None and not allowed(held):
                raise _fenced(key, member_id, generation, held, action)
        for key in keys:
            self._claims[key] = Claim(member_id, generation)

    def clear(self, group: str, topic: str, partitions: Iterable[int]) -> None:
        """Forget the claims (an admin reset rewrote the offsets: the next fetch claims anew)."""
        for p in partitions:
            self._claims.pop((group, topic, p), None)

    def __len__(self) -> int:
        return len(self._claims)


def _fenced(key: Key, member_id: str, generation: int, held: Claim, action: str) -> Fenced:
    group, topic, partition = key
    return Fenced(
        f"{action} of {topic}/{partition} for group {group} refused: member {member_id!r} of "
        f"generation {generation} is fenced by member {held.member_id!r} of generation "
        f"{held.generation}; rejoin the group",
        group=group, topic=topic, partition=partition, member_id=member_id,
        generation=generation, owner=held.member_id, owner_generation=held.generation)
