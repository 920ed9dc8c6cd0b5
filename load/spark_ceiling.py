"""The ceiling of PySpark's Python data source API itself, for ``load/bench_spark.py``.

``format("tubeq")`` is a Python data source (``pyspark.sql.datasource``): every row it reads
crosses from a Python worker to the JVM as Arrow, and every row it writes crosses back. That
crossing has a cost of its own, whatever the source does. This source does nothing else: its
reader yields ready-made Arrow batches of tubeq's read schema from memory (no network, no
decoding), its writer counts the Arrow batches it is handed and drops them. Measured in the
same run as tubeq and parquet, it shows how much of parquet's speed any Python data source can
reach on the machine, and how close tubeq comes to that.
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
                             int(o.get("partitions", 1)))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return CeilingWriter()


class CeilingReader(DataSourceReader):
    def __init__(self, rows: int, size: int, partitions: int) -> None:
        self.rows, self.size, self.parts = rows, size, max(1, partitions)

    def partitions(self) -> list[InputPartition]:
        share, extra = divmod(self.rows, self.parts)
        return [Slice(p, share + (p < extra), self.size) for p in range(self.parts)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, Slice)
        return ready_batches(partition)


def ready_batches(s: Slice) -> Iterator[pa.RecordBatch]:
    """``s.rows`` rows in batches of :data:`ROWS_PER_BATCH`, all built from one buffer of
    random bytes: only slicing per batch."""
    n = min(ROWS_PER_BATCH, s.rows)
    offsets = np.arange(n + 1, dtype=np.int32) * s.size
    values = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets),
                                                    pa.py_buffer(os.urandom(n * s.size))])
    for start in range(0, s.rows, ROWS_PER_BATCH):
        k = min(ROWS_PER_BATCH, s.rows - start)
        yield pa.RecordBatch.from_arrays([
            pa.nulls(k, pa.binary()), values.slice(0, k),
            pa.repeat(pa.scalar("ceiling"), k), pa.repeat(pa.scalar(s.partition, pa.int32()), k),
            pa.array(np.arange(start, start + k, dtype=np.int64)),
            pa.array(np.zeros(k, np.int64), pa.timestamp("us", tz="UTC")),
            pa.nulls(k, pa.string())],
            names=["key", "value", "topic", "partition", "offset", "timestamp", "tag"])


@dataclass
class Counted(WriterCommitMessage):
    rows: int


class CeilingWriter(DataSourceArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> Counted:
        return Counted(sum(batch.num_rows for batch in iterator))
