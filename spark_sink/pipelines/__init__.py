"""Ready-made Spark jobs over the ``tubeq`` data source.

``feed`` writes a generated dataset or a CSV / Parquet file into a topic
(``python -m spark_sink.pipelines.feed`` or ``tubeq spark feed``); ``windows`` counts a topic's
records over event-time windows with a watermark into another topic, exactly once
(``python -m spark_sink.pipelines.windows`` or ``tubeq spark run windows``); ``local`` starts
and stops the local Spark session they (and ``load/bench_spark.py``) run in. Nothing here
imports pyspark at import time of this package.
"""
