"""The ceiling of PySpark's Python data source API itself, for ``load/bench_spark.py``.

``format("tubeq")`` is a Python data source (``pyspark.sql.datasource``): every row it reads
crosses from a Python worker to the JVM as Arrow, and every row it writes crosses back. That
crossing has a cost of its own, whatever the source does. This source does nothing else: its
reader yields ready-made Arrow batches of tubeq's read schema from memory (no network, no
decoding), its writer counts the Arrow batches it is handed and drops them. Measured in the
same run as tubeq and parquet, it shows how much of parquet's speed any Python data source can
reach on the machine, and how close tubeq comes to that. With the ``transport`` option (the
address of ``load/transport_ceiling.py``'s bare gRPC server) the same source also moves the
bytes over gRPC: its writer sends each batch's value bytes in one call, its reader builds each
batch from one received blob, zero-copy: what a source fed by any broker over Python gRPC
could reach.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from spark_sink.source import SCHEMA

NAME = "tubeq-bench-ceiling"
ROWS_PER_BATCH = 4096  # about what tubeq's reader yields per fetch of 4 MiB at 1 KiB


@dataclass(frozen=True)
class Slice(InputPartition):
    """One task's rows: ``rows`` values of ``size`` bytes, as partition ``partition``."""

    partition: int
    rows: int
    size: int
    transport: str = ""  # the bare gRPC server's address: the rows come from there


class CeilingSource(DataSource):
    """Options: ``rows``, ``size`` and ``partitions`` (read); none (write)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        o = self.options
        return CeilingReader(int(o.get("rows", 0)), int(o.get("size", 1)),
                             int(o.get("partitions", 1)), o.get("transport", ""))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return CeilingWriter(self.options.get("transport", ""))


class CeilingReader(DataSourceReader):
    def __init__(self, rows: int, size: int, partitions: int, transport: str = "") -> None:
        self.rows, self.size, self.parts = rows, size, max(1, partitions)
        self.transport = transport

    def partitions(self) -> list[InputPartition]:
        share, extra = divmod(self.rows, self.parts)
        return [Slice(p, share + (p < extra), self.size, self.transport)
                for p in range(self.parts)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, Slice)
        return fetched_batches(partition) if partition.transport else ready_batches(partition)


def ready_batches(s: Slice) -> Iterator[pa.RecordBatch]:
    """``s.rows`` rows in batches of :data:`ROWS_PER_BATCH`, all built from one buffer of
    random bytes: only slicing per batch."""
    values = _values(pa.py_buffer(os.urandom(min(ROWS_PER_BATCH, s.rows) * s.size)), s.size)
    for start in range(0, s.rows, ROWS_PER_BATCH):
        k = min(ROWS_PER_BATCH, s.rows - start)
        yield _batch(values.slice(0, k), s.partition, start)


def fetched_batches(s: Slice) -> Iterator[pa.RecordBatch]:
    """``s.rows`` rows, a batch per blob received from the bare server (``Get``: up to
    :data:`ROWS_PER_BATCH` rows of ``s.size`` bytes), its bytes used in place."""
    from load.transport_ceiling import channel, get

    with channel(s.transport) as ch:
        start = 0
        while start < s.rows:
            values = _values(pa.py_buffer(get(ch)), s.size)
            k = min(len(values), s.rows - start)
            yield _batch(values.slice(0, k), s.partition, start)
            start += k


def _values(data: pa.Buffer, size: int) -> pa.Array:
    n = data.size // size
    offsets = np.arange(n + 1, dtype=np.int32) * size
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), data])


def _batch(values: pa.Array, partition: int, start: int) -> pa.RecordBatch:
    k = len(values)
    return pa.RecordBatch.from_arrays([
        pa.nulls(k, pa.binary()), values,
        pa.repeat(pa.scalar("ceiling"), k), pa.repeat(pa.scalar(partition, pa.int32()), k),
        pa.array(np.arange(start, start + k, dtype=np.int64)),
        pa.array(np.zeros(k, np.int64), pa.timestamp("us", tz="UTC")),
        pa.nulls(k, pa.string())],
        names=["key", "value", "topic", "partition", "offset", "timestamp", "tag"])


@dataclass
class Counted(WriterCommitMessage):
    rows: int


class CeilingWriter(DataSourceArrowWriter):
    def __init__(self, transport: str = "") -> None:
        self.transport = transport

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Counted:
        if not self.transport:
            return Counted(sum(batch.num_rows for batch in iterator))
        from load.transport_ceiling import channel, put

        rows = 0
        with channel(self.transport) as ch:
            for batch in iterator:
                put(ch, value_bytes(batch.column("value")))
                rows += batch.num_rows
        return Counted(rows)


def value_bytes(values: pa.Array) -> bytes:
    """The bytes of every value of a binary array, as one request (one copy, as a producer
    makes one request of its records)."""
    offsets = np.frombuffer(values.buffers()[1], np.int32)[values.offset:
                                                           values.offset + len(values) + 1]
    return bytes(memoryview(values.buffers()[2])[int(offsets[0]):int(offsets[-1])])
