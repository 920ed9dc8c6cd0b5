"""A Spark driver SIGKILLed in the middle of an exactly-once stream and started again on its
checkpoint leaves every row in the target topic once (spark_sink/sink.py)."""
from __future__ import annotations

import time

from tests.spark.drivers import finish_driver, produce, start_driver, topic_values


def test_driver_killed_mid_stream_and_restarted_leaves_every_row_exactly_once(
        masters, new_topic, tmp_path):
    source, target = new_topic(partitions=2), new_topic(partitions=2)
    sent = produce(masters, source, 2_000)  # 4 micro-batches of 500
    ckpt = str(tmp_path / "ckpt")
    first = start_driver(masters, source, target, ckpt, tmp_path / "first.log")
    try:
        deadline = time.monotonic() + 240
        while len(topic_values(masters, target)) < 500:  # the first micro-batch is in
            assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the stream made no progress"
            time.sleep(0.2)
    finally:
        finish_driver(first, timeout=0)  # SIGKILLed now: its Python and its JVM
    landed = len(topic_values(masters, target))
    assert landed < len(sent), "the driver finished before it was killed: nothing was tested"
    second = start_driver(masters, source, target, ckpt, tmp_path / "second.log")
    assert finish_driver(second) == 0, (tmp_path / "second.log").read_text()[-3000:]
    got = topic_values(masters, target)
    assert len(got) == len(sent)
    assert sorted(got) == sorted(b"seen:" + v for v in sent)
