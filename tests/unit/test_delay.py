"""Delayed messages without processes: the due-time rules (lib/delay.py) and the time-ordered
index on LMDB (broker/delay_index.py)."""
from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from broker.delay_index import DONE_DTYPE, DelayIndex, pack_done, unpack_done
from lib.delay import (
    H_PARTITION,
    H_SENT,
    H_TOPIC,
    RETENTION_MARGIN_MS,
    check_due,
    delay_partition,
    due_ms,
    target_headers,
    target_of,
)
from lib.errors import InvalidArgument

NOW = 1_800_000_000_000


def test_due_times_from_a_delay_or_a_date():
    assert due_ms(dt.timedelta(seconds=1.5), None, NOW) == NOW + 1500
    assert due_ms(2, None, NOW) == NOW + 2000
    at = dt.datetime.fromtimestamp(NOW / 1000 + 60, dt.UTC)
    assert due_ms(None, at, NOW) == NOW + 60_000
    assert due_ms(None, NOW / 1000 + 5, NOW) == NOW + 5000
    assert due_ms(None, NOW / 1000 - 5, NOW) == NOW - 5000  # in the past: due at once


@pytest.mark.parametrize(("delay", "at", "match"), [
    (-1, None, "must not be negative"),
    (float("nan"), None, "timedelta or seconds"),
    ("5", None, "timedelta or seconds"),
    (1, 5.0, "not both"),
    (None, dt.datetime(2030, 1, 1), "timezone-aware"),
    (None, "tomorrow", "aware datetime or epoch seconds"),
])
def test_bad_delays_name_the_problem(delay, at, match):
    with pytest.raises(InvalidArgument, match=match):
        due_ms(delay, at, NOW)


def test_the_longest_delay_comes_from_the_delay_topics_retention():
    retention = 3_600_000 + RETENTION_MARGIN_MS  # max_delay_ms of an hour
    check_due(NOW + 3_600_000, NOW, retention)
    with pytest.raises(InvalidArgument, match="over the cluster's maximum of 3600 s") as info:
        check_due(NOW + 7_200_000, NOW, retention)
    assert info.value.details["limit_ms"] == 3_600_000


def test_target_headers_round_trip_and_reserved_names_are_refused():
    headers = target_headers("orders", 3, NOW, {"trace": b"t1"})
    assert target_of(headers) == ("orders", 3)
    assert headers["trace"] == b"t1" and headers[H_SENT] == str(NOW).encode()
    with pytest.raises(InvalidArgument, match="reserved"):
        target_headers("orders", 3, NOW, {H_TOPIC: b"x"})
    with pytest.raises(InvalidArgument, match="needs headers"):
        target_of({H_TOPIC: b"orders"})
    with pytest.raises(InvalidArgument, match="needs headers"):
        target_of({H_TOPIC: b"orders", H_PARTITION: b"three"})


def test_one_delay_partition_per_target_partition():
    picks = {delay_partition("orders", p, 4) for p in range(64)}
    assert picks == {0, 1, 2, 3}
    assert delay_partition("orders", 7, 4) == delay_partition("orders", 7, 4)


def test_done_records_pack_their_entries():
    entries = np.array([(NOW, 5), (NOW + 1, 9)], DONE_DTYPE)
    assert np.array_equal(unpack_done(pack_done(entries)), entries)
    with pytest.raises(InvalidArgument, match="multiple of 16 bytes"):
        unpack_done(b"x" * 17)


@pytest.fixture
def index(tmp_path):
    idx = DelayIndex(tmp_path / "delay-index")
    yield idx
    idx.close()


def test_the_index_answers_due_records_in_due_order_per_partition(index):
    state = index.update(0, {"indexed_to": 4}, [(NOW + 30, 0, b"c"), (NOW + 10, 1, b"a"),
                                                (NOW + 20, 2, b"b"), (NOW + 10, 3, b"a2")])
    index.update(1, {"indexed_to": 1}, [(NOW, 0, b"other partition")])
    assert state["pending"] == 4 and index.state(0)["indexed_to"] == 4
    assert [v for *_, v in index.due(0, NOW + 20, 100, 1 << 20)] == [b"a", b"a2", b"b"]
    assert index.due(0, NOW + 9, 100, 1 << 20) == []
    assert [v for *_, v in index.due(0, NOW + 99, 2, 1 << 20)] == [b"a", b"a2"]  # limit
    assert len(index.due(0, NOW + 99, 100, 1)) == 1  # at least one, then the byte cap
    assert index.next_due(0) == NOW + 10 and index.next_due(2) is None


def test_done_entries_leave_the_index_and_the_count_follows(index):
    index.update(0, {"indexed_to": 3}, [(NOW, 0, b"a"), (NOW + 1, 1, b"b"), (NOW + 2, 2, b"c")])
    again = index.update(0, {**index.state(0), "indexed_to": 4}, [(NOW, 0, b"a")],
                         np.array([(NOW + 1, 1)], DONE_DTYPE))
    assert again["pending"] == 2, "a re-read entry is not counted twice"
    index.remove(0, np.array([(NOW, 0), (NOW + 99, 7)], DONE_DTYPE))  # 7 was never there
    assert index.state(0)["pending"] == 1
    assert [o for _, o, _ in index.due(0, NOW + 99, 10, 1 << 20)] == [2]


def test_forget_drops_a_cut_tail_or_the_whole_partition(index, tmp_path):
    index.update(0, {"indexed_to": 6}, [(NOW + i % 3, i, b"x") for i in range(6)])
    index.update(1, {"indexed_to": 1}, [(NOW, 0, b"y")])
    index.forget(0, 4)
    assert sorted(o for _, o, _ in index.due(0, NOW + 9, 99, 1 << 20)) == [0, 1, 2, 3]
    assert index.state(0) == {"indexed_to": 4, "pending": 4}
    index.forget(0)
    assert index.state(0) == {} and index.due(0, NOW + 9, 99, 1 << 20) == []
    assert index.state(1)["pending"] == 1, "other partitions keep theirs"
    index.close()
    reopened = DelayIndex(tmp_path / "delay-index")
    assert reopened.state(1)["pending"] == 1 and reopened.next_due(1) == NOW
    reopened.close()


def test_an_index_that_cannot_be_opened_is_built_again(tmp_path):
    path = tmp_path / "delay-index"
    path.mkdir()
    (path / "data.mdb").write_bytes(b"not an lmdb file" * 512)
    index = DelayIndex(path)
    assert index.state(0) == {}
    index.close()
