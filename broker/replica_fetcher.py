"""The follower's side of replication: copy each followed partition from its leader.

One thread per leader broker this broker follows partitions of (a Kafka replica fetcher
thread). Each round it asks the leader, in one ReplicaFetch, for every partition it follows
there, from its own log end, and appends what comes back at the leader's offsets
(``Store.append(at=..., leader_epoch=...)``, one chunk per leader epoch), after checking every
frame as the leader checked it at produce (structure and CRC: a record damaged on the way is
refused, not copied). The leader's answer may instead say that this copy diverged (truncate
to the offset given, KIP-101) or fell behind the leader's earliest offset (restart there).

Which partitions it follows, and where their leaders are, come from the master through
:meth:`TopicManager.followed`: a leader change simply moves a partition to another loop on
the next round. A leader that cannot be reached is retried after :data:`RETRY_S`; a loop
with nothing to follow for :data:`IDLE_EXIT_S` ends.
"""
from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections.abc import Callable

import grpc
import numpy as np
from google.protobuf.message import DecodeError

from broker.offsets import OffsetsPlane
from broker.replica_answer import REPLICA_ENTRIES, REPLICA_FETCH_METHOD, REPLICA_FRAMES
from broker.replica_stream import ReplicaStreamClient
from broker.topics import PartitionRole, TopicManager
from lib.auth.client import AUTH_HEADER
from lib.auth.settings import cluster_header
from lib.errors import CorruptRecord, RequestTimedOut, TubeqError
from lib.logs import event
from lib.proto import broker_pb2 as pb
from lib.records import (
    FLAG_CONTROL,
    FRAME_FLAGS_AT,
    STORED_FLAGS,
    BatchView,
    decode_frame,
    frame_columns,
)
from lib.records.encode import CONTROL_VALUE
from lib.records.layout import crc32
from lib.rpc import channel
from lib.stream_client import RETRY_STREAM_S
from lib.tls import Tls
from lib.wire import split
from storage.datalog import ATTR_COMMIT, ATTR_CONTROL, ATTR_TXN, ProducerFields
from storage.offsets import CommittedOffset, SinkMark
from storage.producers import ProducerBatch
from storage.store import Store

log = logging.getLogger(__name__)
MAX_WAIT_MS = 500  # the leader holds an empty fetch this long (new records end it at once)
RETRY_S = 0.5
IDLE_EXIT_S = 5.0
SUPERVISE_S = 0.2  # how often new leaders are looked for


class ReplicaFetcher:
    """Starts and ends one :class:`LeaderLoop` per leader address with followed partitions."""

    def __init__(self, topics: TopicManager, broker_id: int, cluster_secret: str = "",
                 tls: Tls | None = None, offsets: OffsetsPlane | None = None) -> None:
        self.topics, self.broker_id = topics, broker_id
        self.offsets = offsets  # where the groups' copied offsets go
        self.call_metadata = cluster_header(cluster_secret)
        self.tls = tls
        self.stopping = threading.Event()
        self._loops: dict[str, LeaderLoop] = {}
        self._thread = threading.Thread(target=self._supervise, name="replica-fetcher",
                                        daemon=True)
        self._unreachable: set[int] = set()  # leader broker ids whose fetches fail now
        self._unreachable_lock = threading.Lock()
        self.on_unreachable: Callable[[], None] = lambda: None  # told of a newly failing one

    def unreachable_leaders(self) -> list[int]:
        """Leaders whose ReplicaFetch calls fail now (the heartbeat tells the master)."""
        with self._unreachable_lock:
            return sorted(self._unreachable)

    def _forget_unfollowed(self, followed: list[PartitionRole]) -> None:
        """A leader we no longer follow is no concern of ours: stop reporting it."""
        with self._unreachable_lock:
            self._unreachable &= {role.leader for role in followed}

    def reached(self, leaders: set[int], ok: bool) -> None:
        with self._unreachable_lock:
            new = leaders - self._unreachable if not ok else set()
            if ok:
                self._unreachable -= leaders
            else:
                self._unreachable |= leaders
        if new:
            self.on_unreachable()

    def start(self) -> ReplicaFetcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self._thread.is_alive():
            self._thread.join()
        for loop in list(self._loops.values()):
            loop.join()

    def _supervise(self) -> None:
        while not self.stopping.wait(SUPERVISE_S):
            followed = [role for _, _, role in self.topics.followed()]
            self._forget_unfollowed(followed)
            leaders = {role.leader_address for role in followed if role.leader_address}
            for address in leaders:
                loop = self._loops.get(address)
                if loop is None or not loop.is_alive():
                    self._loops[address] = LeaderLoop(self, address)
                    self._loops[address].start()


