"""Retry policy and move headers without processes (lib/retry.py), and the consumer settings
that carry them (lib/consumer/base.py)."""
from __future__ import annotations

import pytest

from lib.consumer.base import retry_policy
from lib.delay import H_TOPIC as H_DELAY_TOPIC
from lib.errors import ConfigError, InvalidArgument
from lib.records import Record
from lib.retry import (
    BACKOFF_S,
    H_ATTEMPTS,
    H_ERROR,
    H_GROUP,
    H_OFFSET,
    H_PARTITION,
    H_TOPIC,
    MAX_ERROR_CHARS,
    RetryPolicy,
    attempts_of,
    dead_letter_topic,
    moved_headers,
    origin_of,
    retry_topic,
)


def test_backoff_follows_the_levels_and_repeats_the_last():
    policy = RetryPolicy()
    assert policy.max_attempts == 16 and BACKOFF_S[:4] == (1, 5, 10, 30)
    assert [policy.delay_for(n) for n in (1, 2, 3)] == [1.0, 5.0, 10.0]
    assert policy.delay_for(99) == float(BACKOFF_S[-1])
    assert RetryPolicy(backoff_s=(0.5,)).delay_for(7) == 0.5


@pytest.mark.parametrize(("bad", "match"), [
    ({"max_attempts": 0}, "max_attempts must be within 1..1000"),
    ({"max_attempts": True}, "max_attempts"),
    ({"backoff_s": ()}, "backoff_s must be"),
    ({"backoff_s": (1, -2)}, "backoff_s must be"),
    ({"backoff_s": (8 * 86400,)}, "backoff_s must be"),
])
def test_a_bad_policy_names_its_field(bad, match):
    with pytest.raises(InvalidArgument, match=match):
        RetryPolicy(**bad).validate()


def test_the_retry_setting_of_a_consumer():
    assert retry_policy(None) is None and retry_policy(False) is None
    assert retry_policy(True) == RetryPolicy()
    given = RetryPolicy(max_attempts=3, backoff_s=(1, 2))
    assert retry_policy(given) is given
    assert retry_policy({"max_attempts": 3, "backoff_s": [1, 2], "dead_letter_topic": "",
                         "ordered": False}) == given  # what dataclasses.asdict made of it
    with pytest.raises(ConfigError, match="retry must be True, False or a"):
        retry_policy("yes")


def test_names_of_a_groups_topics():
    assert retry_topic("billing") == "billing.retry"
    assert dead_letter_topic("billing") == "billing.dlq"
    assert dead_letter_topic("billing", "poison") == "poison"


def test_a_moved_record_says_where_it_came_from_and_why():
    first = Record(b"v", b"k", "t", {"trace": b"1"}, 5, offset=42, partition=3, topic="orders")
    headers = moved_headers(first, "billing", 1, ValueError("bad amount"))
    assert headers == {"trace": b"1", H_TOPIC: b"orders", H_PARTITION: b"3",
                       H_OFFSET: b"42", H_ATTEMPTS: b"1", H_GROUP: b"billing",
                       H_ERROR: b"ValueError: bad amount"}
    # it comes back through the retry topic (a delayed record: its delay headers too)
    again = Record(b"v", b"k", "t", {**headers, H_DELAY_TOPIC: b"billing.retry"}, 6,
                   offset=0, partition=0, topic="billing.retry")
    assert origin_of(again) == ("orders", 3, 42) and attempts_of(again.headers) == 1
    later = moved_headers(again, "billing", 2, "x" * 5000)
    assert H_DELAY_TOPIC not in later, "a retry's own delay headers are not carried on"
    assert (later[H_TOPIC], later[H_OFFSET], later[H_ATTEMPTS]) == (b"orders", b"42", b"2")
    assert len(later[H_ERROR]) == MAX_ERROR_CHARS
    assert origin_of(first) == ("orders", 3, 42) and attempts_of(first.headers) == 0
    assert attempts_of({H_ATTEMPTS: b"garbage"}) == 0
