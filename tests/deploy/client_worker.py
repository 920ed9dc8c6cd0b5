"""The client host of the deploy test: ``python -m tests.deploy.client_worker WORK_DIR``.

Runs where an application would (its own network namespace), configured as docs/deploy.md's
client environment says (``TUBEQ_MASTERS``, ``TUBEQ_TLS_CA``, ``TUBEQ_USER``,
``TUBEQ_PASSWORD``): an ``acks="all"`` producer sends ``b"<n>"`` to ``orders`` while a group
consumer reads it. ``WORK_DIR/status.json`` says how many records were acknowledged and
consumed so far (rewritten every 0.2 s); once ``WORK_DIR/stop`` exists the producer stops and
flushes, the consumer reads on until it has every acknowledged record (or 60 s pass), and
``WORK_DIR/result.json`` gets the counts and the acknowledged records never consumed.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import deque
from pathlib import Path

from lib import Producer, PullConsumer
from lib.errors import TubeqError

TOPIC, GROUP = "orders", "deploy-check"
IN_FLIGHT = 500  # unacknowledged sends at most: the producer is paced by the cluster
CATCH_UP_S = 60.0


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)  # readers never see half a file


class Ledger:
    """What was acknowledged and what was consumed; shared by the two threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: set[int] = set()
        self.failed = 0
        self.consumed: set[int] = set()

    def done(self, n: int, future) -> None:
        with self.lock:
            if future.exception() is None:
                self.acked.add(n)
            else:
                self.failed += 1

    def counts(self) -> dict:
        with self.lock:
            return {"acked": len(self.acked), "failed": self.failed,
                    "consumed": len(self.consumed & self.acked)}


def produce(masters: str, ledger: Ledger, stop: Path) -> None:
    pending: deque = deque()
    with Producer(masters, acks="all", retries=30) as producer:
        n = 0
        while not stop.exists():
            future = producer.send(TOPIC, b"%d" % n)
            future.add_done_callback(lambda f, n=n: ledger.done(n, f))
            pending.append(future)
            n += 1
            while len(pending) >= IN_FLIGHT:
                pending.popleft().exception()  # waits for the oldest
            if n % 50 == 0:
                time.sleep(0.01)
        producer.flush(60)


def consume(masters: str, ledger: Ledger, finished: threading.Event) -> None:
    deadline = None
    with PullConsumer(masters, group=GROUP, auto_offset_reset="earliest") as consumer:
        consumer.subscribe([TOPIC])
        while True:
            try:
                records = consumer.poll(timeout=0.3)
            except TubeqError as err:  # a broker leaving under it: the consumer goes on
                if not err.retriable:
                    raise
                records = []
            with ledger.lock:
                ledger.consumed.update(int(r.value) for r in records)
                caught_up = ledger.acked <= ledger.consumed
            if finished.is_set():
                deadline = deadline or time.monotonic() + CATCH_UP_S
                if caught_up or time.monotonic() > deadline:
                    return


def main() -> int:
    work = Path(sys.argv[1])
    masters = os.environ["TUBEQ_MASTERS"]
    ledger, finished = Ledger(), threading.Event()
    reader = threading.Thread(target=consume, args=(masters, ledger, finished), daemon=True)
    reader.start()
    writer = threading.Thread(target=produce, args=(masters, ledger, work / "stop"), daemon=True)
    writer.start()
    while writer.is_alive():
        write_json(work / "status.json", ledger.counts())
        writer.join(0.2)
    finished.set()
    reader.join(CATCH_UP_S + 30)
    with ledger.lock:
        missing = sorted(ledger.acked - ledger.consumed)
    write_json(work / "result.json", {**ledger.counts(), "missing": missing[:50],
                                      "missing_count": len(missing),
                                      "reader_ended": not reader.is_alive()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
