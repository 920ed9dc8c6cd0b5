"""Locust users of the data plane, through ``lib``: a producer, a pull consumer in a group and a
push consumer. Every acknowledged batch, every ``send_sync`` and every non-empty poll is a
Locust request event (name, response time, bytes, exception), so Locust's tables and charts
mean what they say; every message is stamped and accounted for (load/ledger.py).

Locust runs users as gevent greenlets and monkey-patches ``threading``, ``socket`` and
``time``; ``lib`` uses threads (the producer's sender, the consumers' fetchers) and grpcio.
``grpc.experimental.gevent.init_gevent()`` makes grpcio's C core wait through gevent's hub, so
``lib``'s threads become greenlets that yield while a call is in flight: one Locust process
drives many clients on one core (run more Locust workers to use more cores).
"""
from __future__ import annotations

import os
import time
from concurrent.futures import wait
from pathlib import Path

import grpc.experimental.gevent as grpc_gevent
from locust import User, constant, constant_throughput, events, task
from locust.runners import MasterRunner, WorkerRunner

from lib import Producer, PullConsumer, PushConsumer
from load.ledger import STAMP_BYTES, Ledger, stamp

grpc_gevent.init_gevent()  # before any channel is made

LEDGER = Ledger()  # this process's: saved into --ledger-dir when the test stops
FILLER = os.urandom(1 << 20)
DEFAULT_MASTERS = "127.0.0.1:8715,127.0.0.1:8716,127.0.0.1:8717"


@events.init_command_line_parser.add_listener
def _options(parser) -> None:
    group = parser.add_argument_group("tubeq")
    group.add_argument("--tubeq-masters", default=os.environ.get("TUBEQ_MASTERS",
                                                                  DEFAULT_MASTERS),
                       help="the cluster's masters (host:port,...)")
    group.add_argument("--tubeq-topic", default="load", help="topic the users write and read")
    group.add_argument("--tubeq-group", default="load", help="consumer group (push: -push)")
    group.add_argument("--message-bytes", type=int, default=1024,
                       help=f"bytes per message (at least {STAMP_BYTES}: the stamp)")
    group.add_argument("--batch", type=int, default=100, help="messages per producer task")
    group.add_argument("--linger-ms", type=int, default=5, help="producer linger_ms")
    group.add_argument("--sync-sends", action="store_true",
                       help="send_sync one message at a time instead of async batches")
    group.add_argument("--keys", type=int, default=0,
                       help="distinct keys cycled through (0: no key, sticky partitioning)")
    group.add_argument("--tag", default="", help="tag every message with this tag")
    group.add_argument("--rate", type=float, default=0.0,
                       help="messages/s per producer user (0: as fast as it goes)")
    group.add_argument("--ledger-dir", default="",
                       help="folder for loss accounting (tubeq load run sets it)")


@events.init.add_listener
def _one_json_file(environment, **_kw) -> None:
    """Locust forks its ``--processes`` workers with the master's ``--json-file`` option, and
    each writes its own (empty: a worker hands its figures to the master) over the master's
    when it quits, often last. Only the master writes it."""
    if isinstance(environment.runner, WorkerRunner) and environment.parsed_options:
        environment.parsed_options.json_file = None


@events.test_stop.add_listener
def _save_ledger(environment, **_kw) -> None:
    """Every process that runs users saves its ledger, empty or not: one file per worker says
    each worker ran and stopped cleanly (on a busy machine a worker's user may send nothing in
    a short run). A Locust master runs no users and saves none."""
    folder = environment.parsed_options.ledger_dir if environment.parsed_options else ""
    if folder and not isinstance(environment.runner, MasterRunner):
        LEDGER.save(Path(folder))


def _fire(user: User, name: str, started: float, nbytes: int, exc: BaseException | None = None,
          ) -> None:
    user.environment.events.request.fire(
        request_type="tubeq", name=name, response_time=(time.perf_counter() - started) * 1e3,
        response_length=nbytes, exception=exc, context={})


