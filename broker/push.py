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

Threading: a stream is an async generator on the broker's event loop (broker/service.py). A
task of the stream reads the client's requests with ``async for`` into :class:`Credit`. A
partition is read only when its latest offset moved past the stream's position (a counter read
under the store's lock); as for Fetch (broker/inline_reads.py), a read near the tail runs
inline and one further back in the executor. A stream with nothing to send, or
without credit, parks on the topic's Signal or on its Credit and holds no thread; it re-checks
every ``push_idle_wait_ms`` (a partition that moved away, a reconfigured store).
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from broker.config import BrokerConfig
from broker.data import (
    PartitionReply,
    Runner,
    check_tags,
    error_data,
    visible_read,
)
from broker.inline_reads import read_inline
from broker.metrics import BrokerMetrics
from broker.replication import ReplicaLeader
from broker.topics import TopicManager
from lib.auth.access import current_access
from lib.auth.quotas import QuotaBook
from lib.errors import InvalidArgument, StoreClosed, TubeqError
from lib.proto import broker_pb2 as pb
from storage.store import Store


class Credit:
    """Messages and bytes the client allows us to send; filled by the request reader.

    Used by the coroutines of one stream on one event loop only, so it needs no lock."""

    def __init__(self) -> None:
        self._changed = asyncio.Event()
        self.messages = 0
        self.bytes = 0
        self.bytes_limited = False
        self.need_bytes = 1  # raised while one frame is bigger than the byte credit
        self.done = False

    def grant(self, messages: int, nbytes: int) -> None:
        self.messages += messages
        if nbytes:
            self.bytes += nbytes
            self.bytes_limited = True
        self._changed.set()

    def finish(self) -> None:
        self.done = True
        self._changed.set()

    def usable(self) -> bool:
        return (not self.done and self.messages > 0
                and (not self.bytes_limited or self.bytes >= self.need_bytes))

    async def wait(self, timeout: float) -> bool:
        """True when there is credit to send (False on timeout or when the stream ended)."""
        if self.done or self.usable():
            return self.usable()
        try:
            async with asyncio.timeout(timeout):
                while not (self.done or self.usable()):
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            pass
        return self.usable()

    def budget(self) -> tuple[int, int | None]:
        return self.messages, (self.bytes if self.bytes_limited else None)

    def take(self, messages: int, nbytes: int) -> None:
        self.messages -= messages
        if self.bytes_limited:
            self.bytes -= nbytes
        self.need_bytes = 1


async def _drain(requests: AsyncIterator[pb.SubscribeRequest], credit: Credit) -> None:
    try:
        async for req in requests:
            if req.HasField("credit"):
                credit.grant(req.credit.messages, req.credit.bytes)
    except Exception:  # noqa: BLE001 - the client went away: the stream ends below
        pass
    finally:
        credit.finish()


