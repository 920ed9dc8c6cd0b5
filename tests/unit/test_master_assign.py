"""Sticky balanced assignment: every partition once, even counts, previous owners kept."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from master.assign import assign

TOPICS = ["a", "b", "c"]


def owners(result, topic):
    return {p: m for m, ts in result.items() for p in ts.get(topic, [])}


def check_balanced(result, subs, counts):
    for topic, n in counts.items():
        members = [m for m, ts in subs.items() if topic in ts]
        if not members:
            continue
        got = [p for m in members for p in result[m].get(topic, [])]
        assert sorted(got) == list(range(n)), "each partition exactly once"
        sizes = [len(result[m].get(topic, [])) for m in members]
        assert max(sizes) - min(sizes) <= 1
    for m, ts in result.items():
        assert set(ts) <= set(subs[m]), "only subscribed topics"


def test_two_members_split_six_partitions_evenly():
    result = assign({"m1": ["t"], "m2": ["t"]}, {"t": 6})
    assert result == {"m1": {"t": [0, 1, 2]}, "m2": {"t": [3, 4, 5]}}


def test_third_member_takes_two_partitions_and_the_rest_stay():
    before = {"m1": {"t": [0, 1, 2]}, "m2": {"t": [3, 4, 5]}}
    after = assign({"m1": ["t"], "m2": ["t"], "m3": ["t"]}, {"t": 6}, before)
    assert [len(after[m]["t"]) for m in ("m1", "m2", "m3")] == [2, 2, 2]
    assert set(after["m1"]["t"]) <= {0, 1, 2} and set(after["m2"]["t"]) <= {3, 4, 5}


def test_leaving_member_partitions_go_to_the_others_only():
    before = {"m1": {"t": [0, 1]}, "m2": {"t": [2, 3]}, "m3": {"t": [4, 5]}}
    after = assign({"m1": ["t"], "m3": ["t"]}, {"t": 6}, before)
    assert set(after["m1"]["t"]) >= {0, 1} and set(after["m3"]["t"]) >= {4, 5}
    check_balanced(after, {"m1": ["t"], "m3": ["t"]}, {"t": 6})


def test_unknown_topics_are_skipped_and_unsubscribed_members_get_nothing():
    result = assign({"m1": ["t", "gone"], "m2": ["u"]}, {"t": 2, "u": 1})
    assert result == {"m1": {"t": [0, 1]}, "m2": {"u": [0]}}


def test_more_members_than_partitions_leaves_some_empty():
    result = assign({f"m{i}": ["t"] for i in range(5)}, {"t": 2})
    assert sum(len(ts.get("t", [])) for ts in result.values()) == 2


def test_grown_topic_keeps_old_owners():
    before = {"m1": {"t": [0, 1]}, "m2": {"t": [2, 3]}}
    after = assign({"m1": ["t"], "m2": ["t"]}, {"t": 8}, before)
    assert {0, 1} <= set(after["m1"]["t"]) and {2, 3} <= set(after["m2"]["t"])
    check_balanced(after, {"m1": ["t"], "m2": ["t"]}, {"t": 8})


subscriptions = st.dictionaries(
    st.sampled_from([f"m{i}" for i in range(8)]),
    st.lists(st.sampled_from(TOPICS), min_size=1, max_size=3, unique=True),
    min_size=1, max_size=8)
counts = st.fixed_dictionaries({t: st.integers(1, 40) for t in TOPICS})


@settings(max_examples=200, deadline=None)
@given(subscriptions, counts, subscriptions, st.randoms(use_true_random=False))
def test_assignment_is_balanced_complete_and_sticky(subs, n, old_subs, rnd):
    previous = assign(old_subs, n)
    result = assign(subs, n, previous)
    check_balanced(result, subs, n)
    assert assign(subs, n, previous) == result, "deterministic"
    assert assign(subs, n, result) == result, "a balanced assignment is kept as it is"
    for topic in TOPICS:
        members = sorted(m for m, ts in subs.items() if topic in ts)
        if not members:
            continue
        # optimum: members with the most valid previous partitions get the larger quotas
        prev_own = owners(previous, topic)
        kept_before = sorted((sum(1 for m2 in prev_own.values() if m2 == m) for m in members),
                             reverse=True)
        base, extra = divmod(n[topic], len(members))
        best = sum(min(k, base + (1 if i < extra else 0)) for i, k in enumerate(kept_before))
        new_own = owners(result, topic)
        kept = sum(1 for p, m in new_own.items() if prev_own.get(p) == m)
        assert kept == best
