"""The message browser's newest-first pages (portal_web/browse.py) over an in-memory reader:
following "next" from the first page shows every matching record exactly once, newest first
within each partition, whatever the partitions, record sizes, filters, limits and byte budgets
(issue 49: the first page used to be all there was)."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lib.consumer.reader import OffsetBounds, ReadResult
from lib.records import Record
from portal_web import browse


class MemoryReader:
    """What browse needs of a MessageReader: offsets and reads that return at least one record
    and then as many as fit in ``max_bytes`` (as the brokers answer QueryMessages)."""

    def __init__(self, partitions: list[list[Record]], earliest: list[int]) -> None:
        self.parts, self.earliest = partitions, earliest
        self.reads = 0

    def offsets(self, topic: str, timestamp_ms: int | None = None) -> dict[int, OffsetBounds]:
        return {p: OffsetBounds(p, self.earliest[p], len(recs))
                for p, recs in enumerate(self.parts)}

    def read(self, topic: str, partition: int, start: int, end: int | None = None,
             max_bytes: int | None = None) -> ReadResult:
        self.reads += 1
        recs = self.parts[partition]
        assert self.earliest[partition] <= start < (end or len(recs)) <= len(recs)
        got, nbytes = [], 0
        for r in recs[start:end]:
            if got and nbytes + len(r.value) > max_bytes:
                break
            got.append(r)
            nbytes += len(r.value)
        return ReadResult(topic, partition, got, start + len(got), self.earliest[partition],
                          len(recs), nbytes)


def _topic(sizes: list[list[int]], trimmed: list[int]) -> MemoryReader:
    """Partitions of records of ``sizes`` bytes (two in three end with "match"), the first
    ``trimmed`` offsets of each gone (retention)."""
    parts = [[Record(b"v" * size + (b"match" if (p + o) % 3 else b""), timestamp=o * 10 + p,
                     offset=o, partition=p)
              for o, size in enumerate(part)] for p, part in enumerate(sizes)]
    return MemoryReader(parts, [min(trimmed[p], len(part)) for p, part in enumerate(sizes)])


def _walk(reader: MemoryReader, args: dict) -> list[list[tuple[int, int]]]:
    pages, cursor = [], ""
    for _ in range(1000):
        view = browse.messages(reader, "t", {**args, **({"cursor": cursor} if cursor else {})})
        pages.append([(r["partition"], r["offset"]) for r in view["records"]])
        cursor = view["next"]
        if not cursor:
            return pages
    raise AssertionError("no end after 1000 pages")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.lists(st.lists(st.integers(1, 3000), max_size=40), min_size=1, max_size=4),
       trimmed=st.lists(st.integers(0, 5), min_size=4, max_size=4),
       limit=st.integers(1, 25), scan_bytes=st.sampled_from([1024, 4096, 1 << 20]),
       filtered=st.booleans())
def test_next_walks_back_through_every_match_once(sizes, trimmed, limit, scan_bytes, filtered):
    reader = _topic(sizes, trimmed)
    args = {"mode": "newest", "limit": limit, "scan_bytes": scan_bytes,
            **({"value": "match"} if filtered else {})}
    pages = _walk(reader, args)
    seen = [r for page in pages for r in page]
    expected = {(p, o) for p, part in enumerate(reader.parts)
                for o in range(reader.earliest[p], len(part))
                if not filtered or part[o].value.endswith(b"match")}
    assert len(seen) == len(set(seen)) and set(seen) == expected
    assert all(len(page) <= limit for page in pages)
    for p in range(len(sizes)):  # newest first within a partition, across pages
        offsets = [o for q, o in seen if q == p]
        assert offsets == sorted(offsets, reverse=True)


def test_without_a_filter_a_page_reads_a_few_windows_not_one_offset_at_a_time():
    reader = _topic([[100] * 500], [0])
    view = browse.messages(reader, "t", {"mode": "newest", "limit": 50})
    assert [r["offset"] for r in view["records"]] == list(range(499, 449, -1))
    assert view["next"] == "0:450" and reader.reads <= 3
