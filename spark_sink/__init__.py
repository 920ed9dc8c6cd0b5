"""PySpark data source and pipelines: arrives after the "Cluster" issue."""
