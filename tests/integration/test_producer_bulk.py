"""Producer.send_batch against a real cluster: one call, one future, every record's offset."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from lib.errors import InvalidArgument, RecordTooLarge
from lib.producer import Producer
from tests.integration.test_producer_cluster import create, fetch_topic

pytestmark = pytest.mark.shared_cluster


def test_send_batch_with_keys_and_tags_stores_every_record_where_its_metadata_says(cluster):
    create(cluster, "bulk", partitions=3)
    n = 20_000
    values = [b"value-%06d" % i for i in range(n)]
    keys = [b"key-%d" % (i % 97) for i in range(n)]
    tags = ["red" if i % 3 == 0 else "" for i in range(n)]
    with Producer(cluster.master_addresses, batch_bytes=64 * 1024) as producer:
        producer.send("bulk", b"before", key=b"key-1")  # per-record sends keep their order
        meta = producer.send_batch("bulk", values, keys=keys, tags=tags).result(30)
        after = producer.send("bulk", b"after", key=b"key-1").result(30)
    assert len(meta) == n and meta.topic == "bulk"
    assert list(meta.partitions) == [zlib.crc32(k) % 3 for k in keys]
    stored = fetch_topic(cluster, "bulk")
    for i in range(0, n, 7):
        rec = stored[int(meta.partitions[i])][int(meta.offsets[i])]
        assert (rec.value, rec.key, rec.tag) == (values[i], keys[i], tags[i] or None)
    p1 = zlib.crc32(b"key-1") % 3
    assert stored[p1][0].value == b"before" and after.offset == len(stored[p1]) - 1
    for p in stored:  # input order kept within each partition
        assert (np.diff(meta.offsets[meta.partitions == p]) > 0).all()
    assert sum(len(r) for r in stored.values()) == n + 2


def test_send_batch_without_keys_goes_to_one_partition_in_order(cluster):
    create(cluster, "bulk-plain", partitions=2)
    values = [b"x" * (i % 300) for i in range(5000)]
    with Producer(cluster.master_addresses, batch_bytes=16 * 1024) as producer:
        meta = producer.send_batch("bulk-plain", values).result(30)
        pinned = producer.send_batch("bulk-plain", values[:10], partition=1).result(30)
    assert len(set(meta.partitions.tolist())) == 1
    p = int(meta.partitions[0])
    assert list(meta.offsets) == list(range(meta.offsets[0], meta.offsets[0] + 5000))
    stored = fetch_topic(cluster, "bulk-plain")
    assert [r.value for r in stored[p][:5000]] == values
    assert set(pinned.partitions.tolist()) == {1}


def test_send_batch_calls_that_share_a_batch_each_get_their_own_offsets(cluster):
    # With a long linger, the runs of 40 calls queue behind each partition's first one and
    # join it (Accumulator.append_run): one batch holds many calls' records, tagged or not.
    create(cluster, "bulk-joined", partitions=3)
    calls = []
    with Producer(cluster.master_addresses, linger_ms=300, batch_bytes=256 * 1024) as producer:
        for c in range(40):
            values = [b"call-%02d-%03d" % (c, i) for i in range(50)]
            keys = [b"k%d" % ((c + i) % 5) for i in range(50)]
            tags = ["even" if i % 2 == 0 else "" for i in range(50)] if c % 2 else None
            calls.append((values, keys, tags,
                          producer.send_batch("bulk-joined", values, keys=keys, tags=tags)))
        metas = [(v, k, t, f.result(30)) for v, k, t, f in calls]
    stored = fetch_topic(cluster, "bulk-joined")
    assert sum(len(r) for r in stored.values()) == 40 * 50
    seen = set()
    for values, keys, tags, meta in metas:
        for i, value in enumerate(values):
            p, offset = int(meta.partitions[i]), int(meta.offsets[i])
            rec = stored[p][offset]
            assert (rec.value, rec.key) == (value, keys[i]) and p == zlib.crc32(keys[i]) % 3
            assert rec.tag == (tags[i] or None if tags else None)
            seen.add((p, offset))
    assert len(seen) == 40 * 50


def test_send_batch_refuses_bad_input_before_sending_anything(cluster):
    create(cluster, "bulk-bad", partitions=1, max_message_bytes=1024)
    with Producer(cluster.master_addresses) as producer:
        with pytest.raises(InvalidArgument, match="at least one"):
            producer.send_batch("bulk-bad", [])
        with pytest.raises(InvalidArgument, match="keys has 1 items for 2 values"):
            producer.send_batch("bulk-bad", [b"a", b"b"], keys=[b"k"])
        with pytest.raises(RecordTooLarge, match="1024"):
            producer.send_batch("bulk-bad", [b"a", b"z" * 2000])
        with pytest.raises(InvalidArgument, match="sequence of values"):
            producer.send_batch("bulk-bad", b"one value")
        assert producer.send_batch("bulk-bad", [b"ok"]).result(30).offsets.tolist() == [0]


def test_send_batch_with_headers_stores_them_per_record_like_send(cluster):
    create(cluster, "bulk-headers", partitions=2)
    values = [b"v%d" % i for i in range(300)]
    headers = [{"n": b"%d" % i, "even": b"1"} if i % 2 == 0 else None for i in range(300)]
    keys = [b"k%d" % (i % 5) for i in range(300)]
    with Producer(cluster.master_addresses) as producer:
        meta = producer.send_batch("bulk-headers", values, keys=keys, tags=["t"] * 300,
                                   headers=headers).result(30)
        with pytest.raises(InvalidArgument, match="headers has 1 items for 300 values"):
            producer.send_batch("bulk-headers", values, headers=[{}])
    stored = fetch_topic(cluster, "bulk-headers")
    for i in range(300):
        rec = stored[int(meta.partitions[i])][int(meta.offsets[i])]
        assert (rec.value, rec.key, rec.tag, rec.headers) == (values[i], keys[i], "t",
                                                               headers[i] or {})