class LeaderLoop(threading.Thread):
    def __init__(self, owner: ReplicaFetcher, address: str) -> None:
        super().__init__(name=f"replica-from-{address}", daemon=True)
        self.owner, self.address = owner, address
        self._complained: set[tuple[str, int, str]] = set()
        # (topic, partition, leader epoch) whose producer windows came whole from the leader
        self._synced: set[tuple[str, int, int]] = set()
        # (topic, partition) -> (incarnation, version) of the leader's offsets held here
        self._offsets_at: dict[tuple[str, int], tuple[int, int]] = {}
        # (topic, partition) -> sink marks sent whose records this copy does not hold yet
        self._pending_marks: dict[tuple[str, int], dict[str, SinkMark]] = {}
        self._stream: ReplicaStreamClient | None = None  # broker/replica_stream.py
        self._stream_port, self._stream_retry_at = 0, 0.0

    def run(self) -> None:
        owner = self.owner
        chan = channel(self.address, owner.tls)
        # The answer as bytes: split here with each partition's frames as a view (lib/wire.py)
        fetch = chan.unary_unary(REPLICA_FETCH_METHOD,
                                 request_serializer=pb.ReplicaFetchRequest.SerializeToString)
        idle_since = time.monotonic()
        try:
            while not owner.stopping.is_set():
                parts = [(t, p, role) for t, p, role in owner.topics.followed()
                         if role.leader_address == self.address]
                if not parts:
                    if time.monotonic() - idle_since > IDLE_EXIT_S:
                        return
                    owner.stopping.wait(SUPERVISE_S)
                    continue
                idle_since = time.monotonic()
                self._forget_others({(t, p) for t, p, _ in parts})
                leaders = {role.leader for _, _, role in parts}
                try:
                    self._round(fetch, parts)
                    owner.reached(leaders, True)
                except grpc.RpcError as exc:
                    event(log, "replica.leader_unreachable", logging.WARNING,
                          leader=self.address, error=str(exc.code()))
                    if exc.code() == grpc.StatusCode.UNAVAILABLE:  # refused or reset: gone
                        owner.reached(leaders, False)  # (a slow answer proves nothing)
                    owner.stopping.wait(RETRY_S)
                except TubeqError as err:  # a store closed or reopened meanwhile: next round
                    event(log, "replica.round_failed", logging.WARNING, leader=self.address,
                          error=err.message)
                    owner.stopping.wait(RETRY_S)
        finally:
            chan.close()
            if self._stream is not None:
                self._stream.close()

    def _forget_others(self, followed: set[tuple[str, int]]) -> None:
        """Drop what we knew of partitions no longer followed from here: one that comes back
        (reassigned here again, or led from here again later) starts with a whole copy of the
        leader's producer windows and offsets."""
        if any((t, p) not in followed for t, p, _ in self._synced):
            self._synced = {k for k in self._synced if (k[0], k[1]) in followed}
        if any(k not in followed for k in self._offsets_at):
            self._offsets_at = {k: v for k, v in self._offsets_at.items() if k in followed}
        if any(k not in followed for k in self._pending_marks):
            self._pending_marks = {k: v for k, v in self._pending_marks.items()
                                   if k in followed}

    def _round(self, fetch: grpc.UnaryUnaryMultiCallable,
               parts: list[tuple[str, int, PartitionRole]]) -> None:
        owner = self.owner
        asked, stores = [], {}
        for topic, p, role in parts:
            store = owner.topics.replica_store(topic, p)
            epochs = store.leader_epochs(p)
            key = (topic, p, role.leader_epoch)
            stores[(topic, p)] = store, key
            incarnation, version = self._offsets_at.get((topic, p), (0, 0))
            asked.append(pb.ReplicaFetchPartition(
                offsets_incarnation=incarnation, offsets_version=version,
                topic=topic, partition=p, topic_id=owner.topics.topic(topic).spec.topic_id,
                fetch_offset=store.latest(p), leader_epoch=role.leader_epoch,
                last_fetched_epoch=epochs[-1][0] if epochs else 0,
                producer_state=key not in self._synced))
        max_bytes = min(s.config.max_batch_bytes for s, _ in stores.values())
        request = pb.ReplicaFetchRequest(replica_id=owner.broker_id, partitions=asked,
                                         max_wait_ms=MAX_WAIT_MS, max_bytes=max_bytes)
        head, entries = split_answer(self._fetch(fetch, request), self.address)
        if head.stream_port != self._stream_port:
            self._stream_port, self._stream_retry_at = head.stream_port, 0.0
        for data, frames in entries:
            held = stores.get((data.topic, data.partition))
            if held is not None:
                self._apply(*held, data, frames)

    def _fetch(self, fetch: grpc.UnaryUnaryMultiCallable, request: pb.ReplicaFetchRequest
               ) -> bytes | bytearray:
        """The serialized answer: over the leader's replica stream where it has one
        (broker/replica_stream.py), else (and while the stream cannot be had) over gRPC."""
        timeout = MAX_WAIT_MS / 1e3 + 5
        stream = self._open_stream()
        if stream is not None:
            try:
                return stream.fetch(request, timeout)
            except TimeoutError:  # as a late gRPC answer: this round failed, not the leader
                self._close_stream("timed out", RETRY_S)
                raise RequestTimedOut(f"the replica stream of {self.address} did not answer "
                                      f"within {timeout} s") from None
            except OSError as exc:  # gone or reset: gRPC says whether the leader is
                self._close_stream(repr(exc), RETRY_STREAM_S)
        return fetch(request, timeout=timeout, metadata=self.owner.call_metadata)

    def _open_stream(self) -> ReplicaStreamClient | None:
        if self._stream is not None or not self._stream_port \
                or time.monotonic() < self._stream_retry_at:
            return self._stream
        metadata = dict(self.owner.call_metadata)
        try:
            self._stream = ReplicaStreamClient.to_broker(self.address, self._stream_port,
                                                         metadata.get(AUTH_HEADER, ""),
                                                         self.owner.tls)
            event(log, "replica.stream_opened", leader=self.address, port=self._stream_port)
        except (OSError, TubeqError) as exc:
            self._close_stream(getattr(exc, "message", repr(exc)), RETRY_STREAM_S)
        return self._stream

    def _close_stream(self, why: str, retry_s: float) -> None:
        event(log, "replica.stream_failed", logging.WARNING, leader=self.address,
              port=self._stream_port, error=why, retry_s=retry_s)
        if self._stream is not None:
            self._stream.close()
        self._stream, self._stream_retry_at = None, time.monotonic() + retry_s

    def _apply(self, store: Store, key: tuple[str, int, int], data: pb.ReplicaFetchData,
               frames: memoryview) -> None:
        p = data.partition
        if data.diverging_end_offset >= 0:
            to = max(min(data.diverging_end_offset, store.latest(p)), store.earliest(p))
            event(log, "replica.truncated", topic=data.topic, partition=p,
                  from_offset=store.latest(p), to_offset=to)
            store.truncate(p, to)  # and the producers' windows with it
            self._truncate_marks(data.topic, p, to)
        elif data.error_code == "OFFSET_OUT_OF_RANGE" and data.log_start > store.latest(p):
            event(log, "replica.reset", topic=data.topic, partition=p,
                  from_offset=store.latest(p), to_offset=data.log_start)
            store.reset(p, data.log_start)
        elif data.error_code:
            self._complain(data)
        else:
            listed = producer_batches(data)
            if len(frames):
                append_copied(store, p, data, frames, listed)
            store.producers.adopt(p, listed, replace=key not in self._synced,
                                  copied_from=data.base_offset if len(frames) else -1)
            self._synced.add(key)
            self._copy_offsets(data)
            self._copy_marks(data, store.latest(p))
            return
        self._synced.discard(key)  # what the leader remembers is asked for again

    def _copy_offsets(self, data: pb.ReplicaFetchData) -> None:
        """Store the groups' offsets the leader sent; name its version next time."""
        if self.owner.offsets is None or not data.offsets_incarnation:
            return
        self.owner.offsets.store_copies(data.topic, data.partition, {
            g.group: CommittedOffset(g.offset, bytes(g.metadata), g.commit_time_ms)
            for g in data.group_offsets})
        self._offsets_at[(data.topic, data.partition)] = (data.offsets_incarnation,
                                                          data.offsets_version)

    def _copy_marks(self, data: pb.ReplicaFetchData, log_end: int) -> None:
        """Store the sinks' intents, and the marks whose records this copy holds; keep the
        other marks until it does (a mark without its records would make a new leader skip
        them on a replay; the intent it replaces stays until then)."""
        if self.owner.offsets is None:
            return
        key = (data.topic, data.partition)
        pending = self._pending_marks.get(key, {})
        intents: dict[str, dict] = {}
        if data.has_sink_marks:
            pending = {m.sink: SinkMark(m.batch_id, m.end_offset, m.leader_epoch)
                       for m in data.sink_marks}
            intents = {i.sink: json.loads(i.intent) for i in data.sink_intents}
        held = {s: m for s, m in pending.items() if m.end_offset <= log_end}
        if held or intents:
            self.owner.offsets.store_sink_copies(data.topic, data.partition, held, intents)
        self._pending_marks[key] = {s: m for s, m in pending.items() if s not in held}

    def _truncate_marks(self, topic: str, partition: int, to: int) -> None:
        """This copy's log now ends at ``to``: marks past it go, and the leader's whole
        state is asked for again."""
        self._pending_marks.pop((topic, partition), None)
        self._offsets_at.pop((topic, partition), None)
        if self.owner.offsets is not None:
            self.owner.offsets.store_sink_copies(topic, partition, {}, {}, drop_from=to)

    def _complain(self, data: pb.ReplicaFetchData) -> None:
        """Log a refused partition once per kind of refusal (every round would flood)."""
        key = (data.topic, data.partition, data.error_code)
        if key not in self._complained:
            self._complained.add(key)
            event(log, "replica.refused", logging.WARNING, topic=data.topic,
                  partition=data.partition, leader=self.address, code=data.error_code,
                  error=data.error_message)


