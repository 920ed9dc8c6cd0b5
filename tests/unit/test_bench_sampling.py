"""How many records of a `tubeq bench produce` run carry an ack-latency callback."""
from __future__ import annotations

from lib.cli.bench import LATENCY_SAMPLES, latency_every


def test_about_latency_samples_records_are_sampled_whatever_the_count():
    assert latency_every(1) == latency_every(LATENCY_SAMPLES) == 1  # short runs: every record
    assert latency_every(300_000) == 150  # 2,000 samples
    assert latency_every(600_000) == latency_every(10**9) == 256  # never fewer than 1 in 256
    for count in (1, 999, 4099, 600_001):
        assert len(range(0, count, latency_every(count))) >= min(count, LATENCY_SAMPLES)
