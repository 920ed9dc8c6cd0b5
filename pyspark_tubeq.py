"""Spark's entry point for ``format("tubeq")``: the code lives in ``spark_sink``.

PySpark imports every installed top-level module whose name starts with ``pyspark_`` and
registers its ``DefaultSource``; this module exists only to be found that way.
"""
from spark_sink import DefaultSource

__all__ = ["DefaultSource"]
