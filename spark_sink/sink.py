"""Streaming write (``df.writeStream.format("tubeq")``): an exactly-once sink.

Each micro-batch is written in the two steps Spark gives a sink (``lib/sink.py``,
``broker/sinks.py``): every task *stages* its rows on the brokers of their partitions (invisible
to consumers) and returns what it staged; the driver's ``commit(messages, batchId)`` then makes
the micro-batch visible broker by broker, and each broker records the batch id. A micro-batch
that Spark replays after a crash (same ``batchId``) is skipped where it was committed, and one
that failed before its commit was never visible. The sink is identified by the ``sinkId``
option, or by the query's ``checkpointLocation`` (the checkpoint and the brokers' record of
committed batch ids must stay together: a new checkpoint is a new sink). On a replicated
topic the query rides through a leader's death: tasks stage copies on the in-sync followers and
stage and commit follow the route to the new leader (lib/sink.py), within ``requestTimeoutMs``.

Row placement is deterministic for the same micro-batch (the partition column, else the key's
hash, else one partition per task and Arrow batch chosen from the batch id and task), so a
replay puts every row where the first attempt did: keep the topic's partition count fixed
while a query runs. Tasks learn the micro-batch id from the Spark local property
``streaming.sql.batchId``.
"""
from __future__ import annotations

import hashlib
import logging
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import types as T
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from lib.sink import Staged
from spark_sink import clients
from spark_sink.options import OptionError, WriteOptions
from spark_sink.writer import check_columns, check_topic, groups

log = logging.getLogger(__name__)
BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclass
class SinkMessage(WriterCommitMessage):
    """What one task staged (travels to the driver)."""

    staged: list[Staged] = field(default_factory=list)
    records: int = 0


def sink_id(opts: WriteOptions) -> str:
    """The sink's id: ``sinkId``, else derived from the checkpoint location."""
    if opts.sink_id:
        return opts.sink_id
    if opts.checkpoint_location:
        digest = hashlib.sha1(opts.checkpoint_location.rstrip("/").encode()).hexdigest()
        return f"spark-{digest[:20]}"
    raise OptionError("sinkId", "a streaming write needs a sink id: set the checkpointLocation "
                                "option (or sinkId) so that replayed micro-batches are known")


class TubeqStreamWriter(DataSourceStreamArrowWriter):
    """Checks columns and topic on the driver; stages on the executors; commits on the
    driver."""

    def __init__(self, opts: WriteOptions, schema: T.StructType) -> None:
        check_columns(schema, opts)
        if opts.topic is not None:
            check_topic(opts)
        self.sink = sink_id(opts)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkMessage:
        ctx = TaskContext.get()
        raw = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
        if raw is None:
            raise RuntimeError(f"the tubeq sink runs in streaming queries only (no Spark local "
                               f"property {BATCH_ID_PROPERTY} in this task)")
        batch_id = int(raw)
        task_id = f"{ctx.partitionId()}.{ctx.attemptNumber()}.{ctx.taskAttemptId()}"
        sinks = clients.sink_client(self.opts.conn, self.opts.batch_bytes)
        staging = sinks.task(self.sink, batch_id, task_id)
        for n, batch in enumerate(iterator):
            seed = zlib.crc32(f"{self.sink}/{batch_id}/{ctx.partitionId()}/{n}".encode())
            for topic, partition, values, keys, tags, headers in groups(
                    batch, self.opts.topic, sinks.routes, seed=seed):
                staging.add(topic, partition, values, keys, tags, headers)
        staged = staging.finish()
        return SinkMessage([staged], staged.records)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        staged = [st for m in messages if isinstance(m, SinkMessage) for st in m.staged]
        sinks = clients.sink_client(self.opts.conn, self.opts.batch_bytes)
        appended = sinks.commit(self.sink, batchId, staged)
        log.info("tubeq sink %s committed batch %d: %d records (pid %d)", self.sink, batchId,
                 appended, os.getpid())

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        staged = [st for m in messages if isinstance(m, SinkMessage) for st in m.staged]
        clients.sink_client(self.opts.conn, self.opts.batch_bytes).abort(self.sink, batchId,
                                                                            staged)
        log.warning("tubeq sink %s aborted batch %d: nothing of it is visible", self.sink,
                    batchId)
