"""The leader's answer to a follower's ReplicaFetch: records from its fetch offset, where it
must truncate to when its log diverged (KIP-101 / KIP-320), the producer windows and groups'
offsets it lacks; long-polled on the topics' signals while no partition has anything.

Each partition's frames stay out of the protobuf answer (lib/wire.py ``Spliced``): joined in
once when gRPC serializes it, never copied into protobuf. What the leader learns from a fetch
(the follower's log end, which committed offsets it holds) goes to its :class:`Followers`
(broker/replication.py), which keeps the high watermark."""
from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Protocol

import numpy as np

from broker.inline_reads import read_inline
from broker.offsets import OffsetsPlane
from broker.topics import TopicManager
from lib.errors import Fenced, OffsetOutOfRange, TubeqError
from lib.proto import broker_pb2 as pb
from lib.records.layout import crc32
from lib.wire import Runs, Spliced, leading

MAX_REPLICA_BYTES = 8 << 20  # per partition and fetch, whatever the follower asks
# A ReplicaFetch answer as bytes: each partition's frames kept aside (lib/wire.py).
REPLICA_FETCH_METHOD = "/tubeq.broker.Broker/ReplicaFetch"
REPLICA_ENTRIES = pb.ReplicaFetchResponse.DESCRIPTOR.fields_by_name["partitions"].number
REPLICA_FRAMES = pb.ReplicaFetchData.DESCRIPTOR.fields_by_name["frames"].number


class Followers(Protocol):
    """What the answers tell the leader and ask of it (broker/replication.py)."""

    def follower_at(self, topic: str, partition: int, replica: int, log_end: int,
                    our_end: int) -> bool:
        """Record a follower's log end; True when the high watermark moved."""

    def follower_offsets_at(self, topic: str, partition: int, replica: int,
                            p: pb.ReplicaFetchPartition) -> None: ...

    def high_watermark(self, topic: str, partition: int) -> int | None: ...


