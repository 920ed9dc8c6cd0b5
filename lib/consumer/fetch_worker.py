"""One fetch thread of the pull consumer: long-polls ``Fetch`` on one broker for its share of
one topic's partitions and hands each partition's answer, still raw, to the fetcher's ready
queue (:class:`Completed`). What to fetch, and where the answers go, is the fetcher's
(:class:`WorkSource`, lib/consumer/fetcher.py); how a call is made, read and recovered from
(stale routes, offsets out of range, quotas, a hung leader) is this module's."""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

import grpc
import numpy as np

from lib import errors
from lib.consumer.fetch_stream import Cut, FetchStream
from lib.consumer.subscription import SubscriptionState
from lib.fetch_wire import FETCH_METHOD, read_fetch
from lib.logs import event
from lib.proto import broker_pb2
from lib.routes import confirm_unknown
from lib.stuck_calls import STUCK_AFTER_S, StuckCallWatch
from lib.types import TopicPartition
from lib.wire_errors import error_class, from_rpc_error

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Completed:
    """A fetch result waiting in the ready queue, still raw: frames are decoded only as poll
    hands them out (few live Record objects, nothing decoded for data a seek drops).
    ``expected`` = the position it continues from; ``index``/``pos``: next frame and byte."""

    tp: TopicPartition
    epoch: int
    expected: int
    frames: bytes | memoryview  # a view of the Fetch answer (lib/fetch_wire.py)
    offsets: list[int]
    index: int
    pos: int
    next_offset: int
    nbytes: int
    sizes: np.ndarray | None = None  # the broker's uint32 size per frame (None: walk them)



class _Dropped(Exception):
    """A Fetch call that cancel() or interrupt() ended: its answer, if any, is not wanted."""


class WorkSource(Protocol):
    """What a worker needs of its fetcher; the fetcher's lock guards what these touch."""

    config: Any  # FetcherConfig
    sub: SubscriptionState
    offsets: Any  # OffsetClient: the channel pool and route refreshes
    watch: StuckCallWatch

    def group(self) -> str: ...

    def work_for(self, worker: FetchWorker) -> list[tuple[TopicPartition, int, int]] | None:
        """(tp, offset, epoch) to fetch now; None: the worker has nothing left, it exits."""

    def push(self, c: Completed) -> None: ...

    def refresh_routes(self, topics: set[str]) -> None: ...


