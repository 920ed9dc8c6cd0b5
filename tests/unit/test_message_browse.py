"""The message browser's pure parts: how bytes are shown (portal_web/render.py), and the bounded
scan (portal_web/browse.py) over an in-memory reader: holes, budgets, and paging with the next
cursor, which shows every matching record exactly once however timestamps are ordered."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lib.consumer.reader import OffsetBounds, ReadResult
from lib.records import Record
from portal_web.browse import scan
from portal_web.errors import PortalError
from portal_web.message_query import Filters, Plan, parse_time, plan
from portal_web.render import hexdump, shown

FRAME = 30  # bytes a fake frame costs beyond its value


class FakeReader:
    """``MessageReader.read`` over lists of records (None: a hole, as after damage)."""

    def __init__(self, partitions: dict[int, list[Record | None]]) -> None:
        self.partitions = partitions
        self.reads = 0

    def read(self, topic: str, partition: int, start: int, end: int | None = None,
             max_bytes: int = 1 << 20) -> ReadResult:
        self.reads += 1
        log = self.partitions[partition]
        stop, pos, out, size = min(len(log), end or len(log)), start, [], 0
        while pos < stop:
            r = log[pos]
            if r is not None:
                if out and size + len(r.value) + FRAME > max_bytes:
                    break
                out.append(r)
                size += len(r.value) + FRAME
            pos += 1
        return ReadResult(topic, partition, out, pos, 0, len(log), size)


def log_of(partition: int, values: list[bytes | None], times: list[int] | None = None):
    return [None if v is None else Record(v, b"k%d" % i, "t", {}, (times or range(len(values)))[i],
                                          i, partition)
            for i, v in enumerate(values)]


def a_plan(ranges, limit=50, newest=False, filters=Filters(), scan_bytes=8 << 20) -> Plan:
    return Plan("t", ranges, limit, newest, filters, scan_bytes, "auto")


# ------------------------------------------------------------------ rendering


def test_json_objects_are_pretty_printed_and_scalars_stay_text():
    assert shown(b'{"a":[1]}')["text"] == '{\n  "a": [\n    1\n  ]\n}'
    assert shown(b"42") == {"format": "text", "text": "42", "size": 2, "truncated": False,
                            "note": ""}
    assert shown(b"42", "json")["format"] == "json"
    assert shown(b"{not json")["format"] == "text"
    assert shown(b"[" * 100_000)["format"] == "text"  # too deep for json: not an error


def test_unprintable_or_non_utf8_bytes_are_shown_as_hex():
    assert shown(b"\xff\xfe")["format"] == "hex"
    assert shown(b"bell\x07")["format"] == "hex"
    assert shown(b"tab\tand\nnewline")["format"] == "text"
    assert hexdump(b"AB\x00") == "00000000  41 42 00" + " " * 39 + "  |AB.|"


def test_a_format_asked_for_is_used_or_says_why_not():
    assert shown(b"{}", "hex")["text"].startswith("00000000  7b 7d")
    assert shown(b"\xff", "text") == {"format": "text", "text": "\ufffd", "size": 1,
                                      "truncated": False,
                                      "note": "not UTF-8: undecodable bytes shown as \ufffd"}
    assert shown(b"\xff", "json")["note"] == "not JSON"
    assert shown(None) == {"format": "none", "text": "", "size": 0, "truncated": False,
                           "note": ""}


def test_long_values_are_cut_to_the_preview_and_say_so():
    big = shown(b"x" * 5000, limit=100)
    assert big["truncated"] and len(big["text"]) == 100 and big["size"] == 5000
    value = json.dumps({"k": "v" * 5000}).encode()
    assert shown(value, limit=100)["truncated"]
    assert shown(bytes(range(256)) * 2, limit=32)["text"].count("\n") == 1


# ------------------------------------------------------------------ request parsing


def test_times_are_epoch_ms_or_iso_8601_in_utc_by_default():
    assert parse_time("1700000000000") == 1_700_000_000_000
    assert parse_time("2023-11-14T22:13:20Z") == 1_700_000_000_000
    assert parse_time("2023-11-14T22:13:20") == 1_700_000_000_000
    assert parse_time("2023-11-15T00:13:20+02:00") == 1_700_000_000_000
    with pytest.raises(PortalError, match="time must be epoch milliseconds"):
        parse_time("tomorrow")
    with pytest.raises(PortalError, match="at most 18 digits"):
        parse_time("9" * 19)  # would not fit the int64 of ListOffsets


def test_a_plan_picks_the_ranges_of_each_mode():
    bounds = {0: OffsetBounds(0, 10, 100, 40), 1: OffsetBounds(1, 0, 5, 5)}
    # newest: all of each partition, read backwards until limit matches (browse.scan_newest)
    assert plan("t", {}, bounds).ranges == {0: (10, 100), 1: (0, 5)}
    assert plan("t", {"mode": "newest", "limit": "3", "partition": "1"}, bounds).ranges == \
        {1: (0, 5)}
    # newest, cursor: below each offset named; partitions not named are done
    assert plan("t", {"cursor": "0:60"}, bounds).ranges == {0: (10, 60)}
    assert plan("t", {"mode": "range", "partition": "0", "to": "500"}, bounds).ranges == \
        {0: (10, 100)}
    assert plan("t", {"mode": "time", "time": "1"}, bounds).ranges == {0: (40, 100), 1: (5, 5)}
    # a cursor below earliest (retention moved on) starts at earliest
    assert plan("t", {"mode": "time", "time": "1", "cursor": "0:3"}, bounds).ranges == \
        {0: (10, 100)}
    with pytest.raises(PortalError, match="from must be between 10 and 100, got 5"):
        plan("t", {"mode": "range", "partition": "0", "from": "5"}, bounds)


# ------------------------------------------------------------------ scanning


def test_holes_are_skipped_and_counted_as_scanned():
    reader = FakeReader({0: log_of(0, [b"a", None, None, b"b", None])})
    view = scan(reader, a_plan({0: (0, 5)}))
    assert [r["offset"] for r in view["records"]] == [0, 3]
    assert view["scan"]["offsets"] == 5 and view["next"] is None


def test_the_byte_budget_is_split_between_partitions():
    reader = FakeReader({p: log_of(p, [b"v" * 70] * 10) for p in range(2)})  # 100 B frames
    view = scan(reader, a_plan({0: (0, 10), 1: (0, 10)}, scan_bytes=1024))
    assert view["scan"]["offsets"] == 12 and view["scan"]["bytes"] == 1200  # 6 x 100 each
    assert view["next"] == "0:6,1:6" and view["scan"]["stopped"] == ["bytes"]


def test_newest_first_shows_the_newest_of_every_partition():
    reader = FakeReader({0: log_of(0, [b"a"] * 4, [10, 20, 30, 40]),
                         1: log_of(1, [b"b"] * 2, [25, 35])})
    view = scan(reader, a_plan({0: (0, 4), 1: (0, 2)}, limit=3, newest=True))
    assert [(r["partition"], r["offset"]) for r in view["records"]] == [(0, 3), (1, 1), (0, 2)]
    assert view["next"] == "0:2,1:1"  # the older ones (issue 49: there was no next)
    older = scan(reader, a_plan({0: (0, 2), 1: (0, 1)}, limit=3, newest=True))
    assert [(r["partition"], r["offset"]) for r in older["records"]] == [(1, 0), (0, 1), (0, 0)]
    assert older["next"] is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 50), st.booleans()), max_size=12),
                min_size=1, max_size=3),
       st.integers(1, 4))
def test_paging_with_next_shows_every_match_once(partitions, limit):
    """Timestamps in any order, some records filtered out: following next from the first page
    to the last shows each matching record exactly once."""
    logs = {p: [Record(b"yes" if keep else b"no", None, None, {}, ts, i, p)
                for i, (ts, keep) in enumerate(rows)] for p, rows in enumerate(partitions)}
    reader = FakeReader(logs)
    wanted = Filters(value=b"yes")
    ranges = {p: (0, len(rows)) for p, rows in logs.items()}
    seen: list[tuple[int, int]] = []
    for _ in range(100):
        view = scan(reader, a_plan(ranges, limit=limit, filters=wanted))
        seen += [(r["partition"], r["offset"]) for r in view["records"]]
        if view["next"] is None:
            break
        starts = dict(tuple(map(int, item.split(":"))) for item in view["next"].split(","))
        ranges = {p: (off, len(logs[p])) for p, off in starts.items()}
    else:
        pytest.fail("next never ended")
    expected = [(p, r.offset) for p, log in logs.items() for r in log if r.value == b"yes"]
    assert sorted(seen) == sorted(expected) and len(seen) == len(set(seen))
