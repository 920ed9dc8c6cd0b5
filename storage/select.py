"""Choosing and gathering frames for a read, over whole numpy arrays (no per-record loop),
and what a read returns (:class:`ReadResult`).

Given a run of index entries, :func:`plan` picks the entries to return (byte budget, tag
filter) and the physical byte spans that hold them; :func:`assemble` turns the bytes of those
spans into the returned frames, applying the exact tag check.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from lib.records import FRAME_HEADER_SIZE, FRAME_TAG_LEN_AT, gather_u16


@dataclass(frozen=True)
class ReadPlan:
    examined: int  # entries consumed from the front of the run (next offset advances by this)
    selected: np.ndarray  # indices (into the run) of entries to return, ascending
    span_starts: np.ndarray  # data positions of the byte spans to read
    span_lengths: np.ndarray


@dataclass(frozen=True)
class ReadResult:
    """Frames (each self-describing), the offset of each one and its size in bytes
    (``sizes``, uint32, from the index: callers split ``frames`` without walking the frames'
    length fields)."""

    pieces: tuple[bytes | memoryview, ...]  # the frames as consecutive runs, uncopied
    offsets: np.ndarray
    next_offset: int
    earliest: int
    latest: int
    sizes: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets)

    @cached_property
    def frames(self) -> bytes | memoryview:
        """The frames in one buffer: a single piece as it is (a view of a cache block, when
        read from one), several joined (a copy, made once)."""
        pieces = self.pieces
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def plan(entries: np.ndarray, max_bytes: int, tag_hashes: np.ndarray | None,
         max_records: int | None = None) -> ReadPlan:
    """Select entries within ``max_bytes`` and ``max_records`` (always at least one match) and
    group them in spans.

    Entries not selected (tag mismatch, holes) are still *examined*: the reader's next offset
    moves past them; with ``max_records`` it stops right after the last selected one."""
    sizes = entries["size"].astype(np.int64)
    wanted = sizes > 0  # size 0: a hole recovery left for lost data; skipped like a non-match
    if tag_hashes is not None:
        wanted &= np.isin(entries["tag"], tag_hashes)
    cum = np.cumsum(np.where(wanted, sizes, 0))
    examined = int(np.searchsorted(cum, max_bytes, side="right"))
    if examined < len(entries) and not wanted[:examined].any():
        examined += 1  # the first match alone is over budget: it still goes, so readers progress
    selected = np.flatnonzero(wanted[:examined])
    if max_records is not None and len(selected) > max_records:
        selected = selected[:max(1, max_records)]
        examined = int(selected[-1]) + 1
    if len(selected) == 0:
        empty = np.empty(0, np.int64)
        return ReadPlan(examined, selected, empty, empty)
    entries, sizes = entries[:examined], sizes[:examined]
    pos = entries["pos"].astype(np.int64)
    # A physical run breaks where an entry does not start right after the previous one.
    breaks = np.ones(len(entries), dtype=bool)
    breaks[1:] = pos[1:] != pos[:-1] + sizes[:-1]
    run_id = np.cumsum(breaks)[selected]
    first_of_run = np.ones(len(selected), dtype=bool)
    first_of_run[1:] = run_id[1:] != run_id[:-1]
    heads = np.flatnonzero(first_of_run)
    tails = np.append(heads[1:], len(selected)) - 1
    starts = pos[selected[heads]]
    ends = pos[selected[tails]] + sizes[selected[tails]]
    return ReadPlan(examined, selected, starts, ends - starts)


def assemble(entries: np.ndarray, p: ReadPlan, spans: list[bytes | memoryview],
             tags: list[bytes] | None) -> tuple[tuple[bytes | memoryview, ...], np.ndarray]:
    """Frames, as consecutive pieces, and their run indices from the span bytes; exact tag
    check when filtering.

    Unfiltered, the spans are the pieces as they are: from a cache block, views of the
    block's buffer, which nothing writes again (a block only appends, and its buffer is reused
    only once no view of it is left: storage/cache.py). A chunk header parts each producer
    batch's frames from the next, so a read of several batches has several spans: joining
    them (and copying a single one) cost 0.2-0.35 us per KiB in fresh pages, most of a
    follower's or a tailing consumer's read. Readers that send the frames on send the
    pieces (:attr:`ReadResult.pieces`)."""
    if len(p.selected) == 0:
        return (), p.selected
    if tags is None:
        return tuple(spans), p.selected  # no filter: the spans are exactly the frames, in order
    buf = spans[0] if len(spans) == 1 else b"".join(spans)
    u8 = np.frombuffer(buf, np.uint8)
    pos = entries["pos"][p.selected].astype(np.int64)
    sizes = entries["size"][p.selected].astype(np.int64)
    span_of = np.searchsorted(p.span_starts, pos, side="right") - 1
    span_out = np.concatenate(([0], np.cumsum(p.span_lengths)[:-1]))
    local = pos - p.span_starts[span_of] + span_out[span_of]
    keep = _exact_tag_match(u8, local, sizes, tags)
    local, sizes, chosen = local[keep], sizes[keep], p.selected[keep]
    if len(chosen) == 0:
        return (), chosen
    out_starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    idx = np.repeat(local - out_starts, sizes) + np.arange(int(sizes.sum()))
    return (u8[idx].tobytes(),), chosen


def _exact_tag_match(u8: np.ndarray, starts: np.ndarray, sizes: np.ndarray,
                     tags: list[bytes]) -> np.ndarray:
    """True where the frame's tag bytes equal one of ``tags`` (hashes can collide)."""
    tag_lens = gather_u16(u8, starts + FRAME_TAG_LEN_AT).astype(np.int64)
    keep = np.zeros(len(starts), dtype=bool)
    limit = len(u8) - 1
    for tag in tags:  # a handful of tags per subscription, not per record
        same_len = (tag_lens == len(tag)) & (sizes >= FRAME_HEADER_SIZE + len(tag))
        if not same_len.any() or not tag:
            continue
        idx = np.minimum(starts[:, None] + FRAME_HEADER_SIZE + np.arange(len(tag)), limit)
        equal = (u8[idx] == np.frombuffer(tag, np.uint8)).all(axis=1)
        keep |= same_len & equal
    return keep
