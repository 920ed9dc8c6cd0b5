"""The message browser's data, as plain dicts (the page and the API show the same): a bounded
scan of what a request asks for (portal_web/message_query.py), and the records as shown
(portal_web/render.py).

The scan is bounded: at most ``limit`` records shown (at most :data:`MAX_RECORDS`), at most
``scan_bytes`` of frames read (at most :data:`MAX_SCAN_BYTES`) and :data:`MAX_SCAN_OFFSETS`
offsets examined, split evenly between the partitions; the answer says what stopped it and
where "next" continues. Records are read as the caller (their :class:`MessageReader`), so the
brokers check the caller's ACLs (``consume`` on the topic).

An exact key filter is answered by each partition's key index (docs/lookup.md) instead of a
scan: the records with that key come back page by page (:data:`KEY_PAGE`), the other filters
apply to them; a key on more than :data:`KEY_PAGES` pages of records falls back to the scan.
Records found so show no transaction state (the lookup does not return aborted ranges).
"""
from __future__ import annotations

import functools
import heapq
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lib.consumer.reader import MessageReader, OffsetBounds, ReadResult
from lib.records import FLAG_CONTROL, Record
from portal_web.errors import PortalError
from portal_web.humane import size
from portal_web.message_query import (
    MAX_OFFSET,
    MAX_RECORDS,
    MAX_SCAN_BYTES,
    MAX_SCAN_OFFSETS,
    Filters,
    Plan,
    parse_time,
    plan,
)
from portal_web.render import shown
from portal_web.views import integer

CHUNK_BYTES = 1 << 20  # frame bytes per QueryMessages call
KEY_PAGE, KEY_PAGES = 1000, 10  # records per FindByKey call, calls per partition at most
KEY_PREVIEW, HEADER_PREVIEW = 512, 256


@dataclass
class PartitionScan:
    start: int  # everything in [start, pos) was examined (newest first: start moves down)
    pos: int
    nbytes: int = 0
    stopped: str = "end"  # end, limit, bytes, offsets
    matches: deque[Record] = field(default_factory=deque)
    txn: dict[int, str] = field(default_factory=dict)  # offset -> txn_state of a match


def txn_state(r: Record, got: ReadResult) -> str:
    """What a record is to transactions, as far as a read shows: a commit or abort marker, a
    record of an aborted transaction, one read_committed readers do not see yet (at or past
    the last stable offset), or "" (committed, or written outside any transaction)."""
    if r.flags & FLAG_CONTROL:
        return "commit marker" if r.key == b"commit" else "abort marker"
    if any(first <= r.offset <= last for first, last in got.aborted):
        return "aborted"
    if 0 <= got.last_stable <= r.offset:
        return "not yet stable"
    return ""


# ------------------------------------------------------------------ the scan


def scan_partition(reader: MessageReader, topic: str, partition: int, start: int, end: int,
                   filt: Filters, want: int, max_bytes: int, max_offsets: int) -> PartitionScan:
    """Read [start, end) forward until ``want`` matches, ``end``, or a budget runs out."""
    s = PartitionScan(start, start)
    while s.pos < end:
        if s.nbytes >= max_bytes:
            s.stopped = "bytes"
            break
        if s.pos - start >= max_offsets:
            s.stopped = "offsets"
            break
        got = reader.read(topic, partition, s.pos, min(end, start + max_offsets),
                          max(1, min(CHUNK_BYTES, max_bytes - s.nbytes)))
        s.nbytes += got.nbytes
        for r in got.records:
            if filt.matches(r):
                s.matches.append(r)
                s.txn[r.offset] = txn_state(r, got)
                if len(s.matches) >= want:
                    s.pos, s.stopped = r.offset + 1, "limit"
                    return s
        if got.next_offset <= s.pos:
            break  # nothing more to read (the partition ends before ``end``)
        s.pos = got.next_offset
    return s


