"""PySpark data source ``tubeq`` (``spark_sink.source.DefaultSource``).

``DefaultSource`` is imported lazily (PEP 562) so the option and planning modules import without
pyspark, which only the ``spark`` extra installs.
"""
from __future__ import annotations

from typing import Any

__all__ = ["DefaultSource"]


def __getattr__(name: str) -> Any:
    if name == "DefaultSource":
        from spark_sink.source import DefaultSource

        return DefaultSource
    raise AttributeError(f"module 'spark_sink' has no attribute {name!r}")