class ProducerUser(User):
    """Sends stamped messages: ``--batch`` async sends awaited together (one request event
    per acknowledged batch), or with ``--sync-sends`` one ``send_sync`` per event."""

    def on_start(self) -> None:
        o = self.environment.parsed_options
        if o.message_bytes < STAMP_BYTES:
            raise ValueError(f"--message-bytes must be at least {STAMP_BYTES}")
        self.o = o
        # retries=20: ride through a broker that has not learned a new topic yet or a
        # leader's restart (5 ran out at the start of a busy CI run: PartitionNotHosted)
        self.producer = Producer(o.tubeq_masters, linger_ms=o.linger_ms, idempotent=True,
                                 retries=20)
        self.id, self.seq = LEDGER.new_producer(), 0
        per_task = 1 if o.sync_sends else o.batch
        self._pace = constant_throughput(o.rate / per_task) if o.rate > 0 else constant(0)

    def wait_time(self) -> float:
        return self._pace(self)

    def _next(self) -> tuple[int, bytes, bytes | None]:
        seq, self.seq = self.seq, self.seq + 1
        key = b"k%d" % (seq % self.o.keys) if self.o.keys else None
        return seq, stamp(self.id, seq, self.o.message_bytes, FILLER), key

    @task
    def produce(self) -> None:
        o, tag = self.o, self.o.tag or None
        if o.sync_sends:
            seq, value, key = self._next()
            started = time.perf_counter()
            LEDGER.add_sent(1)
            try:
                meta = self.producer.send_sync(o.tubeq_topic, value, key=key, tag=tag)
            except Exception as exc:  # noqa: BLE001 - reported to Locust, counted
                LEDGER.add_failed(1)
                _fire(self, "send_sync", started, 0, exc)
                return
            LEDGER.add_acked(meta.topic, meta.partition, meta.offset, self.id, seq)
            _fire(self, "send_sync", started, len(value))
            return
        started = time.perf_counter()
        sent = []
        for _ in range(o.batch):
            seq, value, key = self._next()
            sent.append((seq, self.producer.send(o.tubeq_topic, value, key=key, tag=tag)))
        LEDGER.add_sent(len(sent))
        wait([f for _, f in sent])
        first_error = None
        for seq, future in sent:
            error = future.exception()
            if error is None:
                meta = future.result()
                LEDGER.add_acked(meta.topic, meta.partition, meta.offset, self.id, seq)
            else:
                LEDGER.add_failed(1)
                first_error = first_error or error
        _fire(self, f"send x{o.batch}", started, o.batch * o.message_bytes, first_error)

    def on_stop(self) -> None:
        self.producer.close()


class PullConsumerUser(User):
    """Polls in ``--tubeq-group``; each poll that returns records is one request event."""

    wait_time = constant(0)

    def on_start(self) -> None:
        o = self.o = self.environment.parsed_options
        self.consumer = PullConsumer(o.tubeq_masters, group=o.tubeq_group,
                                     auto_offset_reset="earliest")
        self.consumer.subscribe([o.tubeq_topic])

    @task
    def poll(self) -> None:
        started = time.perf_counter()
        try:
            records = self.consumer.poll(timeout=1.0)
        except Exception as exc:  # noqa: BLE001 - reported to Locust
            _fire(self, "poll", started, 0, exc)
            return
        if records:
            for r in records:
                LEDGER.add_received(self.o.tubeq_group, r.topic or self.o.tubeq_topic,
                                    r.partition, r.offset, r.value)
            _fire(self, "poll", started, sum(len(r.value) for r in records))

    def on_stop(self) -> None:
        self.consumer.close()


class PushConsumerUser(User):
    """A push consumer in ``--tubeq-group``-push: each delivered message is one request event
    whose response time is its end-to-end latency (delivery time minus its timestamp)."""

    wait_time = constant(1)

    def on_start(self) -> None:
        o = self.o = self.environment.parsed_options
        self.group_name = f"{o.tubeq_group}-push"
        self.consumer = PushConsumer(o.tubeq_masters, group=self.group_name,
                                     auto_offset_reset="earliest")
        self.consumer.subscribe([o.tubeq_topic], handler=self._handle)

    def _handle(self, record) -> None:
        LEDGER.add_received(self.group_name, record.topic or self.o.tubeq_topic, record.partition,
                            record.offset, record.value)
        self.environment.events.request.fire(
            request_type="tubeq", name="push e2e",
            response_time=max(0.0, time.time() * 1e3 - record.timestamp),
            response_length=len(record.value), exception=None, context={})

    @task
    def idle(self) -> None:
        """Deliveries come on the consumer's own workers; the task only keeps the user on."""

    def on_stop(self) -> None:
        self.consumer.close()