def scan_newest(reader: MessageReader, topic: str, partition: int, low: int, end: int,
                filt: Filters, want: int, max_bytes: int, max_offsets: int) -> PartitionScan:
    """The last ``want`` matches of [low, end), read backwards from ``end`` in windows (each
    read forwards, as the brokers serve). Only whole windows count, so what was examined is
    always [start, end) and "next" (below ``start``, or below the oldest match shown) skips
    nothing. The first window is one offset, which one read always brings whatever its size;
    the next ones are sized from the bytes per offset seen so far to fit the budget."""
    s = PartitionScan(end, end)
    window = 1
    while s.start > low and len(s.matches) < want:
        if s.nbytes >= max_bytes or end - s.start >= max_offsets:
            s.stopped = "bytes" if s.nbytes >= max_bytes else "offsets"
            break
        first = max(low, s.start - window, end - max_offsets)
        found, nbytes, whole = _read_window(reader, topic, partition, first, s.start, filt,
                                            max_bytes - s.nbytes, s.txn)
        s.nbytes += nbytes
        if not whole:
            s.stopped = "bytes"
            break
        s.matches.extendleft(reversed(found))
        s.start = first
        per_offset = max(1.0, s.nbytes / (end - s.start))
        fit = int((max_bytes - s.nbytes) / per_offset)
        window = max(1, min(fit, max(want - len(s.matches), 2 * window)))
    while len(s.matches) > want:  # a window brought more than needed: keep the newest
        s.start = s.matches.popleft().offset + 1
    if len(s.matches) >= want and s.start > low:
        s.stopped = "limit"
    return s


def _read_window(reader: MessageReader, topic: str, partition: int, first: int, stop: int,
                 filt: Filters, budget: int, txn: dict[int, str]
                 ) -> tuple[list[Record], int, bool]:
    """Matches of [first, stop), bytes read, and whether the whole window was read before
    ``budget`` ran out (its first read always happens); each match's txn_state into
    ``txn``."""
    pos, nbytes, found = first, 0, []
    while pos < stop:
        if nbytes >= budget and pos > first:
            return found, nbytes, False
        got = reader.read(topic, partition, pos, stop, max(1, min(CHUNK_BYTES, budget - nbytes)))
        nbytes += got.nbytes
        for r in got.records:
            if filt.matches(r):
                found.append(r)
                txn[r.offset] = txn_state(r, got)
        if got.next_offset <= pos:
            break  # nothing more to read (the partition ends before ``stop``)
        pos = got.next_offset
    return found, nbytes, True


def scan_key(reader: MessageReader, topic: str, partition: int, start: int, end: int,
             filt: Filters, want: int, max_bytes: int, max_offsets: int, *,
             newest_first: bool) -> PartitionScan:
    """The matches of [start, end) for an exact key, from the partition's key index (first
    ``want``, or the last ``want`` newest first), examined as if the whole range was."""
    found: list[Record] = []
    pos = start
    for _ in range(KEY_PAGES):
        records, nxt = reader.find_by_key_in(topic, partition, filt.key or b"", pos, KEY_PAGE)
        found += [r for r in records if r.offset < end and filt.matches(r)]
        if nxt >= end or nxt <= pos or (not newest_first and len(found) >= want):
            break
        pos = nxt
    else:  # a key on very many records: the bounded scan pages through them
        read = scan_newest if newest_first else scan_partition
        return read(reader, topic, partition, start, end, filt, want, max_bytes, max_offsets)
    if newest_first:
        s = PartitionScan(start, end, matches=deque(found[-want:]))
        if len(found) > want:
            s.start, s.stopped = found[-want - 1].offset + 1, "limit"
        return s
    s = PartitionScan(start, end, matches=deque(found[:want]))
    if len(found) >= want and found[want - 1].offset + 1 < end:
        s.pos, s.stopped = found[want - 1].offset + 1, "limit"
    return s


