"""Child process for the transaction atomicity tests (test_txn_atomicity.py), one
transactional producer that a test SIGKILLs, SIGSTOPs and restarts:

``python -m tests.integration.txn_worker MODE MASTERS TRANSACTIONAL_ID OUT [options]``

Every line it writes to OUT is flushed at once (a SIGKILL loses no line that was written):

- ``loop``: transactions n = --start, --start + 1, ... of RECORDS records each, record i of
  transaction n is ``b"t%06d-%02d" % (n, i)`` sent to the i-th of --places (round robin).
  Writes ``begin n`` before the transaction opens, ``commit n`` once commit() returned,
  ``failed n <error>`` when it could not be committed (then aborted, or the producer made
  again: a new instance aborts what the old left open). --pace-ms between two records, so
  that a kill at a random point may land among the sends as well as in the commit. While
  the file --hold exists, the next transaction sends half of its records, flushes them,
  writes ``holding n`` and waits to be killed. Stops after the transaction in progress once
  the file --stop exists (``done``). A restart continues after the last ``begin``, so no
  transaction number is used twice.
- ``hang``: with --timeout-ms, begins, sends --count records ``b"hung-<i>"`` to the first of
  --places, flushes, writes ``sent <offset of the first>`` and waits to be killed.
- ``zombie``: begins, sends ``b"zbefore-<k>"`` round robin over --places but the last
  every 10 ms (``sending`` once the first is acknowledged) until the file --stop exists,
  then sends ``b"zafter-<k>"`` to every place (the last one new to the transaction) and
  commits; writes ``send_error <k> <error>`` for each send that failed, then
  ``commit_error <error>`` or ``committed``.

Options: --acks (default "all": see test_txn_atomicity.py's known gaps for "1").
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TextIO

from lib import Producer
from lib.errors import (
    ConcurrentTransactions,
    ProducerFenced,
    RequestTimedOut,
    TubeqError,
    Unavailable,
)

RECORDS = 10  # records per transaction (loop)
RETRIABLE = (Unavailable, RequestTimedOut, ConcurrentTransactions)
END_DEADLINE_S = 60.0  # how long commit()/abort() are retried through a failover


class Out:
    """Lines to the output file, each flushed to the kernel at once."""

    def __init__(self, path: str) -> None:
        self.file: TextIO = open(path, "a", buffering=1)  # noqa: SIM115 - the process's

    def line(self, text: str) -> None:
        self.file.write(text + "\n")
        self.file.flush()


def places(spec: str) -> list[tuple[str, int]]:
    """``"ta:0,ta:1,tb:0"`` -> [("ta", 0), ("ta", 1), ("tb", 0)]."""
    return [(t, int(p)) for t, p in (item.rsplit(":", 1) for item in spec.split(","))]


def make_producer(args: argparse.Namespace, out: Out) -> Producer:
    """A new instance of the transactional_id (fences the older ones, aborts what they left
    open), retried while no master answers (a failover)."""
    deadline = time.monotonic() + END_DEADLINE_S
    while True:
        try:
            return Producer(args.masters, transactional_id=args.tid, acks=args.acks,
                            transaction_timeout_ms=args.timeout_ms, linger_ms=2, retries=100,
                            retry_backoff_ms=100, request_timeout_ms=10_000)
        except RETRIABLE as exc:
            out.line(f"init_retry {type(exc).__name__}")
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def end(producer: Producer, commit: bool) -> None:
    """commit() or abort(), again while the coordinator cannot be reached (safe: it
    recognises the retry)."""
    deadline = time.monotonic() + END_DEADLINE_S
    while True:
        try:
            if commit:
                producer.commit(timeout=30)
            else:
                producer.abort(timeout=30)
            return
        except RETRIABLE:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def loop(args: argparse.Namespace, out: Out) -> int:
    targets, stop = places(args.places), Path(args.stop)
    producer: Producer | None = None
    n = args.start
    while not stop.exists():
        if producer is None:
            producer = make_producer(args, out)
        out.line(f"begin {n}")
        try:
            producer.begin()
            for i in range(RECORDS):
                if i == RECORDS // 2 and args.hold and Path(args.hold).exists():
                    hold(producer, n, out)
                topic, partition = targets[i % len(targets)]
                producer.send(topic, b"t%06d-%02d" % (n, i), partition=partition)
                time.sleep(args.pace_ms / 1000)
            end(producer, commit=True)
            out.line(f"commit {n}")
        except ProducerFenced as exc:
            out.line(f"fenced {n} {exc}")
            return 3
        except TubeqError as exc:
            out.line(f"failed {n} {type(exc).__name__}: {exc}".replace("\n", " "))
            producer = recover(producer, out)
        n += 1
    if producer is not None:
        producer.close(timeout=10)
    out.line("done")
    return 0


def hold(producer: Producer, n: int, out: Out) -> None:
    """Half of transaction n acknowledged (``holding n``), then wait to be killed."""
    producer.flush(timeout=30)
    out.line(f"holding {n}")
    while True:
        time.sleep(1)


def recover(producer: Producer, out: Out) -> Producer | None:
    """Abort the failed transaction; when even that fails, drop this instance (the next
    one aborts what it left open)."""
    try:
        end(producer, commit=False)
        return producer
    except TubeqError as exc:
        out.line(f"abort_failed {type(exc).__name__}")
        producer.close(timeout=5)
        return None


def hang(args: argparse.Namespace, out: Out) -> int:
    topic, partition = places(args.places)[0]
    producer = make_producer(args, out)
    producer.begin()
    futures = [producer.send(topic, b"hung-%d" % i, partition=partition)
               for i in range(args.count)]
    producer.flush(timeout=30)
    out.line(f"sent {futures[0].result(0).offset}")
    while True:  # killed by the test; never commits
        time.sleep(1)


def zombie(args: argparse.Namespace, out: Out) -> int:
    targets, stop = places(args.places), Path(args.stop)
    before, last = targets[:-1], targets[-1]  # the last place is new to the transaction
    producer = make_producer(args, out)
    producer.begin()
    futures: list = []

    def send(k: int, topic: str, partition: int, value: bytes) -> None:
        try:
            futures.append((k, producer.send(topic, value, partition=partition)))
        except TubeqError as exc:
            out.line(f"send_error {k} {type(exc).__name__}")

    send(0, *before[0], b"zbefore-0")
    futures[0][1].result(30)
    out.line("sending")
    k = 0
    while not stop.exists():
        k += 1
        send(k, *before[k % len(before)], b"zbefore-%d" % k)
        time.sleep(0.01)
    for topic, partition in [*before, last]:  # after the resume
        k += 1
        send(k, topic, partition, b"zafter-%d" % k)
    try:
        producer.commit(timeout=30)
        out.line("committed")
    except TubeqError as exc:
        out.line(f"commit_error {type(exc).__name__}")
    for i, future in futures:
        error = future.exception(30)
        if error is not None:
            out.line(f"send_error {i} {type(error).__name__}")
    producer.close(timeout=5)
    out.line("done")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("loop", "hang", "zombie"))
    parser.add_argument("masters")
    parser.add_argument("tid")
    parser.add_argument("out")
    parser.add_argument("--places", required=True)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--stop", default="")
    parser.add_argument("--count", type=int, default=3)
    parser.add_argument("--timeout-ms", type=int, default=0)
    parser.add_argument("--acks", default="all")
    parser.add_argument("--pace-ms", type=int, default=0)
    parser.add_argument("--hold", default="")
    args = parser.parse_args()
    out = Out(args.out)
    out.line(f"start {os.getpid()} {args.start}")
    return {"loop": loop, "hang": hang, "zombie": zombie}[args.mode](args, out)


if __name__ == "__main__":
    sys.exit(main())
