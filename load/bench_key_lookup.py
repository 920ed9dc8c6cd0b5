"""Lookup by key on a partition of 10 M records (docs/lookup.md): p50/p99 through the store and
through a broker's gRPC, against one full scan of the partition.

Run ``python -m load.bench_key_lookup``; it prints one JSON object on stdout (progress on
stderr). A real master and broker start on 127.0.0.1; the topic (1 partition) gets one record
through a producer, then the broker stops and the 10 M records are appended through the Store
API straight into its data dir (a producer would take an hour on this machine), with the
broker's shared checkpoint file, so the broker reopens them as its own. Keys: even records
have a key of their own (``u<i>``: an order id), odd ones one of ``--distinct`` shared keys
(``k<(i // 2 * 7919) % distinct>``: 10 records each by default, spread over the whole
partition: every index segment). The bench knows each key's offsets, so every lookup is
checked, not only timed.

Targets (issue 52): a lookup's p99 <= 20 ms on 10 M records. The full scan is the same
question answered without the key index: every frame read and its key compared (numpy over
whole reads: the fastest scan this code base has).
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TOPIC = "keys"
STRIDE = 7919  # a prime: i -> i * STRIDE % distinct visits every key records/distinct times
BATCH = 1000
TS0 = 1_700_000_000_000


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def key_of(i: int, distinct: int) -> bytes:
    """Even records: a key of their own (an order id); odd ones: one of ``distinct`` keys
    shared by records/2/distinct records each (an account's events)."""
    return b"u%09d" % i if i % 2 == 0 else b"k%07d" % (i // 2 * STRIDE % distinct)


def offsets_of(k: int, records: int, distinct: int, first: int) -> list[int]:
    """The offsets whose record has shared key ``k`` (record i is at offset first + i)."""
    j0 = k * pow(STRIDE, -1, distinct) % distinct
    return [first + 2 * j + 1 for j in range(j0, records // 2, distinct)]


def build(store_root: Path, checkpoints: Path, topic_id: int, records: int, distinct: int,
          value_bytes: int) -> dict[str, Any]:
    from lib.records import Record, encode_batch
    from storage.checkpoints import CheckpointFile
    from storage.store import Store

    cps = CheckpointFile(checkpoints, 1.0)
    store = Store(store_root, TOPIC, 0, [0], checkpoint=cps.slot(TOPIC, topic_id, 0,
                                                                   store_root / TOPIC / "0"))
    first = store.latest(0)
    value = b"v" * value_bytes
    t0 = time.perf_counter()
    for start in range(0, records, BATCH):
        store.append(0, encode_batch([Record(value, key=key_of(i, distinct), timestamp=TS0 + i)
                                      for i in range(start, min(records, start + BATCH))]))
        if start % 1_000_000 == 0:
            log(f"built {start:,} records")
    store.flush()
    built_s = time.perf_counter() - t0
    return {"store": store, "checkpoints": cps, "first": first, "build_s": round(built_s, 1)}


def percentiles(samples: list[float]) -> dict[str, float]:
    ms = np.array(samples) * 1e3
    return {"n": len(ms), "p50_ms": round(float(np.percentile(ms, 50)), 3),
            "p99_ms": round(float(np.percentile(ms, 99)), 3),
            "max_ms": round(float(ms.max()), 3)}


def lookups(find, sample: list[tuple[bytes, list[int]]]) -> dict[str, Any]:
    """Time ``find(key) -> offsets`` over ``sample`` (key, the offsets it must answer)."""
    times, wrong = [], 0
    for key, want in sample:
        t = time.perf_counter()
        got = find(key)
        times.append(time.perf_counter() - t)
        wrong += got != want[:64]
    return {**percentiles(times), "wrong_answers": wrong}


def samples(rnd: random.Random, n: int, records: int, distinct: int, first: int
            ) -> dict[str, list[tuple[bytes, list[int]]]]:
    unique = [rnd.randrange(0, records, 2) for _ in range(n)]
    shared = [rnd.randrange(distinct) for _ in range(n)]
    return {"unique_key": [(b"u%09d" % i, [first + i]) for i in unique],
            f"key_on_{records // 2 // distinct}_records":
                [(b"k%07d" % k, offsets_of(k, records, distinct, first)) for k in shared]}


def store_lookups(store, sample: dict, records: int, first: int) -> dict[str, Any]:
    out = {kind: lookups(lambda k: store.find_by_key(0, k, limit=64).offsets.tolist(), keys)
           for kind, keys in sample.items()}
    lo, hi = TS0 + records * 4 // 10, TS0 + records * 5 // 10  # a tenth of the time range
    kind, keys = list(sample.items())[-1]
    window = [(k, [o for o in want if lo <= TS0 + o - first <= hi]) for k, want in keys[:200]]
    out[kind + "_time_window"] = lookups(
        lambda k: store.find_by_key(0, k, since_ms=lo, until_ms=hi).offsets.tolist(), window)
    return out


def full_scan(store, key: bytes) -> dict[str, Any]:
    """The lookup without the index: read every frame, compare keys (numpy per read)."""
    from storage.keys import frame_keys

    t = time.perf_counter()
    offset, latest, hits, scanned = store.earliest(0), store.latest(0), [], 0
    while offset < latest:
        res = store.read(0, offset, 8 << 20)
        starts = np.concatenate([[0], np.cumsum(res.sizes[:-1], dtype=np.int64)])
        ks, ke = frame_keys(res.frames, starts)
        near = np.flatnonzero(ke - ks == len(key))
        hits += [int(res.offsets[i]) for i in near.tolist()
                 if res.frames[ks[i]:ke[i]] == key]
        scanned += len(res)
        offset = res.next_offset
    return {"seconds": round(time.perf_counter() - t, 2), "records": scanned,
            "found": len(hits)}


def grpc_lookups(masters: str, sample: dict) -> dict[str, Any]:
    from lib.consumer.reader import MessageReader

    with MessageReader(masters) as reader:
        t = time.perf_counter()
        while True:  # the restarted broker: registered, then given the partition, then opened
            try:
                reader.find_by_key(TOPIC, b"k0000000", partitions=[0])
                break
            except Exception:  # noqa: BLE001 - not served yet
                if time.perf_counter() - t > 300:
                    raise
        serving_s = time.perf_counter() - t

        def find(k: bytes) -> list[int]:
            return [r.offset for r in reader.find_by_key(TOPIC, k, partitions=[0], limit=64)]
        out = {kind: lookups(find, keys) for kind, keys in sample.items()}
    return {**out, "first_answer_after_restart_s": round(serving_s, 2)}


def run(records: int, distinct: int, lookups: int, value_bytes: int) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from broker.topic_dirs import CHECKPOINTS
    from lib.admin import AdminClient
    from lib.producer.producer import Producer
    from tests.cluster import Cluster

    root = Path(tempfile.mkdtemp(prefix="tubeq-bench-keys-"))
    cluster = Cluster(root / "c")
    rnd = random.Random(52)
    try:
        cluster.start(brokers=1)
        cluster.use_admin_env()
        masters = cluster.master_addresses
        with AdminClient(masters) as admin:
            admin.create_topic(TOPIC, partitions=1, stores=1)
            topic_id = admin.describe_topic(TOPIC).topic_id
        with Producer(masters) as producer:
            producer.send(TOPIC, b"first").result(60)
        broker = cluster.brokers[1]
        broker.stop()
        data_dir = broker.data_dir
        log(f"building {records:,} records in {data_dir}")
        got = build(data_dir / "topics", data_dir / CHECKPOINTS, topic_id, records, distinct,
                    value_bytes)
        store, first = got["store"], got["first"]
        sample = samples(rnd, lookups, records, distinct, first)
        grpc_sample = samples(rnd, lookups, records, distinct, first)  # not in the page cache
        key_files = sum(p.stat().st_size for p in (data_dir / "topics").rglob("*.k[hs]"))
        log("store lookups")
        via_store = store_lookups(store, sample, records, first)
        log("full scan")
        scan = full_scan(store, sample["unique_key"][0][0])
        log(json.dumps({"lookup_store": via_store, "full_scan": scan}))
        store.close()
        got["checkpoints"].close()
        t = time.perf_counter()
        cluster.start_broker(1)
        cluster.wait_brokers_registered(120)
        reopen_s = time.perf_counter() - t
        log("gRPC lookups")
        via_grpc = grpc_lookups(masters, grpc_sample)
    finally:
        cluster.stop_all()
        shutil.rmtree(root, ignore_errors=True)
    worst = max(v["p99_ms"] for part in (via_store, via_grpc) for v in part.values()
                if isinstance(v, dict))
    return {
        "records": records, "shared_keys": distinct, "value_bytes": value_bytes,
        "build_s": got["build_s"], "key_index_bytes": key_files,
        "broker_restart_s": round(reopen_s, 2),
        "lookup_store": via_store, "lookup_grpc": via_grpc, "full_scan": scan,
        "target": {"p99_ms_max": 20, "worst_p99_ms": worst, "met": worst <= 20},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--records", type=int, default=10_000_000)
    p.add_argument("--distinct", type=int, default=500_000,
                   help="shared keys (on the odd records)")
    p.add_argument("--lookups", type=int, default=1000)
    p.add_argument("--value-bytes", type=int, default=64)
    args = p.parse_args(argv)
    print(json.dumps(run(args.records, args.distinct, args.lookups, args.value_bytes),
                     indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
