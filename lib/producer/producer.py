"""Producer: the public facade over an accumulator (batching) and one sender thread.

``send`` validates and encodes the record in the caller's thread (each frame is encoded exactly
once), appends it to the batch of its partition and returns a future; the sender thread ships
batches and resolves the futures a whole batch at a time. See ``accumulator.py`` for ordering
and memory bounds, ``sender.py`` for retries and idempotence, ``partitioner.py`` for placement.

Example::

    with Producer("127.0.0.1:8715") as producer:
        producer.send("orders", b"payload", key=b"customer-7")
        producer.flush()

Transactions (``transactional_id``; lib/producer/transaction.py, docs/transactions.md)::

    with Producer(masters, transactional_id="orders-writer") as producer:
        with producer.transaction():  # commits at the end, aborts on an exception
            producer.send("orders", b"a")
            producer.send("audit", b"b")
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from datetime import datetime, timedelta
from typing import Any

from lib.auth.client import Credentials
from lib.closing import Closeable
from lib.config import settle
from lib.delay import DELAY_TOPIC, check_due, delay_partition, due_ms, target_headers
from lib.errors import (
    ClientClosed,
    ConfigError,
    InvalidArgument,
    RequestTimedOut,
    Unavailable,
)
from lib.memory import keep_freed_memory
from lib.names import check_name
from lib.producer.accumulator import Accumulator
from lib.producer.bulk import BulkFuture, bulk_values, groups, take
from lib.producer.config import MAX_BATCH_BYTES, ProducerConfig
from lib.producer.encoder import RecordEncoder
from lib.producer.half import HalfMessage, HalfMessages
from lib.producer.ids import init_producer_id
from lib.producer.sender import Sender
from lib.producer.transaction import Transactions
from lib.producer.transactional import TransactionalApi, reader_for
from lib.records import encode_run
from lib.routes import RouteCache
from lib.rpc import MasterClient, client_pool
from lib.tls import Tls
from lib.types import BulkMetadata, RecordMetadata, TopicPartition

_time_ns = time.time_ns
DELAY_HEADER_ROOM = 128  # a delayed frame's target headers, on top of the topic's limit
__all__ = ["MAX_BATCH_BYTES", "Producer", "ProducerConfig"]  # the config's home: config.py


class Producer(TransactionalApi, Closeable):
    """Sends records to topics; thread-safe (many threads may call ``send``)."""

    def __init__(self, masters: str | Sequence[str], *, config: ProducerConfig | None = None,
                 credentials: Credentials | None = None, tls: Tls | None = None,
                 check: Callable[[HalfMessage], Any] | None = None,
                 **settings: Any) -> None:
        """``settings`` are :class:`ProducerConfig` fields; ``credentials`` (else the
        environment's TUBEQ_USER/TUBEQ_PASSWORD, TUBEQ_API_KEY or TUBEQ_TOKEN) log in;
        ``tls`` (else TUBEQ_TLS_CA ...) reaches TLS ports; ``check`` (with a
        ``producer_group``) answers the masters' check-backs of the group's half messages
        (:meth:`send_in_transaction`)."""
        self.config = cfg = settle(ProducerConfig, config, settings)
        keep_freed_memory()  # batches reuse pages instead of faulting fresh ones (lib/memory.py)
        client_id = cfg.client_id or f"producer-{os.getpid()}-{id(self):x}"
        timeout_s = cfg.request_timeout_ms / 1000
        self._pool = client_pool(masters, credentials, timeout_s, tls)
        self._master = MasterClient(masters, pool=self._pool, timeout=timeout_s)
        self._routes = RouteCache(self._master, cfg.metadata_max_age_ms / 1000, timeout_s)
        self._encoder = RecordEncoder(self._routes, cfg.batch_bytes,
                                      cfg.compression == "zlib")
        self._acc = Accumulator(cfg.batch_bytes, cfg.buffer_bytes, cfg.linger_ms / 1000,
                                cfg.max_block_ms / 1000)
        self._txn, self._offsets = None, None
        if cfg.transactional_id:
            self._txn = Transactions(self._master, check_name(cfg.transactional_id,
                                                              "transactional_id"),
                                     cfg.transaction_timeout_ms, client_id, timeout_s)
        self._sender = Sender(self._acc, self._routes, self._pool, retries=cfg.retries,
                              retry_backoff_s=cfg.retry_backoff_ms / 1000,
                              request_timeout_s=timeout_s,
                              new_producer_id=(lambda: init_producer_id(
                                  self._master, client_id, timeout_s)[0])
                              if cfg.idempotent else None,
                              client_id=client_id, acks_all=cfg.acks_all, txn=self._txn)
        if self._txn is not None:
            try:
                self._sender.sequences.reset(*self._txn.init())
            except BaseException:
                self._master.close()
                self._pool.close()
                raise
        self._zlib = self._encoder.zlib
        self._sticky = self._encoder.sticky  # read inline by send()
        self._closed = False
        self._half = None
        if cfg.producer_group or check is not None:
            if not cfg.producer_group:
                raise ConfigError("producer config: check= needs a producer_group")
            self._half = HalfMessages(
                check_name(cfg.producer_group, "producer_group"), self._master, self._pool,
                self._routes, timeout_s, check,
                lambda: reader_for(masters, credentials, tls, timeout_s))
        self._sender.start()

    # ------------------------------------------------------------------ sending

    def send(self, topic: str, value: bytes, key: bytes | None = None, tag: str | None = None,
             headers: Mapping[str, bytes] | None = None, partition: int | None = None,
             timestamp: int | None = None, *, delay: timedelta | float | None = None,
             deliver_at: datetime | float | None = None) -> Future[RecordMetadata]:
        """Queue one record; the future resolves to its RecordMetadata once acknowledged.

        ``delay`` (a timedelta or seconds) or ``deliver_at`` (an aware datetime or epoch
        seconds) hold the record back: it is stored durably now, in ``tubeq.delayed`` (the
        metadata says where), and appended to ``topic`` when due (docs/delayed.md).

        Raises at once (not through the future) for bad input: InvalidName, InvalidArgument,
        RecordTooLarge, UnknownTopic, UnknownPartition; RequestTimedOut when the buffer stays
        full for max_block_ms; ClientClosed after close().
        """
        if delay is not None or deliver_at is not None:
            return self._send_delayed(topic, value, key, tag, headers, partition,
                                      due_ms(delay, deliver_at))
        if self._txn is not None:
            self._txn.check_send()
        if (key is None and partition is None and tag is None and headers is None
                and timestamp is None and value.__class__ is bytes and not self._zlib):
            # The commonest record, lean: no frame encoded here (its batch is encoded whole
            # when sealed, Batch.encode), no route lookup while the topic's sticky batch has
            # room; every other record, and every error, goes through _send_checked.
            sticky = self._sticky.get(topic)
            now = _time_ns()
            if sticky is None or (future := self._acc.add_value(sticky, value, now)) is None:
                sticky = self._stick(topic, value)  # the next partition, or None
                if sticky is None or (future := self._acc.add_value(sticky, value, now)) is None:
                    return self._send_checked(topic, value, key, tag, headers, partition,
                                              timestamp)
            return future
        return self._send_checked(topic, value, key, tag, headers, partition, timestamp)

    def _stick(self, topic: str, value: bytes) -> list | None:
        """The topic's next sticky partition for a plain value (RecordEncoder.stick)."""
        return None if self._closed else self._encoder.stick(topic, value)

    def _send_checked(self, topic: str, value: bytes, key: bytes | None, tag: str | None,
                      headers: Mapping[str, bytes] | None, partition: int | None,
                      timestamp: int | None) -> Future[RecordMetadata]:
        """:meth:`send` for every record not on its inline path (and for every error)."""
        tp, pieces, size, hashed, ts = self._encode(topic, value, key, tag, headers,
                                                    partition, timestamp)
        return self._acc.add(tp, pieces, size, hashed, ts)

    def _send_delayed(self, topic: str, value: bytes, key: bytes | None, tag: str | None,
                      headers: Mapping[str, bytes] | None, partition: int | None,
                      due: int) -> Future[RecordMetadata]:
        """A delayed record: its target partition chosen now (the key's, as for any send),
        stored in the delay topic's partition for that target with the due time as its
        timestamp (lib/delay.py)."""
        now = _time_ns() // 1_000_000
        check_name(topic)
        if not isinstance(value, bytes | bytearray):
            raise InvalidArgument(f"value must be bytes, got {type(value).__name__}")
        route = self._routes.get(topic)
        target = self._encoder.choose(route, key, partition, len(value))
        delays = self._routes.get(DELAY_TOPIC)  # the masters make it on first use
        check_due(due, now, delays.retention_ms)
        if not delays.count:
            raise Unavailable(f"{DELAY_TOPIC} has no partitions placed yet", topic=DELAY_TOPIC)
        tp, pieces, size, hashed, ts = self._encode(
            DELAY_TOPIC, value, key, tag, target_headers(topic, target, now, headers),
            delay_partition(topic, target, delays.count), due)
        if size > route.max_message_bytes + DELAY_HEADER_ROOM:
            raise self._encoder.too_large(route, size - DELAY_HEADER_ROOM)
        return self._acc.add(tp, pieces, size, hashed, ts)

    def send_frame(self, topic: str, partition: int, frame: bytes, timestamp: int,
                   tag_hash: int = 0) -> Future[RecordMetadata]:
        """Queue a record already encoded as a frame (lib.records), as it is: for relays
        that move stored records on (broker/delayed.py) without decoding and encoding them
        again. ``timestamp`` and ``tag_hash`` must be the frame's own: the broker refuses a
        batch whose columns disagree with its frames."""
        if self._closed:
            raise ClientClosed("the producer is closed: it accepts no more records")
        if self._txn is not None:
            self._txn.check_send()
        route = self._routes.get(topic)
        p = self._encoder.choose(route, None, partition, len(frame))
        if len(frame) > route.max_message_bytes:
            raise self._encoder.too_large(route, len(frame))
        # Not route.tps[p]: choose may have refreshed the routes to find a new partition p.
        return self._acc.add(TopicPartition(route.topic, p), (frame,), len(frame), tag_hash,
                             timestamp)

    def _encode(self, topic: str, value: bytes, key: bytes | None, tag: str | None,
                headers: Mapping[str, bytes] | None, partition: int | None,
                timestamp: int | None) -> tuple[TopicPartition, tuple[bytes, ...], int, int, int]:
        """The record checked and encoded (RecordEncoder.encode), if the producer takes it."""
        if self._closed:
            raise ClientClosed("the producer is closed: it accepts no more records")
        if self._txn is not None:
            self._txn.check_send()
        return self._encoder.encode(topic, value, key, tag, headers, partition, timestamp)

    def send_batch(self, topic: str, values: Sequence[bytes] | Any,
                   keys: Sequence[bytes] | None = None, tags: Sequence[str] | None = None,
                   headers: Sequence[Mapping[str, bytes] | None] | None = None,
                   partition: int | None = None) -> Future[BulkMetadata]:
        """Send many records in one call; returns one future for all of them.

        ``values`` is a sequence of bytes, or a pyarrow binary array; ``keys`` (bytes each)
        puts record ``i`` on ``crc32(keys[i]) % partitions`` like :meth:`send`; ``tags``
        (str each, "" for none) are per record. Without keys or ``partition`` the whole call
        goes to one partition (the sticky round robin of :meth:`send`). The records are
        encoded in one pass over these columns (no per-record Python) and queued as whole
        batches; the future's :class:`BulkMetadata` gives every record's partition and offset,
        in input order. It fails with the first error of any of its batches (records of other
        batches may still have been stored: a retry of the call stores them again, as the
        idempotent producer cannot tell the retry from new records). ``headers`` (a mapping
        or None per record) are encoded record by record (:func:`lib.records.encode_run`);
        compressed records go through :meth:`send`.
        """
        if self._closed:
            raise ClientClosed("the producer is closed: it accepts no more records")
        if self._txn is not None:
            self._txn.check_send()
        check_name(topic)
        values = bulk_values(values)
        n = len(values)
        if n == 0:
            raise InvalidArgument("send_batch needs at least one value")
        for name, column in (("keys", keys), ("tags", tags), ("headers", headers)):
            if column is not None and len(column) != n:
                raise InvalidArgument(f"{name} has {len(column)} items for {n} values")
        route = self._routes.get(topic)
        ts = time.time_ns() // 1_000_000
        parts = self._encoder.bulk_partitions(route, values, keys, partition)
        bulk = BulkFuture(topic, parts, ts)
        for p, idx in groups(parts):
            run = encode_run(take(values, idx), ts, take(keys, idx), take(tags, idx),
                             take(headers, idx))
            biggest = int(run.sizes.max())
            if biggest > route.max_message_bytes:
                raise self._encoder.too_large(route, biggest)
            for batch, start, count in self._acc.append_run(
                    TopicPartition(topic, p), run.frames, run.sizes, run.tag_hashes, ts):
                bulk.track(batch, idx, start, count)
        bulk.arm()
        return bulk

    def send_sync(self, topic: str, value: bytes, key: bytes | None = None,
                  tag: str | None = None, headers: Mapping[str, bytes] | None = None,
                  partition: int | None = None, timestamp: int | None = None,
                  timeout: float | None = None) -> RecordMetadata:
        """Send one record and wait for its acknowledgement (raises its error).

        When its partition is idle (nothing queued or in flight) the calling thread sends it
        itself, one blocking RPC with no hand-off to the sender thread; a retriable failure
        goes back to the sender thread, which retries it as any other batch."""
        tp, pieces, size, hashed, ts = self._encode(topic, value, key, tag, headers,
                                                    partition, timestamp)
        deadline = None if timeout is None else time.monotonic() + timeout
        # A transaction's partitions are registered by the sender thread: no direct send.
        claim = self._acc.claim(tp, size) if self._txn is None else 0
        if claim:
            frame = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            outcome = self._sender.send_direct(claim, tp, frame, hashed, ts, timeout)
            if outcome.__class__ is RecordMetadata:
                return outcome
            future = outcome
        else:
            future = self._acc.add(tp, pieces, size, hashed, ts)
        if not future.done():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            self.flush_future(future, left)
        return future.result(0)

    def flush_future(self, future: Future, timeout: float | None = None) -> None:
        """Wait for one future, sending without linger meanwhile."""
        with self._acc.cond:
            self._acc.flushing += 1
            self._acc.cond.notify_all()
        try:
            future.exception(timeout)
        except TimeoutError:
            raise RequestTimedOut(f"record not acknowledged within {timeout} s") from None
        finally:
            with self._acc.cond:
                self._acc.flushing -= 1

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now and wait until every record sent so far is finished
        (acknowledged or failed; failures are on the futures). RequestTimedOut after
        ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        batches, claims = self._acc.incomplete(), self._acc.claims()
        with self._acc.cond:
            self._acc.flushing += 1
            self._acc.cond.notify_all()
        try:
            for wait in [*(batch.wait_done for batch in batches),
                         lambda left: self._acc.wait_claims(claims, left)]:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not wait(left):
                    raise RequestTimedOut(
                        f"flush: records still unacknowledged after {timeout} s",
                        pending=len(self._acc.incomplete()) + len(self._acc.claims()))
        finally:
            with self._acc.cond:
                self._acc.flushing -= 1

    # ------------------------------------------------------------------ lifecycle

    def close(self, timeout: float | None = None) -> None:
        """Send what is queued, wait up to ``timeout`` s, then fail what is left and stop.

        Records not acknowledged by then fail their futures with Unavailable: none is dropped
        silently. Idempotent: a second call returns at once.
        """
        if self._closed:
            return
        self._closed = True
        with self._acc.cond:
            self._acc.closed = True
            self._acc.cond.notify_all()
        try:
            self.flush(timeout)
        except RequestTimedOut:
            with self._acc.cond:
                self._acc.forced = True
        self._sender.stop()
        self._sender.join(timeout=5.0)
        if self._half is not None:
            self._half.close()
        self._master.close()
        self._pool.close()


    @property
    def routes(self) -> RouteCache:
        """The producer's route cache (shared with nothing else)."""
        return self._routes

    def metrics(self) -> dict[str, int]:
        """Buffer use, in-flight batches and records finished so far (for dashboards, tests
        and benchmarks, which can count failures without keeping every future);
        ``records_sent_direct``: acknowledged ``send_sync`` records the caller's thread sent."""
        return {"records_acked": self._sender.records_acked,
                "records_failed": self._sender.records_failed,
                "records_sent_direct": self._sender.records_sent_direct,
                "buffer_used_bytes": self._acc.used_bytes,
                "batches_in_flight": self._acc.in_flight_count(),
                "batches_incomplete": len(self._acc.incomplete())}
