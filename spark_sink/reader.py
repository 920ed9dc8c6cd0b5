"""Batch read: one Spark task per offset range, rows out as Arrow record batches.

The reader is built on the driver (``plan_read`` asks the masters once) and pickled to the
executors with its ranges; each :class:`RangePartition` carries everything its task needs, so
a task talks only to the brokers that hold its partition. A task assigns its partition to a
pooled ``PullConsumer`` of its worker process, seeks to ``start`` and polls until the
consumer's position reaches ``end``: with a tag filter the broker skips what does not match and
the position still moves past it, so a filtered range ends without reading unmatched records.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from lib.errors import OffsetOutOfRange, RequestTimedOut
from lib.records import Record
from lib.records.columns import FrameColumns
from lib.types import TopicPartition
from spark_sink import clients
from spark_sink.options import Connection, ReadOptions
from spark_sink.plan import OffsetRange, plan_read


@dataclass(frozen=True)
class RangePartition(InputPartition):
    """One task's work: a range of one topic partition and how to read it."""

    range: OffsetRange
    conn: Connection
    tags: tuple[str, ...]
    fail_on_data_loss: bool
    poll_timeout_ms: int
    isolation_level: str = "read_uncommitted"

    @classmethod
    def of(cls, r: OffsetRange, o: ReadOptions) -> RangePartition:
        return cls(r, o.conn, o.tags, o.fail_on_data_loss, o.poll_timeout_ms,
                   o.isolation_level)


class TubeqReader(DataSourceReader):
    """Plans on the driver (at construction), reads on the executors."""

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.ranges = plan_read(opts)
        self.opts = opts
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")

    def partitions(self) -> list[InputPartition]:
        return [RangePartition.of(r, self.opts) for r in self.ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):  # Spark's stand-in for "no ranges"
            return iter(())
        return read_batches(partition, self.arrow_schema)


