"""Push delivery (``Subscribe``): a bidi stream with credit-based flow control.

The client opens with ``start`` (topic, partitions with their start offsets, tags), then sends
``credit`` messages granting a number of messages and, optionally, bytes. The broker sends a
``SubscribeResponse`` only while it holds credit and takes each response's messages and frame
bytes off it, so a slow consumer never makes the broker buffer without bound.

Credit rules: message credit is always enforced. Byte credit is enforced once the client has
granted any bytes; a client that only grants messages is limited by messages alone. A message
larger than the byte credit left waits for more credit, so a client that limits bytes must grant
at least its largest message. A per-partition error (e.g. OFFSET_OUT_OF_RANGE) is sent as a
response with ``error_code`` set (it carries no data and takes no credit) and that partition
leaves the stream; the stream ends when no partition is left or the client cancels.

Threads: the handler thread reads and sends; one helper thread drains the client's requests
into :class:`Credit`.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator

from broker.config import BrokerConfig
from broker.data import check_tags, error_data, first_frames, result_data
from broker.metrics import BrokerMetrics
from broker.topics import TopicManager
from lib.errors import InvalidArgument, StoreClosed, TubeqError
from lib.proto import broker_pb2 as pb


class Credit:
    """Messages and bytes the client allows us to send; filled by the request reader."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.messages = 0
        self.bytes = 0
        self.bytes_limited = False
        self.need_bytes = 1  # raised while one frame is bigger than the byte credit
        self.done = False

    def grant(self, messages: int, nbytes: int) -> None:
        with self._cond:
            self.messages += messages
            if nbytes:
                self.bytes += nbytes
                self.bytes_limited = True
            self._cond.notify_all()

    def finish(self) -> None:
        with self._cond:
            self.done = True
            self._cond.notify_all()

    def _usable(self) -> bool:
        return self.messages > 0 and (not self.bytes_limited or self.bytes >= self.need_bytes)

    def wait(self, timeout: float) -> bool:
        """True when there is credit to send (False on timeout or when the stream ended)."""
        with self._cond:
            self._cond.wait_for(lambda: self.done or self._usable(), timeout)
            return not self.done and self._usable()

    def budget(self) -> tuple[int, int | None]:
        with self._cond:
            return self.messages, (self.bytes if self.bytes_limited else None)

    def take(self, messages: int, nbytes: int) -> None:
        with self._cond:
            self.messages -= messages
            if self.bytes_limited:
                self.bytes -= nbytes
            self.need_bytes = 1


def _drain(requests: Iterator[pb.SubscribeRequest], credit: Credit) -> None:
    try:
        for req in requests:
            if req.HasField("credit"):
                credit.grant(req.credit.messages, req.credit.bytes)
    except Exception:  # noqa: BLE001 - the client went away: the stream ends below
        pass
    finally:
        credit.finish()


class PushPlane:
    def __init__(self, config: BrokerConfig, topics: TopicManager,
                 metrics: BrokerMetrics) -> None:
        self.config = config
        self.topics = topics
        self.metrics = metrics

    def subscribe(self, requests: Iterator[pb.SubscribeRequest], on_done
                  ) -> Iterator[pb.SubscribeResponse]:
        """The response stream; ``on_done(callback)`` registers the cancel hook of the RPC."""
        start = self._start(requests)
        tags = check_tags(start.tags)
        positions = {pf.partition: pf.offset for pf in start.partitions}
        for p in positions:
            self.topics.store_for(start.topic, p)  # fail the stream early on a bad partition
        credit = Credit()
        on_done(credit.finish)
        threading.Thread(target=_drain, args=(requests, credit), daemon=True,
                         name="push-credit").start()
        self.metrics.push_streams.inc()
        try:
            yield from self._loop(start.topic, positions, tags, credit)
        finally:
            credit.finish()
            self.metrics.push_streams.dec()

    def _start(self, requests: Iterator[pb.SubscribeRequest]) -> pb.SubscribeStart:
        first = next(requests, None)
        if first is None or not first.HasField("start"):
            raise InvalidArgument("a Subscribe stream must open with a 'start' message")
        if not first.start.partitions:
            raise InvalidArgument("Subscribe start names no partition")
        return first.start

    def _loop(self, topic: str, positions: dict[int, int], tags: list[str] | None,
              credit: Credit) -> Iterator[pb.SubscribeResponse]:
        idle = self.config.push_idle_wait_ms / 1e3
        order = list(positions)
        while positions:
            if not credit.wait(idle):
                if credit.done:
                    return
                continue
            try:
                signal = self.topics.signal(topic)
            except TubeqError as err:
                yield from (pb.SubscribeResponse(data=error_data(p, o, err).fields())
                            for p, o in positions.items())
                return
            if signal.closed:
                return  # shutting down, or the topic left this broker
            seen = signal.version
            sent = False
            order = order[1:] + order[:1]  # rotate: no partition starves the others
            for p in [q for q in order if q in positions]:
                if not credit.wait(0):
                    break
                out = self._next(topic, p, positions, tags, credit)
                if out is not None:
                    sent = True
                    yield out
            if not sent and credit.wait(0):
                signal.wait(seen, idle)  # nothing new anywhere: sleep until an append

    def _next(self, topic: str, p: int, positions: dict[int, int], tags: list[str] | None,
              credit: Credit) -> pb.SubscribeResponse | None:
        """The next response for partition ``p`` within the credit, or None."""
        messages, nbytes = credit.budget()
        chunk = self.config.push_chunk_bytes
        try:
            store = self.topics.store_for(topic, p)
            res = store.read(p, positions[p], min(chunk, nbytes or chunk), tags)
        except StoreClosed:
            time.sleep(0.01)  # the topic is being reconfigured: the new store comes next round
            return None
        except TubeqError as err:
            data = error_data(p, positions.pop(p), err)
            return pb.SubscribeResponse(data=data.fields())
        if len(res.offsets) == 0:
            positions[p] = res.next_offset  # a tag filter may have skipped entries
            return None
        data = result_data(p, res)
        if len(res.offsets) > messages:
            data.frames = first_frames(res.frames, messages)
            data.offsets = res.offsets[:messages].astype("<i8").tobytes()
            data.next_offset = int(res.offsets[messages])
        if nbytes is not None and len(data.frames) > nbytes:
            credit.need_bytes = len(data.frames)  # one frame over the byte credit: wait
            return None
        count = len(data.offsets) // 8
        credit.take(count, len(data.frames))
        positions[p] = data.next_offset
        self.metrics.served(topic, p, len(data.frames), count)
        return pb.SubscribeResponse(data=data.fields())
