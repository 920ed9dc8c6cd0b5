"""The exactly-once sink when a broker dies: SIGKILL mid-stream, restart, rerun the query."""
from __future__ import annotations

import time

from lib.admin import AdminClient
from tests.cluster import Cluster
from tests.spark.drivers import finish_driver, produce, start_driver, topic_values


def test_broker_killed_mid_stream_and_restarted_leaves_every_row_once(tmp_path):
    cluster = Cluster(tmp_path / "cluster").start(1)
    try:
        masters = cluster.master_addresses
        with AdminClient(masters) as admin:  # sync: acknowledged means on disk, on both sides
            admin.create_topic("faults-in", partitions=2, durability="sync")
            admin.create_topic("faults-out", partitions=2, durability="sync")
        sent = produce(masters, "faults-in", 2_000)  # 4 micro-batches of 500
        ckpt = str(tmp_path / "ckpt")
        driver = start_driver(masters, "faults-in", "faults-out", ckpt, tmp_path / "run0.log")
        try:
            deadline = time.monotonic() + 240
            while len(topic_values(masters, "faults-out")) < 500:  # the first micro-batch is in
                assert driver.poll() is None, (tmp_path / "run0.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "the stream made no progress"
                time.sleep(0.2)
            broker = cluster.broker_process(1)
            broker.kill()  # mid-stream: a stage, a commit or a fetch is cut
            time.sleep(1.0)
            broker.start()
            cluster.wait_brokers_registered()
        finally:  # the query ends: it failed over the lost broker, or it finished
            returncode = finish_driver(driver)
        runs = 1
        while returncode != 0:  # Spark replays what was not committed
            assert runs < 4, (tmp_path / f"run{runs - 1}.log").read_text()[-3000:]
            driver = start_driver(masters, "faults-in", "faults-out", ckpt,
                             tmp_path / f"run{runs}.log")
            returncode = finish_driver(driver)
            runs += 1
        got = topic_values(masters, "faults-out")
        assert sorted(got) == sorted(b"seen:" + v for v in sent)
    finally:
        cluster.stop_all()