def scan(reader: MessageReader, made: Plan) -> dict[str, Any]:
    """Scan every range of ``made`` and show the first ``limit`` matches: by offset within a
    partition, by time across partitions (newest first in newest mode)."""
    n = max(1, len(made.ranges))
    budget = (made.filters, made.limit, max(1, made.scan_bytes // n),
              max(1, MAX_SCAN_OFFSETS // n))
    by_key = made.filters.key is not None and not made.filters.key_substring
    read = (functools.partial(scan_key, newest_first=made.newest_first) if by_key
            else scan_newest if made.newest_first else scan_partition)
    scans = {p: read(reader, made.topic, p, start, end, *budget)
             for p, (start, end) in made.ranges.items() if start < end}
    # A merge of each partition's matches in offset order (by their heads' timestamps), not a
    # sort: what a page shows of a partition is then a prefix (newest first: a suffix) of its
    # matches even where timestamps go backwards, so "next" never shows a record twice.
    runs = [list(reversed(s.matches)) if made.newest_first else list(s.matches)
            for s in scans.values()]
    matches = list(heapq.merge(*runs, key=lambda r: (r.timestamp, r.partition),
                               reverse=made.newest_first))
    shown_records, rest = matches[:made.limit], matches[made.limit:]
    cursors = {}
    for p, s in scans.items():
        # What a page shows of a partition is its newest (oldest) matches, so "next" goes on
        # below (above) them: newest first, from the newest match not shown, else from below
        # what was examined; otherwise from the first match not shown, else where it stopped.
        unshown = [r.offset for r in rest if r.partition == p]
        if made.newest_first:
            resume = max(unshown) + 1 if unshown else s.start
            if resume > made.ranges[p][0]:
                cursors[p] = resume
        else:
            resume = min(unshown, default=s.pos)
            if resume < made.ranges[p][1]:
                cursors[p] = resume
    reasons = {s.stopped for p, s in scans.items() if p in cursors and s.stopped != "end"}
    if rest:
        reasons.add("limit")
    return {
        "records": [record_view(r, made.fmt, scans[r.partition].txn.get(r.offset, ""))
                    for r in shown_records],
        "scan": {"partitions": len(made.ranges), "offsets": sum(s.pos - s.start
                                                                for s in scans.values()),
                 "bytes": sum(s.nbytes for s in scans.values()), "matched": len(matches),
                 "shown": len(shown_records), "stopped": sorted(reasons),
                 "key_index": by_key},
        "next": ",".join(f"{p}:{off}" for p, off in sorted(cursors.items())) or None,
        "ranges": {str(p): list(r) for p, r in sorted(made.ranges.items())},
    }


def summary(view: Mapping[str, Any], made: Plan) -> str:
    s = view["scan"]
    text = (f"Scanned {s['offsets']:,} offsets ({size(s['bytes'])}) in {s['partitions']} "
            f"partition(s); {s['matched']} matched, showing {s['shown']}.")
    if s.get("key_index"):
        text = (f"Looked the key up in the key index of {s['partitions']} partition(s), "
                f"no scan; {s['matched']} matched, showing {s['shown']}.")
    if not view["next"]:
        return text + " That is everything in the range."
    why = {"limit": f"the limit of {made.limit} records per page (at most {MAX_RECORDS})",
           "bytes": f"the scan limit of {made.scan_bytes} bytes per request (at most "
                    f"{MAX_SCAN_BYTES})",
           "offsets": f"the scan limit of {MAX_SCAN_OFFSETS} offsets per request"}
    stops = "; ".join(why[r] for r in s["stopped"] if r in why) or "the end of a read"
    return f"{text} Stopped at {stops}: refine the filters or page on with next."


def record_view(r: Record, fmt: str, txn: str = "") -> dict[str, Any]:
    return {"partition": r.partition, "offset": r.offset, "timestamp": r.timestamp,
            "txn": txn,
            "tag": r.tag, "key": shown(r.key, fmt, KEY_PREVIEW), "value": shown(r.value, fmt),
            "headers": [{"name": k, "value": shown(v, fmt, HEADER_PREVIEW)}
                        for k, v in sorted(r.headers.items())]}


# ------------------------------------------------------------------ what the routes call


def partitions_view(bounds: dict[int, OffsetBounds]) -> list[dict[str, int]]:
    return [{"partition": b.partition, "earliest": b.earliest, "latest": b.latest,
             "messages": max(0, b.latest - b.earliest)} for b in bounds.values()]


def messages(reader: MessageReader, topic: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """The browser: the topic's partitions, the records a request asks for, and how the scan
    went (see the module docstring)."""
    time_ms = parse_time(str(args["time"])) if args.get("mode") == "time" and \
        args.get("time") else None
    bounds = reader.offsets(topic, timestamp_ms=time_ms)
    made = plan(topic, args, bounds)
    view = scan(reader, made)
    view.update(topic=topic, partitions=partitions_view(bounds), time_ms=time_ms,
                limits={"max_records": MAX_RECORDS, "max_scan_bytes": MAX_SCAN_BYTES,
                        "max_scan_offsets": MAX_SCAN_OFFSETS})
    view["scan"]["message"] = summary(view, made)
    return view


def raw(reader: MessageReader, topic: str, partition: str, offset: str) -> bytes:
    """The value of one message, byte for byte; 404 where the offset holds none."""
    count = reader.partitions(topic)
    where = {"partition": partition, "offset": offset}
    p = integer(where, "partition", None, 0, count - 1)
    off = integer(where, "offset", None, 0, MAX_OFFSET - 1)
    got = reader.read(topic, p, off, off + 1)
    if not got.records or got.records[0].offset != off:
        raise PortalError(404, "NO_MESSAGE", f"{topic}[{p}] has no message at offset {off} "
                          f"(offsets {got.earliest}..{got.latest - 1} are stored)")
    return got.records[0].value
