"""One push stream: a ``Subscribe`` call to one broker for one topic, with its credit.

The stream opens with ``start`` (partitions and positions) and its share of the consumer's
credit; it earns credit back as the handler *finishes* records and returns it in quarters (or
when nothing is left unhandled), never while the consumer is paused. A reader thread hands each
response to ``hooks.on_data`` and, when the call breaks without being cancelled, calls
``hooks.on_broken`` so the consumer restarts its streams. Thread-safe.
"""
from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import grpc

from lib.logs import event
from lib.proto import broker_pb2, broker_pb2_grpc
from lib.types import TopicPartition
from lib.wire_errors import from_rpc_error

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StreamHooks:
    """What a stream calls back into its consumer (from its reader thread)."""

    on_data: Callable[[PushStream, broker_pb2.PartitionData], None]
    on_broken: Callable[[], None]
    paused: Callable[[], bool]


class PushStream:
    def __init__(self, address: str, topic: str, parts: list[tuple[TopicPartition, int, int]],
                 share: tuple[int, int], session: int, hooks: StreamHooks) -> None:
        self.address, self.topic, self.session, self.hooks = address, topic, session, hooks
        self.epochs = {tp.partition: ep for tp, _, ep in parts}
        self.next = {tp.partition: pos for tp, pos, _ in parts}
        self.share_msgs, self.share_bytes = share
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.pending = [0, 0]  # credit earned back, not yet sent
        self.unhandled = 0
        self.closed = False
        self._call = None
        self._thread = threading.Thread(target=self._read, daemon=True,
                                        name=f"tubeq-push-{address}-{topic}")

    @staticmethod
    def _credit(messages: int, nbytes: int) -> broker_pb2.SubscribeRequest:
        return broker_pb2.SubscribeRequest(
            credit=broker_pb2.Credit(messages=messages, bytes=nbytes))

    def _request_iter(self) -> Iterator[broker_pb2.SubscribeRequest]:
        while True:
            req = self._requests.get()
            if req is None:
                return
            yield req

    def start(self, stub: broker_pb2_grpc.BrokerStub, tags: Iterable[str], group: str,
              read_committed: bool = False, topic_id: int = 0) -> None:
        """Open the call: ``start`` from the known positions, then the first credit."""
        start = broker_pb2.SubscribeStart(
            topic=self.topic, tags=list(tags), group=group, read_committed=read_committed,
            topic_id=topic_id,
            partitions=[broker_pb2.PartitionFetch(partition=p, offset=pos)
                        for p, pos in self.next.items()])
        self._requests.put(broker_pb2.SubscribeRequest(start=start))
        self._requests.put(self._credit(self.share_msgs, self.share_bytes))
        self._call = stub.Subscribe(self._request_iter())
        self._thread.start()

    def cancel(self) -> None:
        with self._lock:
            self.closed = True
        self._requests.put(None)
        if self._call is not None:
            self._call.cancel()

    def received(self, n: int) -> None:
        with self._lock:
            self.unhandled += n

    def handled(self, size: int) -> None:
        """A record is done: earn its credit back (sent in quarters, or when idle)."""
        with self._lock:
            self.unhandled -= 1
            self.pending[0] += 1
            self.pending[1] += size
            due = (self.pending[0] >= max(1, self.share_msgs // 4)
                   or self.pending[1] >= self.share_bytes // 4 or self.unhandled <= 0)
        if due:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            if self.closed or self.hooks.paused() or not self.pending[0]:
                return
            msgs, nbytes = self.pending
            self.pending = [0, 0]
        self._requests.put(self._credit(msgs, nbytes))

    def _read(self) -> None:
        try:
            for resp in self._call:
                self.hooks.on_data(self, resp.data)
        except grpc.RpcError as exc:
            if not self.closed:
                event(log, "push.stream_failed", logging.WARNING, broker=self.address,
                      topic=self.topic, error=str(from_rpc_error(exc)))
        except Exception:
            log.exception("push.reader_crashed")
        if not self.closed:
            self.hooks.on_broken()
