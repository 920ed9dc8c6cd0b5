"""Batch write: each task hands whole Arrow batches to ``Producer.send_batch``.

Columns (Kafka's sink names): ``value`` (required, binary or string), ``key``, ``topic`` (or the
``topic`` option, which wins over the column as in Spark's Kafka sink), ``partition``, ``tag``.
Anything else is refused when the write is planned, on the driver, naming the columns.

Each row's partition is decided in the task, with numpy over the batch, before anything is
sent; the rows of one partition then go in row order (cut only where a key is present or not:
``send_batch`` takes a key for every record or for none), so per-partition order is the order of
the rows in the task. A task returns only after
every record it sent is acknowledged: once Spark commits the job, everything is stored. There is
no undo: records of a failed job that were already acknowledged stay (at-least-once, as
``format("kafka")``); a retried task sends its rows again.
"""
from __future__ import annotations

import itertools
import logging
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from lib.errors import Unavailable, UnknownTopic
from lib.producer.bulk import bulk_values
from lib.records.layout import crc32
from lib.routes import RouteCache, TopicRoutes
from spark_sink import clients
from spark_sink.options import OptionError, WriteOptions
from spark_sink.plan import admin_client

log = logging.getLogger(__name__)
# Keyless rows go to one partition per batch, the next one each time (Kafka's sticky idea);
# starting at random spreads the tasks of one job.
_round_robin = itertools.count(random.randrange(1 << 16))

BYTES = (T.BinaryType, T.StringType)
COLUMNS = {"value": BYTES, "key": BYTES, "topic": (T.StringType,), "tag": (T.StringType,),
           "partition": (T.ByteType, T.ShortType, T.IntegerType, T.LongType),
           "headers": (T.MapType,)}


@dataclass
class WriteResult(WriterCommitMessage):
    """What one task stored: records per "topic[partition]"."""

    records: dict[str, int] = field(default_factory=dict)


class TubeqWriter(DataSourceArrowWriter):
    """Checks the columns on the driver; writes on the executors."""

    def __init__(self, opts: WriteOptions, schema: T.StructType) -> None:
        check_columns(schema, opts)
        if opts.topic is not None:
            check_topic(opts)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        producer = clients.producer(self.opts)
        futures = []
        for batch in iterator:
            for topic, partition, values, keys, tags, headers in groups(batch, self.opts.topic,
                                                                        producer.routes):
                futures.append(producer.send_batch(topic, values, keys=keys, tags=tags,
                                                   headers=headers, partition=partition))
        result = WriteResult()
        for future in futures:  # the task succeeds only once every record is acknowledged
            meta = future.result()
            for p in np.unique(meta.partitions).tolist():
                where = f"{meta.topic}[{p}]"
                count = int((meta.partitions == p).sum())
                result.records[where] = result.records.get(where, 0) + count
        return result

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(sum(m.records.values()) for m in messages if isinstance(m, WriteResult))
        log.info("tubeq write committed: %d records", total)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        stored = sum(sum(m.records.values()) for m in messages if isinstance(m, WriteResult))
        log.warning("tubeq write aborted: %d records of finished tasks stay stored", stored)


def check_columns(schema: T.StructType, opts: WriteOptions) -> None:
    """Refuse unknown or mistyped columns, and a write that names no topic."""
    names = schema.fieldNames()
    unknown = [n for n in names if n not in COLUMNS]
    if unknown:
        raise OptionError("columns", f"unknown column(s) {', '.join(unknown)}: a tubeq write "
                                     f"takes {', '.join(COLUMNS)}")
    if "value" not in names:
        raise OptionError("columns", "a tubeq write needs a value column (binary or string)")
    if "topic" not in names and opts.topic is None:
        raise OptionError("topic", "no topic: set the topic option or give a topic column")
    for f in schema.fields:
        if f.name == "headers":
            _check_headers(f.dataType)
        elif not isinstance(f.dataType, COLUMNS[f.name]):
            kinds = " or ".join(t.typeName() for t in COLUMNS[f.name])
            raise OptionError("columns", f"column {f.name} is {f.dataType.simpleString()}; "
                                         f"it must be {kinds}")


def _check_headers(kind: T.DataType) -> None:
    """``headers`` is the read side's ``map<string,binary>`` (string values are sent as UTF-8)."""
    if not (isinstance(kind, T.MapType) and isinstance(kind.keyType, T.StringType)
            and isinstance(kind.valueType, BYTES)):
        raise OptionError("columns", f"column headers is {kind.simpleString()}; it must be "
                                     "map<string,binary> or map<string,string>")


