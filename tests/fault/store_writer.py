"""Crash-test child: opens a Store and appends batches forever until it is killed.

Run as ``python tests/fault/store_writer.py --dir D --durability sync|async --run R`` (and
optionally ``--cache-block-bytes N --pace-ms MS``) with the repo root on PYTHONPATH. One thread
per partition appends batches of records whose content is a pure function of (partition, run,
sequence number), so the parent test can rebuild every frame byte for byte. Protocol on
stdout (one ``os.write`` per line: unbuffered, and atomic on a pipe):

    opening                     about to open the store (recovery runs now)
    start <next0> <next1> ...   store open; the next offset of each partition (run's first)
    <partition> <base> <last>   one append returned (an acknowledgement)

The test module imports the helpers below (config, record builder) from this file too.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import threading
import time

from lib.records import Record, encode_batch
from storage.config import StoreConfig

TOPIC = "crash"
STORE_ID = 0
PARTITIONS = (0, 1, 2)
MAX_RECORDS_PER_BATCH = 12

# Small blocks, segments and intervals so a few seconds of appends roll data and index segments,
# swap many cache blocks and write many checkpoints (recovery starts from one, or from scratch).
CACHE_BLOCK_BYTES = 1 << 15
CACHE_FLUSH_INTERVAL_MS = 50
_FILL = bytes(range(251)) * 3


def config(durability: str, cache_block_bytes: int = CACHE_BLOCK_BYTES) -> StoreConfig:
    return StoreConfig(
        durability=durability,  # type: ignore[arg-type]
        cache_block_bytes=cache_block_bytes,
        cache_flush_interval_ms=CACHE_FLUSH_INTERVAL_MS,
        max_batch_bytes=1 << 14,
        max_message_bytes=1 << 12,
        segment_bytes=max(1 << 18, cache_block_bytes),
        index_segment_entries=4096,
        fsync_interval_ms=100,
        checkpoint_interval_ms=100,
    )


def make_record(partition: int, run: int, seq: int) -> Record:
    """The seq-th record a writer of ``run`` appends to ``partition`` (deterministic)."""
    head = f"p{partition}-r{run}-s{seq}|".encode()
    filler = _FILL[seq % 251:seq % 251 + seq * 37 % 300]
    return Record(
        value=head + filler,
        key=None if seq % 5 == 0 else f"k{seq}".encode(),
        tag=("even", "odd", None)[seq % 3],
        headers={"h": str(seq).encode()} if seq % 4 == 0 else {},
        timestamp=1_700_000_000_000 + seq,
    )


def parse_value(value: bytes) -> tuple[int, int, int]:
    """(partition, run, seq) encoded at the start of a record value."""
    head = value.split(b"|", 1)[0].decode()
    p, r, s = head.split("-")
    return int(p[1:]), int(r[1:]), int(s[1:])


def _say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def _append_forever(store, partition: int, run: int, first: int, seed: int,
                    pace_s: float) -> None:
    rng = random.Random(seed)
    seq = 0
    try:
        while True:
            if pace_s:
                time.sleep(pace_s)
            n = rng.randint(1, MAX_RECORDS_PER_BATCH)
            batch = encode_batch([make_record(partition, run, seq + i) for i in range(n)])
            base, last = store.append(partition, batch)
            if (base, last) != (first + seq, first + seq + n - 1):
                raise AssertionError(f"p{partition}: appended seq {seq}+{n} got {base}..{last}, "
                                     f"expected {first + seq}..{first + seq + n - 1}")
            _say(f"{partition} {base} {last}")
            seq += n
    except BaseException as exc:  # noqa: BLE001 - any failure must end the child visibly
        print(f"writer p{partition} failed: {exc!r}", file=sys.stderr, flush=True)
        os._exit(3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--durability", choices=("sync", "async"), required=True)
    ap.add_argument("--run", type=int, default=0)
    ap.add_argument("--cache-block-bytes", type=int, default=CACHE_BLOCK_BYTES)
    ap.add_argument("--pace-ms", type=float, default=0.0, help="sleep before each append")
    args = ap.parse_args()

    from storage.store import Store

    _say("opening")
    store = Store(args.dir, TOPIC, STORE_ID, PARTITIONS,
                  config(args.durability, args.cache_block_bytes))
    starts = [store.latest(p) for p in PARTITIONS]
    _say("start " + " ".join(map(str, starts)))
    threads = [threading.Thread(target=_append_forever, daemon=True,
                                args=(store, p, args.run, starts[i], args.run * 100 + p,
                                      args.pace_ms / 1e3))
               for i, p in enumerate(PARTITIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
