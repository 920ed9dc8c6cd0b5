"""``tubeq bench produce --transactional-id ID``: transactions of ``--txn-records`` records
each, and the round-robin spread (``--round-robin``) that makes every transaction touch every
partition (lib/cli/bench.py holds the command; docs/transactions.md the protocol).

The figures a transaction's cost is read from: committed records per second over the whole
run (every ``commit()`` and ``abort()`` inside it), and per transaction the time its last
records took to be acknowledged after its last send (``drain``: a transaction ends only
once all of its records are stored) apart from the coordinator's ``EndTxn`` (``end``: the
decision through Raft, a marker fsynced in every partition touched).
"""
from __future__ import annotations

import itertools
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from lib.producer.producer import Producer

MB = 1_000_000


def check_txn_options(transactional_id: str | None, txn_records: int, abort_every: int,
                      bulk: int, rate: float | None) -> None:
    """The transaction options' rules (a click UsageError)."""
    if txn_records < 1 or abort_every < 0:
        raise click.UsageError("--txn-records must be >= 1 and --abort-every >= 0")
    if transactional_id and (bulk or rate):
        raise click.UsageError("--transactional-id sends with send(): not with --bulk or --rate")


def round_robin_send(producer: Producer, topic: str) -> Callable[[str, bytes], Future]:
    """``send(topic, value)`` that puts record i on partition ``i % partitions`` (the
    ``partition=`` argument): every run of ``partitions`` records touches every partition.
    The topic's routes must be known (send one record first)."""
    turns = itertools.cycle(range(producer.routes.get(topic).count))
    send = producer.send

    def send_next(topic: str, value: bytes) -> Future:
        return send(topic, value, partition=next(turns))
    return send_next


def run_produce_txn(masters: str, topic: str, count: int, size: int, per_txn: int,
                    abort_every: int, round_robin: bool, progress: bool,
                    **producer_opts) -> dict:
    """Send ``count`` records of ``size`` bytes in transactions of ``per_txn`` records,
    aborting every ``abort_every``-th transaction (0: none). ``msgs_per_s`` counts committed
    records only. One warm-up transaction of one record (committed) goes first, untimed."""
    from lib.cli.bench import percentiles_ms
    from lib.producer.producer import Producer

    value = os.urandom(size)
    drains, ends = [], []
    committed = aborted = 0
    with Producer(masters, **producer_opts) as producer, \
            click.progressbar(length=count, label="produce", file=sys.stderr,
                              hidden=not progress) as bar:
        with producer.transaction():  # routes, channels, the coordinator: not throughput
            producer.send(topic, value)
        send = round_robin_send(producer, topic) if round_robin else producer.send
        start = time.perf_counter()
        for n, first in enumerate(range(0, count, per_txn), 1):
            k = min(per_txn, count - first)
            producer.begin()
            for _ in range(k):
                send(topic, value)
            sent = time.perf_counter()
            producer.flush()  # what commit() does first: timed apart from EndTxn
            drained = time.perf_counter()
            if abort_every and n % abort_every == 0:
                producer.abort()
                aborted += k
            else:
                producer.commit()
                committed += k
            ends.append(time.perf_counter() - drained)
            drains.append(drained - sent)
            bar.update(k)
        elapsed = time.perf_counter() - start
        failures = producer.metrics()["records_failed"]
    return {"messages": count, "committed": committed, "aborted": aborted,
            "transactions": len(ends), "records_per_transaction": per_txn,
            "seconds": round(elapsed, 3), "msgs_per_s": round(committed / elapsed),
            "sent_msgs_per_s": round(count / elapsed),
            "MBps": round(committed * size / elapsed / MB, 1), "failures": failures,
            "drain_latency": percentiles_ms(drains), "end_latency": percentiles_ms(ends),
            "drain_share": round(sum(drains) / elapsed, 3),
            "end_share": round(sum(ends) / elapsed, 3)}
