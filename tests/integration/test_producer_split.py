"""A producer whose batches are larger than its broker's ``max_batch_bytes``: the refused batch
goes out again in pieces (lib/producer/split.py) and nothing is lost, duplicated or reordered,
on every send path (plain values, keyed records, send_batch), idempotent or not, acks 1 or all.
"""
from __future__ import annotations

import logging

import numpy as np
import pytest

from lib.producer import Producer
from tests.integration.test_producer_cluster import create, fetch_topic

# A topic's batch limit is the larger of the broker's max_batch_bytes and the topic's
# max_message_bytes + 64 KiB (broker/config.py topic_store_config): 68 KiB here.
MAX_MESSAGE = 4096
PRODUCER_BATCH = 1024 * 1024  # the producer's batch_bytes: 15 times the topic's limit


@pytest.fixture
def small_batches(replicated_cluster):
    """One master and one broker refusing batches over 32 KiB (68 KiB for the topics here)."""
    return replicated_cluster(1, store={"max_batch_bytes": 32 * 1024,
                                        "max_message_bytes": MAX_MESSAGE,
                                        "cache_block_bytes": 2 * PRODUCER_BATCH})


@pytest.mark.parametrize("idempotent,acks", [(True, "all"), (False, "1")])
def test_plain_and_keyed_sends_over_the_brokers_batch_limit_all_land_once_in_order(
        small_batches, idempotent, acks, caplog):
    create(small_batches, "big-batches", partitions=2, max_message_bytes=MAX_MESSAGE)
    plain = [b"plain-%05d-" % i + b"p" * (i % 3000) for i in range(3000)]
    keyed = [b"keyed-%05d-" % i + b"k" * 1000 for i in range(1000)]
    with caplog.at_level(logging.INFO, logger="tubeq.producer"), \
            Producer(small_batches.master_addresses, batch_bytes=PRODUCER_BATCH,
                     linger_ms=50, idempotent=idempotent, acks=acks) as producer:
        futures = [producer.send("big-batches", v) for v in plain]
        futures += [producer.send("big-batches", v, key=b"k%d" % (i % 7), tag="t")
                    for i, v in enumerate(keyed)]
        producer.flush(60)
        metas = [f.result(0) for f in futures]
        assert producer.metrics()["records_failed"] == 0
    assert any("producer.batch_split" in r.getMessage() for r in caplog.records), \
        "no batch was split: the test did not exercise what it names"
    stored = fetch_topic(small_batches, "big-batches")
    for value, meta in zip(plain + keyed, metas, strict=True):
        assert stored[meta.partition][meta.offset].value == value
    for p, records in stored.items():  # every record once, and each partition in send order
        assert len({(m.partition, m.offset) for m in metas if m.partition == p}) == len(records)
        mine = [m.offset for m in metas if m.partition == p]
        assert sorted(mine) == list(range(len(records)))
    for mine in (metas[:len(plain)], metas[len(plain):]):  # each kind was sent in order
        for p in {m.partition for m in mine}:
            offsets = [m.offset for m in mine if m.partition == p]
            assert offsets == sorted(offsets)

def test_send_batch_over_the_brokers_batch_limit_maps_every_offset(small_batches):
    create(small_batches, "big-bulk", partitions=1, max_message_bytes=MAX_MESSAGE)
    values = [b"bulk-%05d-" % i + b"b" * (i % 4000) for i in range(2000)]
    with Producer(small_batches.master_addresses, batch_bytes=PRODUCER_BATCH,
                  idempotent=True) as producer:
        meta = producer.send_batch("big-bulk", values).result(60)
        after = producer.send("big-bulk", b"after").result(30)
    stored = fetch_topic(small_batches, "big-bulk")[0]
    assert meta.offsets.tolist() == list(range(2000))
    assert [r.value for r in stored] == values + [b"after"]
    assert after.offset == 2000
    assert np.all(np.diff(meta.offsets) == 1)