class FetchWorker(threading.Thread):
    """Long-polls one broker for one topic (lib/consumer/fetcher.py's module docstring)."""

    def __init__(self, fetcher: WorkSource, address: str, topic: str, slot: int) -> None:
        super().__init__(name=f"tubeq-fetch-{address}-{topic}-{slot}", daemon=True)
        self.fetcher, self.address, self.topic, self.slot = fetcher, address, topic, slot
        self._next: dict[TopicPartition, tuple[int, int]] = {}  # tp -> (epoch, offset)
        self._latest: dict[TopicPartition, int] = {}  # tp -> its latest offset, last told
        self._call: grpc.Future | None = None
        self.asked: list[tuple[TopicPartition, int, int]] = []  # the call's (tp, offset, epoch)
        self._cancelled = False
        self._interrupted = False
        self._woken = threading.Event()  # cuts a quota's throttle wait short on cancel
        self.stream = FetchStream(address, fetcher.offsets.pool)  # lib/consumer/fetch_stream.py

    def next_offset(self, tp: TopicPartition, position: int, epoch: int) -> int:
        known = self._next.get(tp)
        return known[1] if known is not None and known[0] == epoch else position

    def all_at_end(self, todo: list[tuple[TopicPartition, int, int]]) -> bool:
        """Whether every partition of ``todo`` was at its latest offset when last fetched
        (a fetch of them would long-poll)."""
        return all(off >= self._latest.get(tp, off + 1) for tp, off, _ in todo)

    def cancel(self) -> None:
        self._cancelled = True
        self._woken.set()
        self._cut()

    def interrupt(self) -> None:
        """Cancel the call in flight, if any, and go on with fresh work (its answer is
        dropped: positions only move when the application takes data)."""
        self._interrupted = True
        self._cut()

    def _cut(self) -> None:
        call = self._call
        if call is not None:
            call.cancel()
        self.stream.cut()

    def run(self) -> None:
        try:
            self._run()
        finally:
            self.stream.close()

    def _run(self) -> None:
        f = self.fetcher
        cfg = f.config
        # The answer as bytes: split here, each partition's frames a view (lib/fetch_wire.py)
        fetch = f.offsets.pool.get(self.address).unary_unary(
            FETCH_METHOD, request_serializer=broker_pb2.FetchRequest.SerializeToString)
        while not self._cancelled:
            todo = f.work_for(self)
            if todo is None:
                return
            req = broker_pb2.FetchRequest(
                topic=self.topic, max_wait_ms=cfg.fetch_max_wait_ms, tags=list(f.sub.tags),
                max_total_bytes=cfg.fetch_max_total_bytes, group=f.group(),
                read_committed=cfg.read_committed or self.topic in f.committed_topics,
                topic_id=f.offsets.routes.topic_id(self.topic),
                partitions=[broker_pb2.PartitionFetch(partition=tp.partition, offset=off,
                                                      max_bytes=cfg.fetch_max_bytes)
                            for tp, off, _ in todo])
            self._interrupted, self.asked = False, todo
            token = f.watch.started(self.address, [tp for tp, _, _ in todo], self.interrupt,
                                    cfg.fetch_max_wait_ms / 1000 + STUCK_AFTER_S)
            try:
                resp, parts = read_fetch(self._fetch(
                    fetch, req, cfg.fetch_max_wait_ms / 1000 + cfg.rpc_timeout_s),
                    self.address)
            except _Dropped:  # only cancel() and interrupt() drop a call
                if self._cancelled:
                    return
                continue
            except errors.TubeqError as exc:
                if self._cancelled:
                    return
                if not self._interrupted or isinstance(exc, errors.CorruptRecord):
                    self._call_failed(exc, todo)
                continue
            finally:
                f.watch.finished(token)
                self._call, self.asked = None, []
            self.stream.port = resp.stream_port
            asked = {tp.partition: (tp, off, ep) for tp, off, ep in todo}
            # A view keeps the whole answer alive: with several partitions in it, each takes
            # its own copy, so the ready queue's byte bound stays what the memory holds.
            several = len(parts) > 1
            for pd, frames in parts:
                self._handle(pd, bytes(frames) if several else frames, asked)
            if resp.throttle_ms:  # a consume quota of ours is in debt on this broker: wait
                self._woken.wait(resp.throttle_ms / 1e3)

    def _fetch(self, fetch: grpc.UnaryUnaryMultiCallable, req: broker_pb2.FetchRequest,
               timeout: float) -> bytes | bytearray:
        """One Fetch call's answer bytes: over the broker's client stream when it has one,
        else over gRPC. Raises _Dropped when cancel() or interrupt() ended it."""
        try:
            raw = self.stream.fetch(req, timeout)
        except Cut:
            raise _Dropped from None
        if raw is not None:
            return raw
        self._call = fetch.future(req, timeout=timeout)
        try:
            return self._call.result()
        except grpc.FutureCancelledError:
            raise _Dropped from None
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None

    def _handle(self, pd: broker_pb2.PartitionData, frames: bytes | memoryview,
                asked: dict) -> None:
        if pd.partition not in asked:
            return
        tp, offset, epoch = asked[pd.partition]
        if pd.latest >= 0:
            self._latest[tp] = pd.latest
        if pd.error_code:
            self._partition_failed(tp, epoch, pd)
            return
        if len(pd.offsets) % 8:
            self.fetcher.sub.fail(tp, errors.CorruptRecord(
                f"fetch of {tp.topic}[{tp.partition}]: offsets are not int64s"))
            return
        offsets = np.frombuffer(pd.offsets, "<i8").tolist()
        if not offsets and pd.next_offset <= offset:
            return
        # Sizes that do not match the frames' count are ignored (the frames are walked);
        # wrong ones fail the frame check as any corruption does.
        sizes = np.frombuffer(pd.sizes, "<u4") if len(pd.sizes) == 4 * len(offsets) else None
        self._next[tp] = (epoch, pd.next_offset)
        self.fetcher.push(Completed(tp, epoch, offset, frames, offsets, 0, 0,
                                     pd.next_offset, len(frames), sizes))

    def _partition_failed(self, tp: TopicPartition, epoch: int,
                          pd: broker_pb2.PartitionData) -> None:
        sub = self.fetcher.sub
        exc = error_class(pd.error_code)(pd.error_message or pd.error_code, topic=tp.topic,
                                         partition=tp.partition, earliest=pd.earliest,
                                         latest=pd.latest)
        if sub.epoch(tp) != epoch:
            return  # the application moved meanwhile
        if isinstance(exc, errors.OffsetOutOfRange):
            event(log, "fetch.offset_out_of_range", topic=tp.topic, partition=tp.partition,
                  earliest=pd.earliest, latest=pd.latest, policy=sub.reset_policy)
            if sub.reset_policy == "error":
                sub.fail(tp, exc)
            else:
                sub.seek(tp, pd.earliest if sub.reset_policy == "earliest" else pd.latest)
        elif exc.retriable or exc.refresh_metadata:
            self.fetcher.refresh_routes({tp.topic})
            time.sleep(0.1)
        else:
            sub.fail(tp, exc)

    def _call_failed(self, exc: errors.TubeqError, todo: list) -> None:
        if isinstance(exc, errors.QuotaExceeded):  # refused until the debt is paid: wait
            self._woken.wait(float(exc.details.get("retry_after_ms", 100)) / 1e3)
            return
        event(log, "fetch.failed", logging.WARNING, broker=self.address, topic=self.topic,
              error=str(exc))
        if isinstance(exc, errors.UnknownTopic):
            topic = self.topic
            exc = confirm_unknown(topic, exc,
                                  lambda: self.fetcher.offsets.refresh_routes({topic}))
        if isinstance(exc, errors.UnknownTopic) or not (exc.retriable or exc.refresh_metadata):
            for tp, _, _ in todo:
                self.fetcher.sub.fail(tp, exc)
            return
        self.fetcher.refresh_routes({self.topic})
        time.sleep(0.2)
