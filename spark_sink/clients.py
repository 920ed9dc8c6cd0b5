"""The tubeq clients of one Spark Python worker process, kept between tasks.

This is the one place in tubeq with module-level clients, on purpose: Spark reuses a Python
worker process for task after task (``spark.python.worker.reuse``) but gives a data source no
per-process hook, so a client built per task would pay its master lookups, routes and broker
channels every time. Consumers are lent out (one task at a time uses one consumer: they are not
for concurrent use) and returned; producers are thread-safe and shared. Entries are keyed by
the process id too: a worker forked from a parent that held clients must not use the parent's
threads and channels.
"""
from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from lib.consumer.pull import PullConsumer
from lib.producer.producer import Producer
from lib.sink import SinkClient
from spark_sink.options import Connection, WriteOptions

_lock = threading.Lock()
_idle_consumers: dict[tuple[int, Connection, bool], list[PullConsumer]] = {}
_producers: dict[tuple[int, WriteOptions], Producer] = {}
_sink_clients: dict[tuple[int, Connection, int], SinkClient] = {}

# Small prefetch: a task stops at its end offset, and what was fetched past it is thrown away.
_CONSUMER = dict(enable_auto_commit=False, fetch_max_bytes=4 << 20, prefetch_max_bytes=8 << 20,
                 max_poll_records=10_000, client_id="tubeq-spark")


@contextmanager
def consumer(conn: Connection, fail_on_data_loss: bool,
             isolation_level: str = "read_uncommitted") -> Iterator[PullConsumer]:
    """A consumer with no group for this task, returned to the pool afterwards.

    Out of range is an error (``failOnDataLoss``) or a jump to the earliest offset.
    """
    key = (os.getpid(), conn, fail_on_data_loss, isolation_level)
    with _lock:
        idle = _idle_consumers.get(key)
        c = idle.pop() if idle else None
    if c is None:
        c = PullConsumer(conn.masters, auto_offset_reset="error" if fail_on_data_loss
                         else "earliest", isolation_level=isolation_level, **_CONSUMER,
                         **conn.clients("consumer"))
    ok = False
    try:
        yield c
        ok = True
    finally:
        if ok:
            c.assign([])  # stops prefetching for the finished range
            with _lock:
                _idle_consumers.setdefault(key, []).append(c)
        else:
            c.close()  # a failed read may have left it in any state


def producer(opts: WriteOptions) -> Producer:
    """The shared producer of this worker process for these options."""
    key = (os.getpid(), replace(opts, topic=None, sink_id=None, checkpoint_location=None))
    with _lock:
        p = _producers.get(key)
        if p is None:
            p = _producers[key] = Producer(opts.conn.masters, linger_ms=opts.linger_ms,
                                           batch_bytes=opts.batch_bytes,
                                           idempotent=opts.idempotent, client_id="tubeq-spark",
                                           **opts.conn.clients("producer"))
        return p


def sink_client(conn: Connection, batch_bytes: int) -> SinkClient:
    """The shared exactly-once sink client of this process (executor tasks and the driver's
    commits) for these masters."""
    key = (os.getpid(), conn, batch_bytes)
    with _lock:
        c = _sink_clients.get(key)
        if c is None:
            c = _sink_clients[key] = SinkClient(conn.masters, batch_bytes=batch_bytes,
                                                **conn.clients("sink"))
        return c


@atexit.register
def close_all() -> None:
    """Close this process's clients (the worker exits; every write already waited for its
    acknowledgements, so nothing is lost here)."""
    with _lock:
        mine = [c for (pid, *_), cs in _idle_consumers.items() if pid == os.getpid()
                for c in cs]
        producers = [p for (pid, _), p in _producers.items() if pid == os.getpid()]
        sinks = [c for (pid, *_), c in _sink_clients.items() if pid == os.getpid()]
        _idle_consumers.clear()
        _producers.clear()
        _sink_clients.clear()
    for s in sinks:
        s.close()
    for c in mine:
        c.close()
    for p in producers:
        p.close(timeout=5)
