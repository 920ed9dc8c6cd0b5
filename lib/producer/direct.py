"""``send_sync`` on an idle partition: the caller's own thread sends its record (lib/producer/
sender.py's module docstring), mixed into the :class:`~lib.producer.sender.Sender`.

One blocking RPC, no batch object and no hand-off to the sender thread: the caller waits for
its answer anyway. Its failures go to the sender thread as a batch of one, so retries, backoff
and route refreshes stay in one place.
"""
from __future__ import annotations

import time

import grpc

from lib.errors import TubeqError
from lib.produce_wire import produce_request
from lib.producer.futures import RecordFuture
from lib.records import batch_head
from lib.types import RecordMetadata, TopicPartition
from lib.wire_errors import from_rpc_error


class DirectSend:
    """The sender's direct path; the attributes it uses are the Sender's."""

    def send_direct(self, claim: int, tp: TopicPartition, frame: bytes, tag_hash: int,
                    timestamp: int, timeout: float | None = None
                    ) -> RecordMetadata | RecordFuture:
        """Send one encoded record whose partition ``Accumulator.claim`` gave the *calling*
        thread: one blocking RPC, no batch object, no hand-off. Returns its RecordMetadata;
        on failure the record becomes a batch handed to the sender thread (retries, backoff
        and route refreshes stay in one place) and its future comes back instead."""
        topic, partition = tp
        address, payload, pid, seq, first_sent = "", b"", -1, -1, time.monotonic()
        try:
            route, address = self._leader(tp)
            stub = self.calls.stub(address)
            wait = self._paused.get(address, 0.0) - time.monotonic()
            if wait > 0:  # throttled by a quota: the caller waits (it asked to)
                time.sleep(wait)
            if self.idempotent:
                pid, seq = self._seq.take(tp, 1)
            head = batch_head(frame, (len(frame),), (tag_hash,) if tag_hash else None,
                              (timestamp,), producer_id=pid,
                              producer_epoch=self._seq.epoch if pid >= 0 else -1,
                              base_sequence=seq)
            payload = produce_request(tp, head, frame, self.acks_all, route.topic_id)
            limit = self.request_timeout_s if timeout is None else \
                min(timeout, self.request_timeout_s)
            response = self.calls.watched(stub, payload, limit, address, (tp,),
                                          self.metadata + self.pool.auth_metadata())
        except (TubeqError, grpc.RpcError) as exc:
            error = exc if isinstance(exc, TubeqError) else from_rpc_error(exc)
            future, batch = self.acc.adopt(claim, tp, frame, tag_hash, timestamp)
            batch.attempts, batch.address, batch.first_sent = 1, address or "", first_sent
            batch.payload, batch.producer_id, batch.base_sequence = payload, pid, seq
            if not payload:
                batch.producer_id = batch.base_sequence = -1  # sealed by the sender's send
            if self.acc.forced:  # a timed-out close: the sender thread may be gone
                self.fail(batch, error)
            else:
                self._hand_over(batch, None, error)
            return future
        except BaseException:  # a bug or an interrupt: the record was not sent, say so
            self.acc.unclaim(claim, tp, len(frame))  # and leave the partition free
            raise
        self._acknowledged(tp, response, address, 1)
        with self._counting:
            self.records_acked += 1
            self.records_sent_direct += 1
        self.acc.unclaim(claim, tp, len(frame))
        return RecordMetadata(topic, partition, response.base_offset, timestamp)

