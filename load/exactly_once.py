"""Exactly-once consume-transform-produce: the documented loop (docs/transactions.md).

    .venv/bin/python -m load.exactly_once --input orders --output orders-upper \\
        --group upper --transactional-id upper-0 [--max-records 500] [--stop-after-idle-s 0]

Reads ``--input`` as a member of ``--group`` (read_committed, no auto-commit), writes each
record's value upper-cased to ``--output`` with the same key, and commits the output and the
input offsets in one transaction per poll: after a crash at any point the output holds every
input record exactly once (read_committed). Several workers of one group share the input
partitions; give each its own ``--transactional-id`` (a restarted worker takes its old id
back, which fences its previous incarnation and aborts what it left open).

The loop, in short::

    producer = Producer(masters, transactional_id=tid)
    consumer = PullConsumer(masters, group=group, isolation_level="read_committed",
                            enable_auto_commit=False, auto_offset_reset="earliest")
    consumer.subscribe([input_topic])
    while True:
        records = consumer.poll(max_records=500, timeout=0.5)
        if not records:
            continue
        producer.begin()
        for r in records:
            producer.send(output_topic, transform(r.value), key=r.key)
        producer.send_offsets(next_offsets(records), consumer.group_metadata())
        producer.commit()          # on a failure: abort(), then rewind() and go on

Prints one JSON line when it stops (SIGTERM, Ctrl-C, or idle for ``--stop-after-idle-s``):
transactions committed and aborted, records written.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Iterable

from lib import Producer, PullConsumer, Record, TopicPartition
from lib.errors import ProducerFenced, TubeqError
from load import stop_on_sigterm


def next_offsets(records: Iterable[Record]) -> dict[TopicPartition, int]:
    """The offset to read next per partition: one past the last record processed."""
    out: dict[TopicPartition, int] = {}
    for r in records:
        tp = TopicPartition(r.topic, r.partition)
        out[tp] = max(out.get(tp, 0), r.offset + 1)
    return out


def rewind(consumer: PullConsumer) -> None:
    """After an abort: read again from the committed offsets (the aborted transaction's
    output is gone, so its input must be processed again)."""
    for tp in consumer.assignment():
        committed = consumer.committed(tp)
        if committed is None:
            consumer.seek_to_beginning(tp)
        else:
            consumer.seek(tp, committed)


def commit_settled(producer: Producer, attempts: int = 5) -> None:
    """commit(), again while it fails retriably: the answer of an EndTxn that committed may
    have been lost, and aborting then would process the input twice (the retry is
    recognised by the coordinator). Raises the last error when the coordinator stays away."""
    for attempt in range(attempts):
        try:
            producer.commit()
            return
        except TubeqError as exc:
            if not exc.retriable or attempt == attempts - 1:
                raise


def transform_loop(producer: Producer, consumer: PullConsumer, output: str,
                   transform: Callable[[bytes], bytes], max_records: int,
                   stop: Callable[[int], bool],
                   committed: Callable[[int], None] = lambda n: None) -> dict[str, int]:
    """Poll, transform, produce and commit, one transaction per poll, until ``stop(idle
    polls in a row)``; ``committed(records)`` after each commit. ProducerFenced (a newer
    incarnation took the transactional_id) ends the loop: this worker must stop."""
    counts = {"committed": 0, "aborted": 0, "records": 0}
    idle = 0
    while not stop(idle):
        records = consumer.poll(max_records=max_records, timeout=0.5)
        if not records:
            idle += 1
            continue
        idle = 0
        producer.begin()
        try:
            for r in records:
                producer.send(output, transform(r.value), key=r.key)
            producer.send_offsets(next_offsets(records), consumer.group_metadata())
            commit_settled(producer)
        except ProducerFenced:
            raise
        except TubeqError:
            producer.abort()
            rewind(consumer)
            counts["aborted"] += 1
            continue
        counts["committed"] += 1
        counts["records"] += len(records)
        committed(len(records))
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--masters", default=os.environ.get(
        "TUBEQ_MASTERS", "127.0.0.1:8715,127.0.0.1:8716,127.0.0.1:8717"))
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--max-records", type=int, default=500)
    parser.add_argument("--stop-after-idle-s", type=float, default=0.0,
                        help="stop once the input was idle this long (0: never)")
    parser.add_argument("--progress", action="store_true",
                        help="print a line after each committed transaction")
    args = parser.parse_args()
    stop_on_sigterm()
    idle_polls = int(args.stop_after_idle_s / 0.5) if args.stop_after_idle_s > 0 else 0
    counts: dict[str, int] = {}
    started = time.monotonic()
    with Producer(args.masters, transactional_id=args.transactional_id) as producer, \
            PullConsumer(args.masters, group=args.group, isolation_level="read_committed",
                         enable_auto_commit=False, auto_offset_reset="earliest") as consumer:
        consumer.subscribe([args.input])
        try:
            counts = transform_loop(
                producer, consumer, args.output, bytes.upper, args.max_records,
                lambda idle: bool(idle_polls) and idle >= idle_polls,
                (lambda n: print(f"committed {n}", flush=True)) if args.progress
                else (lambda n: None))
        except (KeyboardInterrupt, SystemExit):
            pass
    print(json.dumps({**counts, "seconds": round(time.monotonic() - started, 1)}),
          flush=True)


if __name__ == "__main__":
    main()
