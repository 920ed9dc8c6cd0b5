"""The retry rule of the exactly-once sink's stage and commit (lib/sink_routes.py ``Retry``):
an error that points at the route is retried until the budget after the first failure is
spent (a failover takes the master seconds), another retriable one a few times only, a final
one never."""
from __future__ import annotations

import time

import pytest

from lib.errors import (
    InvalidArgument,
    PartitionNotHosted,
    RequestTimedOut,
    SinkStagingFull,
    Unavailable,
)
from lib.sink_routes import OTHER_RETRIES, Retry


def attempts_until_raised(retry: Retry, error) -> tuple[int, float]:
    started, n = time.monotonic(), 0
    with pytest.raises(type(error)):
        while True:
            n += 1
            retry.after(error)
    return n, time.monotonic() - started


def test_a_final_error_is_raised_at_once():
    n, took = attempts_until_raised(Retry(10.0), InvalidArgument("bad"))
    assert n == 1 and took < 0.05


def test_a_route_error_is_retried_until_the_budget_is_spent():
    n, took = attempts_until_raised(Retry(4.0), Unavailable("broker gone"))
    assert n > OTHER_RETRIES + 1  # more than a fixed count: 0.1, 0.2, 0.4, 0.8, 1, 1 s
    assert 3.0 <= took <= 4.5


@pytest.mark.parametrize("error", [Unavailable("broker gone"), PartitionNotHosted("moved"),
                                   RequestTimedOut("no answer")])
def test_route_errors_do_not_use_up_the_few_other_retries(error):
    retry = Retry(30.0)
    retry.delay = 0.0  # no sleeping in a unit test
    for _ in range(OTHER_RETRIES + 3):
        retry.after(error)
    assert retry.others == 0


def test_other_retriable_errors_get_a_few_retries_only():
    n, took = attempts_until_raised(Retry(30.0), SinkStagingFull("full", used=1, limit=1))
    assert n == OTHER_RETRIES + 1
    assert took < 5.0
