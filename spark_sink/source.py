"""``DefaultSource``: the ``tubeq`` data source as Spark sees it (name, schema, reader, writer).

Spark builds it from the options on the driver (in a planning Python worker) and pickles what
``reader`` / ``writer`` return to the executors. Option checks that need no cluster run when the
DataFrame is defined (``load()`` calls ``schema``; ``save()`` calls ``writer``); the cluster is
asked when the read is planned, still on the driver.
"""
from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from spark_sink.options import OptionError, read_options, write_options
from spark_sink.reader import TubeqReader
from spark_sink.sink import TubeqStreamWriter
from spark_sink.stream import TubeqStreamReader
from spark_sink.writer import TubeqWriter

SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
          "timestamp timestamp, tag string")
HEADERS = ", headers map<string,binary>"


class DefaultSource(DataSource):
    """``spark.read``, ``spark.readStream`` and ``df.write`` with ``.format("tubeq")``."""

    @classmethod
    def name(cls) -> str:
        return "tubeq"

    def schema(self) -> str:
        opts = read_options(self.options)
        return SCHEMA + (HEADERS if opts.include_headers else "")

    def reader(self, schema: StructType) -> DataSourceReader:
        return TubeqReader(read_options(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return TubeqStreamReader(read_options(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise OptionError("mode", "a topic cannot be overwritten: use mode('append')")
        return TubeqWriter(write_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        return TubeqStreamWriter(write_options(self.options), schema)
