"""The windows pipeline: event-time window counts with a watermark, exactly once, on Spark."""
from __future__ import annotations

import collections
import json

import pytest

from lib.errors import InvalidArgument
from lib.producer.producer import Producer
from spark_sink.pipelines.windows import WindowSpec, run_windows
from tests.spark.drivers import topic_values

BASE = 1_700_000_000_000  # ms, a multiple of 10 s


def send_events(masters: str, topic: str, times_ms: list[int], keys: list[bytes]) -> None:
    with Producer(masters) as producer:
        for i, (ts, key) in enumerate(zip(times_ms, keys, strict=True)):
            producer.send(topic, b"event-%05d" % i, key=key, timestamp=ts)
        producer.flush(30)


def windows_of(masters: str, topic: str) -> list[dict]:
    return sorted((json.loads(v) for v in topic_values(masters, topic)),
                  key=lambda w: (w["window_start"], w["group"]))


def test_closed_windows_are_counted_once_and_a_rerun_writes_nothing_again(
        spark, masters, new_topic, tmp_path):
    source, target = new_topic(partitions=2), new_topic(partitions=1)
    times = [BASE + i * 100 for i in range(600)]  # 60 s of events, 10 per second
    keys = [b"k%d" % (i % 3) for i in range(600)]
    send_events(masters, source, times, keys)
    send_events(masters, source, [BASE + 200_000], [b"late"])  # moves the watermark past all
    spec = WindowSpec(masters, source, target, str(tmp_path / "ckpt"), window="10 seconds",
                      watermark="30 seconds", by="key", once=True, max_per_trigger=250)
    said: list[str] = []
    run_windows(spark, spec, said.append, interval=0.5)
    expected = collections.Counter((BASE + (t - BASE) // 10_000 * 10_000, k.decode())
                                   for t, k in zip(times, keys, strict=True))
    got = windows_of(masters, target)
    assert {(w["window_start"], w["group"]): w["records"] for w in got} == dict(expected)
    assert all(w["window_end"] - w["window_start"] == 10_000 for w in got)
    assert all(w["bytes"] == w["records"] * len(b"event-00000") for w in got)
    run_windows(spark, spec, said.append)  # same checkpoint: nothing new to close
    assert windows_of(masters, target) == got


def test_bad_pipeline_arguments_are_refused_before_spark_starts(masters):
    with pytest.raises(InvalidArgument, match="--by must be one of"):
        WindowSpec(masters, "a", "b", "/tmp/x", by="value")
    with pytest.raises(InvalidArgument, match="--checkpoint is required"):
        WindowSpec(masters, "a", "b", "")


def test_tubeq_spark_run_windows_runs_the_pipeline_once(spark, masters, new_topic, tmp_path):
    from click.testing import CliRunner

    from lib.cli.main import main as tubeq

    source, target = new_topic(partitions=1), new_topic(partitions=1)
    send_events(masters, source, [BASE + i * 1000 for i in range(20)] + [BASE + 100_000],
                [b"a"] * 21)
    out = CliRunner().invoke(tubeq, ["--masters", masters, "spark", "run", "windows",
                                     "--source", source, "--target", target, "--checkpoint",
                                     str(tmp_path / "ckpt"), "--by", "none", "--once"])
    assert out.exit_code == 0, out.output
    assert "windows written to" in out.output
    got = windows_of(masters, target)
    assert [(w["window_start"] - BASE, w["records"], w["group"]) for w in got] == \
        [(0, 10, None), (10_000, 10, None)]