class ReplicaAnswers:
    """Builds ReplicaFetch answers for the partitions this broker leads."""

    def __init__(self, topics: TopicManager, followers: Followers,
                 offsets: OffsetsPlane | None) -> None:
        self.topics, self.followers, self.offsets = topics, followers, offsets
        self.stream_port = 0  # named in each answer (broker/replica_stream.py), once bound

    async def fetch(self, req: pb.ReplicaFetchRequest, run) -> Spliced:
        """Serve a follower: records of each partition from its fetch offset; long-poll (on
        the topics' signals) while none has any. The answer keeps each partition's frames
        aside (lib/wire.py): serialized with one join, never copied into protobuf."""
        deadline = time.monotonic() + min(req.max_wait_ms, 5000) / 1e3
        while True:
            signals = {p.topic: self.topics.signal(p.topic) for p in req.partitions
                       if self._known(p.topic)}
            seen = {t: s.version for t, s in signals.items()}
            if self._near_tail(req):  # from the cache or fresh pages: no disk wait, no hop
                answer = self._read_all(req)
            else:
                answer = await run(self._read_all, req)
            left = deadline - time.monotonic()
            if any(len(frames) or d.error_code or d.diverging_end_offset >= 0 or d.group_offsets
                   for d, frames in answer.entries) \
                    or left <= 0 or not signals:
                return answer
            waits = [asyncio.ensure_future(s.wait_async(seen[t], left))
                     for t, s in signals.items()]
            _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for w in pending:
                w.cancel()

    def _near_tail(self, req: pb.ReplicaFetchRequest) -> bool:
        """Whether every partition asks from at most INLINE_READ_RECORDS behind its log end
        (broker/inline_reads.py, as for consumers): a follower keeping up, answered without
        the executor hop that was most of an acks=all wait. A partition that cannot be looked
        up counts as near: its answer is an error, without I/O."""
        for p in req.partitions:
            try:
                behind = self.topics.store_for(p.topic, p.partition).latest(p.partition) \
                    - p.fetch_offset
            except TubeqError:
                continue
            if not read_inline(behind):
                return False
        return True

    def _known(self, topic: str) -> bool:
        try:
            self.topics.topic(topic)
            return True
        except TubeqError:
            return False

    def _read_all(self, req: pb.ReplicaFetchRequest) -> Spliced:
        """The answer: each partition's data (frames aside) and its frames."""
        max_bytes = min(req.max_bytes or MAX_REPLICA_BYTES, MAX_REPLICA_BYTES)
        entries: list[tuple[pb.ReplicaFetchData, Any]] = []
        for p in req.partitions:
            reply = pb.ReplicaFetchData()
            try:
                frames = self._read_one(req.replica_id, p, max_bytes, reply)
            except TubeqError as err:
                reply.Clear()  # whatever _read_one filled in before it failed
                reply.topic, reply.partition, reply.diverging_end_offset = p.topic, p.partition, -1
                reply.error_code, reply.error_message = err.code, err.message
                reply.log_start = int(err.details.get("earliest", -1))
                frames = b""
            entries.append((reply, frames))
        return Spliced(pb.ReplicaFetchResponse(stream_port=self.stream_port), REPLICA_ENTRIES,
                       REPLICA_FRAMES, entries)

    def _read_one(self, replica: int, p: pb.ReplicaFetchPartition, max_bytes: int,
                  reply: pb.ReplicaFetchData) -> Runs | bytes:
        """Fill ``reply`` (a part of the response, empty) for one partition; returns the
        frames that go with it."""
        topic, partition, offset = p.topic, p.partition, p.fetch_offset
        store = self.topics.store_for(topic, partition)  # NotHosted unless led here
        role = self.topics.role(topic, partition)
        if role is None or replica not in role.replicas:
            raise Fenced(f"broker {replica} is not a replica of {topic}/{partition}",
                         topic=topic, partition=partition)
        if p.leader_epoch != role.leader_epoch:
            raise Fenced(f"{topic}/{partition}: the follower was told leader epoch "
                         f"{p.leader_epoch}, the leader is at {role.leader_epoch}",
                         topic=topic, partition=partition)
        reply.topic, reply.partition, reply.diverging_end_offset = topic, partition, -1
        reply.log_start, reply.log_end = store.earliest(partition), store.latest(partition)
        diverged = self._diverging_end(store, partition, p)
        if diverged is not None:
            reply.diverging_end_offset = diverged
            reply.high_watermark = self.followers.high_watermark(topic, partition) or 0
            return b""
        if offset < reply.log_start:
            raise OffsetOutOfRange(
                f"{topic}/{partition}: follower at {offset}, the leader's log starts at "
                f"{reply.log_start}", earliest=reply.log_start, latest=reply.log_end)
        if self.followers.follower_at(topic, partition, replica, offset, reply.log_end):
            self.topics.notify(topic)  # consumers waiting at the old high watermark
        reply.high_watermark = self.followers.high_watermark(topic, partition) or 0
        end, frames = offset, b""
        if offset < reply.log_end:
            end, frames = self._add_records(reply, store, partition, offset, max_bytes)
        for b in store.producers.batches(partition, -1 if p.producer_state else offset, end):
            reply.producer_batches.add(
                producer_id=b.producer_id, producer_epoch=b.producer_epoch,
                base_sequence=b.base_sequence, count=b.count, base_offset=b.base_offset,
                attrs=b.attrs)
        if self.offsets is not None:
            self.followers.follower_offsets_at(topic, partition, replica, p)
            self._add_offsets(reply, p)
        return frames

    def _add_offsets(self, reply: pb.ReplicaFetchData, p: pb.ReplicaFetchPartition) -> None:
        """The groups' offsets committed since the follower's version (broker/offsets.py)."""
        got = self.offsets.changes(p.topic, p.partition, p.offsets_incarnation,
                                   p.offsets_version)
        reply.offsets_incarnation, reply.offsets_version = got.incarnation, got.version
        for group, c in sorted(got.offsets.items()):
            reply.group_offsets.add(group=group, offset=c.offset, metadata=c.metadata,
                                    commit_time_ms=c.commit_time_ms)
        if got.marks is not None:
            reply.has_sink_marks = True
            for sink, m in sorted(got.marks.items()):
                reply.sink_marks.add(sink=sink, batch_id=m.batch_id, end_offset=m.end_offset,
                                     leader_epoch=m.leader_epoch)
            for sink, intent in sorted((got.intents or {}).items()):
                reply.sink_intents.add(sink=sink, intent=json.dumps(intent))

    @staticmethod
    def _diverging_end(store, partition: int, p: pb.ReplicaFetchPartition) -> int | None:
        """Where the follower must truncate to, or None when its log agrees with ours."""
        log_end = store.latest(partition)
        if p.last_fetched_epoch <= 0:
            return log_end if p.fetch_offset > log_end else None
        epoch, end = store.end_offset_for_epoch(partition, p.last_fetched_epoch)
        if epoch < 0:
            return log_end if p.fetch_offset > log_end else None
        if epoch != p.last_fetched_epoch or end < p.fetch_offset:
            return min(end, p.fetch_offset)
        return None

    @staticmethod
    def _add_records(reply: pb.ReplicaFetchData, store, partition: int, offset: int,
                     max_bytes: int) -> tuple[int, Runs | bytes]:
        """The frames from ``offset`` on (a run of consecutive offsets) and their epochs:
        (the offset after the last frame, the frames); their CRC goes in ``reply``."""
        res = store.read(partition, offset, max_bytes)
        expected = np.arange(offset, offset + len(res.offsets))
        in_order = res.offsets == expected
        dense = len(expected) if in_order.all() else int(np.argmin(in_order))
        if dense == 0:
            return offset, b""  # a hole at the fetch offset (damaged records): module docstring
        sizes = res.sizes[:dense]
        reply.base_offset = offset
        frames = leading(res.pieces, int(sizes.sum(dtype=np.int64)))  # uncopied (lib/wire.py)
        crc = 0
        for piece in frames:
            crc = crc32(piece, crc)
        reply.frames_crc = crc
        reply.sizes = sizes.astype("<u4").tobytes()
        end = offset + dense
        epochs = store.leader_epochs(partition)
        first = max((i for i, (_, start) in enumerate(epochs) if start <= offset), default=None)
        for epoch, start in epochs[first if first is not None else 0:]:
            if start < end:
                reply.epochs.add(epoch=epoch, start_offset=max(start, offset))
        return end, frames