def producer_batches(data: pb.ReplicaFetchData) -> list[ProducerBatch]:
    """The idempotent producer batches a leader listed (storage/producers.py)."""
    return [ProducerBatch(b.producer_id, b.producer_epoch, b.base_sequence, b.count,
                          b.base_offset, attrs=b.attrs & ATTR_TXN)
            for b in data.producer_batches]


def read_answer(raw: bytes, leader: str) -> list[tuple[pb.ReplicaFetchData, memoryview]]:
    """A ReplicaFetch answer: each partition's data and its frames (a view of ``raw``)."""
    return split_answer(raw, leader)[1]


def split_answer(raw: bytes | bytearray, leader: str
                 ) -> tuple[pb.ReplicaFetchResponse, list[tuple[pb.ReplicaFetchData, memoryview]]]:
    """A ReplicaFetch answer: its head, and each partition's data and frames."""
    try:
        return split(raw, REPLICA_ENTRIES, REPLICA_FRAMES, pb.ReplicaFetchResponse,
                     pb.ReplicaFetchData)
    except (ValueError, DecodeError) as exc:
        raise CorruptRecord(f"the ReplicaFetch answer of {leader} does not parse: {exc}"
                            ) from None


def append_copied(store: Store, partition: int, data: pb.ReplicaFetchData,
                  frames: memoryview, listed: list[ProducerBatch] = ()) -> None:
    """Append the leader's frames at its offsets, one chunk per leader epoch they span, and
    one per idempotent producer batch the leader ``listed`` that they hold whole: its chunk
    carries the producer's fields, as on the leader, so this copy rebuilds the producers'
    windows from its own files (storage/producers.py).

    A leader that sends their CRC vouches for them as sent (it checked each frame when it
    came in): one CRC of the whole run here, and the frames' structure, instead of each
    frame's CRC (a slice and a call per frame). Frames that rotted on the leader's
    disk are copied as they are, and refused by consumers (by offset) wherever they read them.
    """
    whole = data.HasField("frames_crc")
    if whole and crc32(frames) != data.frames_crc:
        raise CorruptRecord(f"replica fetch of {data.topic}/{partition}: the frames do not "
                            "match the leader's CRC of them (damaged on the way)")
    sizes = np.frombuffer(data.sizes, "<u4")
    starts = np.concatenate(([0], np.cumsum(sizes, dtype=np.int64)))
    if int(starts[-1]) != len(frames):
        raise TubeqError(f"replica fetch of {data.topic}/{partition}: frame sizes add up to "
                         f"{int(starts[-1])} bytes, {len(frames)} came")
    base, count = data.base_offset, len(sizes)
    bounds = [(e.epoch, e.start_offset - base) for e in data.epochs
              if base <= e.start_offset < base + count]
    if not bounds or bounds[0][1] > 0:  # records before the first epoch listed: epoch 0
        first = [e.epoch for e in data.epochs if e.start_offset <= base]
        bounds.insert(0, (first[-1] if first else 0, 0))
    markers = control_records(frames, starts)
    for epoch, lo, hi, producer in copied_runs(base, count, bounds, listed, markers):
        run = frames[int(starts[lo]):int(starts[hi])]
        run_sizes = sizes[lo:hi]
        tags, stamps = frame_columns(run, run_sizes, contents=not whole, known=STORED_FLAGS)
        view = BatchView(count=hi - lo, producer_id=-1, producer_epoch=-1, base_sequence=-1,
                         sizes=run_sizes, tag_hashes=tags, timestamps=stamps, frames=run)
        store.append(partition, view, leader_epoch=epoch, at=base + lo, producer=producer)