def check_topic(opts: WriteOptions) -> None:
    """The ``topic`` option names a topic that exists (tubeq never creates one on write)."""
    with admin_client(opts.conn) as admin:
        try:
            admin.describe_topic(opts.topic)
        except UnknownTopic:
            raise OptionError("topic", f"unknown topic {opts.topic!r} (create it first: "
                                       "tubeq topic create)") from None


Group = tuple[str, int, list[bytes], list[bytes] | None, list[str] | None,
              list[dict[str, bytes] | None] | None]


def groups(batch: pa.RecordBatch, topic_option: str | None, routes: RouteCache,
           seed: int | None = None) -> Iterator[Group]:
    """(topic, partition, values, keys, tags, headers) per run of rows sent alike, in row
    order.

    Every row's partition is decided here, before grouping (the partition column, else
    ``crc32(key) % partitions`` as ``Producer.send``, else one partition per batch and topic,
    round robin over the available ones), so each partition gets exactly its rows in row order;
    its rows are then cut where the key goes from present to absent (``send_batch`` takes a key
    for every record or for none). With ``seed`` (the exactly-once sink) keyless rows go to
    partition ``seed % partitions`` instead, available or not: the same on every replay.
    """
    if batch.num_rows == 0:
        return
    names = batch.schema.names
    topics, topic_codes = _topics(batch, topic_option)
    keys = bulk_values(_binary(batch.column("key"))) if "key" in names else None
    keyless = (batch.column("key").is_null().to_numpy(zero_copy_only=False)
               if keys is not None else np.ones(batch.num_rows, bool))
    parts = (batch.column("partition").cast(pa.int64()).fill_null(-1).to_numpy().copy()
             if "partition" in names else np.full(batch.num_rows, -1, np.int64))
    for code, topic in enumerate(topics):
        _place(parts, topic_codes == code, keys, keyless, routes.get(topic), seed)
    width = int(parts.max()) + 1
    uniq, inverse = np.unique(topic_codes * width + parts, return_inverse=True)
    values = bulk_values(_binary(batch.column("value")))
    tags = batch.column("tag").fill_null("").to_pylist() if "tag" in names else None
    headers = _headers(batch.column("headers")) if "headers" in names else None
    for g, code in enumerate(uniq.tolist()):
        rows = np.flatnonzero(inverse == g)
        cuts = np.flatnonzero(np.diff(keyless[rows])) + 1
        for run in np.split(rows, cuts):
            yield (topics[code // width], code % width, _pick(values, run),
                   None if keyless[run[0]] else _pick(keys, run), _pick(tags, run),
                   _pick(headers, run))


def _place(parts: np.ndarray, mine: np.ndarray, keys: list[bytes] | None,
           keyless: np.ndarray, route: TopicRoutes, seed: int | None) -> None:
    """Fill in the partition of this topic's rows that have none (in place)."""
    todo = mine & (parts < 0)
    if not todo.any():
        return
    if not route.count:
        raise Unavailable(f"topic {route.topic} has no partitions placed yet", topic=route.topic)
    keyed = todo & ~keyless
    if keyed.any():
        picked = _pick(keys, np.flatnonzero(keyed))
        parts[keyed] = np.fromiter(map(crc32, picked), np.int64, len(picked)) % route.count
    loose = todo & keyless
    if loose.any():
        if seed is not None:
            parts[loose] = seed % route.count
            return
        choices = route.available or tuple(range(route.count))
        parts[loose] = choices[next(_round_robin) % len(choices)]


def _headers(column: pa.Array) -> list[dict[str, bytes] | None]:
    """Each row's headers as a dict (the producer's form; per row: they vary in shape)."""
    return [None if pairs is None else
            {k: v.encode() if isinstance(v, str) else (v or b"") for k, v in pairs}
            for pairs in column.to_pylist()]


def _pick(column: list | None, rows: np.ndarray) -> list | None:
    if column is None:
        return None
    if len(rows) == len(column):
        return column
    return list(map(column.__getitem__, rows.tolist()))


def _topics(batch: pa.RecordBatch, topic_option: str | None) -> tuple[list[str], np.ndarray]:
    """The distinct topics and each row's index into them (the option wins over the column)."""
    if topic_option is not None or "topic" not in batch.schema.names:
        return [topic_option or ""], np.zeros(batch.num_rows, np.int64)
    column = batch.column("topic")
    if column.null_count:
        raise OptionError("topic", f"{column.null_count} row(s) have a null topic; set the "
                                   "topic option to give them one")
    encoded = pc.dictionary_encode(column)
    return (encoded.dictionary.to_pylist(),
            encoded.indices.cast(pa.int64()).to_numpy(zero_copy_only=False))


def _binary(column: pa.Array) -> pa.Array:
    """Strings are sent as their UTF-8 bytes; a null value is an empty value."""
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return column.cast(pa.binary())
    return column
