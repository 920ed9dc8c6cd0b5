"""How the producer cuts one broker's ready batches into ProduceMany calls."""
from __future__ import annotations

from lib.produce_wire import MAX_ENTRIES
from lib.producer.calls import MANY_ENTRY_MAX_BYTES, MANY_MAX_BYTES, runs_of


def test_small_batches_share_calls_within_the_byte_and_entry_limits():
    quarter = MANY_ENTRY_MAX_BYTES // 4
    count = 2 * MANY_MAX_BYTES // quarter + 3
    runs = runs_of(list(range(count)), [quarter] * count)
    assert [x for run in runs for x in run] == list(range(count))  # order kept
    assert all(len(run) * quarter <= MANY_MAX_BYTES for run in runs) and len(runs) == 3
    many = runs_of(list(range(MAX_ENTRIES + 1)), [1] * (MAX_ENTRIES + 1))
    assert [len(run) for run in many] == [MAX_ENTRIES, 1]


def test_a_large_batch_goes_alone():
    """Its call costs little beside its bytes, and a ProduceMany would copy them again."""
    sizes = [10, MANY_ENTRY_MAX_BYTES, 5, MANY_MAX_BYTES + 1, 3]
    assert runs_of(list("abcde"), sizes) == [["b"], ["d"], ["a", "c", "e"]]
    assert runs_of([], []) == []
