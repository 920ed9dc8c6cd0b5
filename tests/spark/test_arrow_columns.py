"""The Spark reader's column path builds the same Arrow batch as the per-record path."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import _parse_datatype_string

from lib.records import Record, encode_frame
from lib.records.columns import checked_columns
from spark_sink.plan import OffsetRange
from spark_sink.reader import columns_to_arrow, to_arrow
from spark_sink.source import HEADERS, SCHEMA

RANGE = OffsetRange("topic-a", 2, 0, 1000)


def schema(headers: bool) -> pa.Schema:
    return to_arrow_schema(_parse_datatype_string(SCHEMA + (HEADERS if headers else "")),
                           timezone="UTC")


def columns(records: list[Record]):
    frames = memoryview(b"".join(encode_frame(r) for r in records))
    return checked_columns(RANGE.topic, RANGE.partition, frames,
                           np.arange(len(records), dtype=np.int64) + 40)


@pytest.mark.parametrize("headers", [False, True])
@pytest.mark.parametrize("records", [
    [Record(b"x" * (i % 7), key=None if i % 3 else b"k%d" % i, tag="red" if i % 2 else None,
            timestamp=1_700_000_000_000 + i) for i in range(50)],
    [Record(b"only-value", timestamp=5)],
    [Record(b"", key=b"", tag="\u00e9t\u00e9", timestamp=7), Record(b"v", timestamp=8)],
    [Record(b"h", headers={"a": b"1"}, timestamp=9), Record(b"plain", timestamp=10)],
    # values, keys and tags on both sides of Arrow's 12-byte inline view limit
    [Record(bytes(range(i % 40)) * (1 + i % 3), key=b"key-%d-" % i * (i % 4) or None,
            tag="t" * (i % 15) or None, timestamp=11 + i) for i in range(120)],
    # no key and no tag anywhere: those columns are built as all-null at once
    [Record(b"value-%d" % i, timestamp=20 + i) for i in range(40)],
], ids=["mixed", "one", "empty-key-and-unicode-tag", "headers", "long-and-short",
        "no-keys-no-tags"])
def test_column_path_equals_record_path(spark, records, headers):  # spark: parses the schema
    cols = columns(records)
    s = schema(headers)
    assert columns_to_arrow(cols, RANGE, s).equals(to_arrow(cols.records(), RANGE, s))