def control_records(frames: memoryview, starts: np.ndarray
                    ) -> dict[tuple[int, int], ProducerFields]:
    """The transaction markers among copied frames (their flags byte, one gather), by their
    (index, index + 1), with the producer fields their frames carry."""
    flags = np.frombuffer(frames, np.uint8)[starts[:-1] + FRAME_FLAGS_AT]
    out = {}
    for i in np.flatnonzero(flags & FLAG_CONTROL).tolist():
        record = decode_frame(frames[int(starts[i]):int(starts[i + 1])])
        pid, epoch = CONTROL_VALUE.unpack(record.value)
        attrs = ATTR_CONTROL | (ATTR_COMMIT if record.key == b"commit" else 0)
        out[(i, i + 1)] = ProducerFields(pid, epoch, -1, attrs)
    return out


def copied_runs(base: int, count: int, bounds: list[tuple[int, int]],
                listed: list[ProducerBatch],
                markers: dict[tuple[int, int], ProducerFields] | None = None
                ) -> list[tuple[int, int, int, ProducerFields | None]]:
    """(leader epoch, first, end, producer fields or None) of each chunk to append: records
    [first, end) of the ``count`` copied from offset ``base``, cut where the leader epoch
    changes (``bounds``: (epoch, first) ascending, the first at 0), around every listed
    batch held whole (a batch never spans two epochs: one leader appended it) and around each
    transaction marker (``markers``: its (first, end) -> its fields)."""
    whole = {(b.base_offset - base, b.base_offset - base + b.count):
             ProducerFields(b.producer_id, b.producer_epoch, b.base_sequence, b.attrs)
             for b in listed if base <= b.base_offset and b.base_offset + b.count <= base + count}
    whole.update(markers or {})
    edges = sorted({0, count, *(lo for _e, lo in bounds), *(e for pair in whole for e in pair)})
    runs = []
    for lo, hi in itertools.pairwise(edges):
        epoch = [e for e, first in bounds if first <= lo][-1]
        runs.append((epoch, lo, hi, whole.get((lo, hi))))
    return runs