def read_batches(p: RangePartition, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The rows of ``p`` as Arrow batches, one per fetched run of frames (batch and stream)."""
    for cols in read_range(p):
        yield columns_to_arrow(cols, p.range, schema)


def columns_to_arrow(cols: FrameColumns, r: OffsetRange, schema: pa.Schema) -> pa.RecordBatch:
    """One Arrow batch straight from checked frames: every binary column is one join of byte
    ranges plus numpy offsets, no Record per row. Runs holding headers or compressed values
    (and tags that are not UTF-8) take the per-record path, :func:`to_arrow`."""
    if not cols.plain:
        return to_arrow(cols.records(), r, schema)
    n = len(cols)
    columns = {
        "key": lambda: _keys(cols),
        "value": lambda: _binary(cols, *cols.value_spans()),
        "topic": lambda: pa.repeat(pa.scalar(r.topic, pa.string()), n),
        "partition": lambda: pa.repeat(pa.scalar(r.partition, pa.int32()), n),
        "offset": lambda: pa.array(cols.offsets, pa.int64()),
        "timestamp": lambda: pa.array(cols.head["ts"] * 1000, pa.int64()),
        "tag": lambda: _tags(cols),
        "headers": lambda: _no_headers(n),
    }
    try:
        arrays = [columns[f.name]().cast(f.type) for f in schema]
    except pa.ArrowInvalid:  # a tag that is not UTF-8: decoded with replacement, per record
        return to_arrow(cols.records(), r, schema)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _keys(cols: FrameColumns) -> pa.Array:
    """The key column: all null at once when no record has a key (most topics)."""
    starts, ends, present = cols.key_spans()
    if not np.count_nonzero(present):
        return pa.nulls(len(cols), pa.binary())
    return _binary(cols, starts, ends, present)


def _tags(cols: FrameColumns) -> pa.Array:
    """The tag column (UTF-8, checked by Arrow's cast): all null at once when no record has
    a tag."""
    starts, ends = cols.tag_spans()
    present = ends > starts
    if not np.count_nonzero(present):
        return pa.nulls(len(cols), pa.string())
    return _binary(cols, starts, ends, present).cast(pa.string())


def _no_headers(n: int) -> pa.Array:
    """``n`` empty header maps from their offsets (all 0), not from ``n`` Python lists."""
    return pa.MapArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)),
                                   pa.array([], pa.string()), pa.array([], pa.binary()))


def _binary(cols: FrameColumns, starts: np.ndarray, ends: np.ndarray,
            present: np.ndarray | None = None) -> pa.Array:
    """A binary array of the byte ranges ``starts..ends`` of ``cols`` (null where not
    ``present``): first an Arrow binary *view* over the fetched frames (numpy builds the
    views; no copy, no Python object per record), which Arrow's own cast then copies into a
    plain binary array in C++ (Spark reads plain binary)."""
    n = len(starts)
    # Views hold int32 offsets: a fetch response is far smaller (lib.rpc.MAX_MESSAGE_BYTES).
    assert len(cols.frames) < 1 << 31
    lens = (ends - starts).astype(np.int32)
    nulls = 0 if present is None else n - int(np.count_nonzero(present))
    validity = pa.py_buffer(np.packbits(present, bitorder="little")) if nulls else None
    views = pa.Array.from_buffers(pa.binary_view(), n, [
        validity, pa.py_buffer(_views(np.frombuffer(cols.frames, np.uint8), starts, lens)),
        pa.py_buffer(cols.frames)], nulls)
    return views.cast(pa.binary())


VIEW_INLINE = 12  # Arrow keeps a value of up to 12 bytes inside its 16-byte view


def _views(u8: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Arrow binary views (16 bytes each, little-endian) of the spans ``starts``/``lens`` of
    ``u8``: length, then the bytes inline for short spans; else a 4-byte prefix, buffer 0
    and the offset. Byte-wise numpy, one pass per inline position."""
    views = np.zeros((len(lens), 16), np.uint8)
    views[:, :4] = lens.astype("<i4").view(np.uint8).reshape(-1, 4)
    long = lens > VIEW_INLINE
    short = np.flatnonzero(~long)
    for k in range(int(lens[short].max(initial=0))):
        rows = short[lens[short] > k]
        views[rows, 4 + k] = u8[starts[rows] + k]
    rows = np.flatnonzero(long)
    for k in range(4):
        views[rows, 4 + k] = u8[starts[rows] + k]
    views[rows, 12:] = starts[rows].astype("<i4").view(np.uint8).reshape(-1, 4)
    return views


def to_arrow(records: list[Record], r: OffsetRange, schema: pa.Schema) -> pa.RecordBatch:
    """One column at a time from the decoded records, in ``schema`` (exactly Spark's own)."""
    n = len(records)
    columns = {
        "key": lambda: pa.array([x.key for x in records], pa.binary()),
        "value": lambda: pa.array([x.value for x in records], pa.binary()),
        "topic": lambda: pa.repeat(pa.scalar(r.topic, pa.string()), n),
        "partition": lambda: pa.repeat(pa.scalar(r.partition, pa.int32()), n),
        "offset": lambda: pa.array([x.offset for x in records], pa.int64()),
        "timestamp": lambda: pa.array([x.timestamp * 1000 for x in records], pa.int64()),
        "tag": lambda: pa.array([x.tag or None for x in records], pa.string()),
        "headers": lambda: pa.array([list(x.headers.items()) for x in records],
                                    pa.map_(pa.string(), pa.binary())),
    }
    arrays = [columns[f.name]().cast(f.type) for f in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def read_range(p: RangePartition) -> Iterator[FrameColumns]:
    """The frames of ``p.range`` in offset order, as the consumer hands them out."""
    r = p.range
    tp = TopicPartition(r.topic, r.partition)
    timeout = p.poll_timeout_ms / 1000
    with clients.consumer(p.conn, p.fail_on_data_loss, p.isolation_level) as consumer:
        consumer.assign([tp], tags=list(p.tags))
        consumer.seek(tp, r.start)
        last_progress, position = time.monotonic(), r.start
        while position < r.end:
            try:
                runs = consumer.poll_columns(timeout=min(1.0, timeout))
            except OffsetOutOfRange as exc:
                raise OffsetOutOfRange(
                    f"{r.topic}[{r.partition}]: offsets {r.start}..{r.end} are no longer all "
                    f"there (earliest now {exc.details.get('earliest')}); retention deleted "
                    "them while the query ran (failOnDataLoss=false skips the gap)",
                    **exc.details) from exc
            for cols in runs:
                cols = cols.first(int(np.searchsorted(cols.offsets, r.end)))
                if len(cols):
                    yield cols
            now_at = consumer.position(tp)
            if now_at > position:
                last_progress, position = time.monotonic(), now_at
            elif time.monotonic() - last_progress > timeout:
                raise RequestTimedOut(f"{r.topic}[{r.partition}]: no progress at offset "
                                      f"{position} for {timeout:.0f} s (pollTimeoutMs)",
                                      topic=r.topic, partition=r.partition, offset=position)