class PushPlane:
    def __init__(self, config: BrokerConfig, topics: TopicManager,
                 metrics: BrokerMetrics, replication: ReplicaLeader,
                 quotas: QuotaBook | None = None) -> None:
        self.quotas = quotas or QuotaBook()
        self.config = config
        self.topics = topics
        self.metrics = metrics
        self.replication = replication  # consumers read below the high watermark

    async def subscribe(self, requests: AsyncIterator[pb.SubscribeRequest], run: Runner
                        ) -> AsyncIterator[pb.SubscribeResponse]:
        """The response stream; ``run(fn, *args)`` runs blocking work in the executor."""
        start = await self._start(requests)
        access = current_access.get()
        access.check("consume", "topic", start.topic)
        if start.group:
            access.check("consume", "group", start.group)  # its quota is charged
        tags = check_tags(start.tags)
        positions = {pf.partition: pf.offset for pf in start.partitions}
        for p in positions:
            # fail the stream early on a bad partition, or an incarnation not open here yet
            self.topics.store_for(start.topic, p, start.topic_id)
        credit = Credit()
        reader = asyncio.ensure_future(_drain(requests, credit))
        self.metrics.push_streams.inc()
        try:
            async for response in self._loop(start.topic, positions, tags, credit, run,
                                             start.read_committed):
                yield response
                if self.quotas.active:  # the broker sets the pace of a push stream itself
                    wait_ms = self.quotas.charge("consume", access.quota_principal, start.group,
                                                 len(response.data.frames))
                    if wait_ms:
                        await asyncio.sleep(wait_ms / 1e3)
        finally:
            reader.cancel()
            credit.finish()
            self.metrics.push_streams.dec()

    async def _start(self, requests: AsyncIterator[pb.SubscribeRequest]) -> pb.SubscribeStart:
        first = await anext(aiter(requests), None)
        if first is None or not first.HasField("start"):
            raise InvalidArgument("a Subscribe stream must open with a 'start' message")
        if not first.start.partitions:
            raise InvalidArgument("Subscribe start names no partition")
        return first.start

    async def _loop(self, topic: str, positions: dict[int, int], tags: list[str] | None,
                    credit: Credit, run: Runner, committed: bool = False
                    ) -> AsyncIterator[pb.SubscribeResponse]:
        idle = self.config.push_idle_wait_ms / 1e3
        order = list(positions)
        while positions:
            try:
                signal = self.topics.signal(topic)
            except TubeqError as err:
                for p, o in positions.items():
                    yield pb.SubscribeResponse(data=error_data(p, o, err).fields())
                return
            if signal.closed:
                return  # shutting down, or the topic left this broker
            if not await credit.wait(idle):
                if credit.done:
                    return
                continue
            seen = signal.version
            sent = False
            order = order[1:] + order[:1]  # rotate: no partition starves the others
            for p in [q for q in order if q in positions]:
                if not credit.usable():
                    break
                lag = self._lag(topic, p, positions[p])
                if lag == 0:
                    continue
                out = await self._next(topic, p, positions, tags, credit, run, lag, committed)
                if out is not None:
                    sent = True
                    yield out
            if not sent and credit.usable():
                await signal.wait_async(seen, idle)  # nothing new anywhere: park until an append

    def _lag(self, topic: str, p: int, position: int) -> int | None:
        """How far ``position`` is behind the partition's latest offset (0: nothing to read);
        None when the lookup fails (the read says what is wrong)."""
        try:
            end = self.replication.high_watermark(topic, p)
            return abs((self.topics.store_for(topic, p).latest(p) if end is None else end)
                       - position)
        except TubeqError:
            return None

    async def _next(self, topic: str, p: int, positions: dict[int, int],
                    tags: list[str] | None, credit: Credit, run: Runner, lag: int | None,
                    committed: bool = False) -> pb.SubscribeResponse | None:
        """The next response for partition ``p`` within the credit, or None."""
        messages, nbytes = credit.budget()
        chunk = self.config.push_chunk_bytes
        try:
            store = self.topics.store_for(topic, p)
            read = (self.replication.high_watermark(topic, p), min(chunk, nbytes or chunk),
                    tags, messages, committed)
            if read_inline(lag):
                data = _read(store, p, positions[p], *read)
            else:
                data = await run(_read, store, p, positions[p], *read)
        except StoreClosed:
            await asyncio.sleep(0.01)  # the topic is being reconfigured: a new store comes next
            return None
        except TubeqError as err:
            data = error_data(p, positions.pop(p), err)
            return pb.SubscribeResponse(data=data.fields())
        if not data.offsets:
            positions[p] = data.next_offset  # a tag filter or a marker may have been skipped
            return None
        if nbytes is not None and len(data.frames) > nbytes:
            credit.need_bytes = len(data.frames)  # one frame over the byte credit: wait
            return None
        count = len(data.offsets) // 8
        credit.take(count, len(data.frames))
        positions[p] = data.next_offset
        self.metrics.served(topic, p, len(data.frames), count)
        return pb.SubscribeResponse(data=data.fields())


def _read(store: Store, p: int, offset: int, high_watermark: int | None, max_bytes: int,
          tags: list[str] | None, messages: int, committed: bool) -> PartitionReply:
    """A consumer's read of at most ``messages`` frames (the store stops there: no trim
    here), below the high watermark (and the last stable offset when ``committed``)."""
    return visible_read(store, p, offset, high_watermark, max_bytes, tags, messages,
                        committed)
