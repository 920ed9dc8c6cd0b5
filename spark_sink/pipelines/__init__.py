"""Ready-made Spark jobs over the ``tubeq`` data source.

``feed`` writes a generated dataset or a CSV / Parquet file into a topic
(``python -m spark_sink.pipelines.feed`` or ``tubeq spark feed``); ``local`` starts and stops
the local Spark session they (and ``load/bench_spark.py``) run in. Nothing here imports pyspark
at import time of this package.
"""
