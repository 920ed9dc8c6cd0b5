"""``tubeq spark feed`` / ``tubeq spark run NAME``: the pipelines of ``spark_sink.pipelines``.

pyspark is imported only when a pipeline runs, so ``tubeq --help`` stays fast and works on an
install without the ``spark`` extra; running one without it says what to install.
"""
from __future__ import annotations

from pathlib import Path

import click


@click.group()
def spark() -> None:
    """Spark pipelines over format("tubeq") (needs the spark extra and Java 17)."""


@spark.command("feed")
@click.option("--topic", required=True, help="Topic to feed (created if missing).")
@click.option("--rows", type=int, help="Generate this many rows (id, value).")
@click.option("--csv", "csv_path", type=click.Path(path_type=Path),
              help="A CSV file with a header line (or a directory of them).")
@click.option("--parquet", "parquet_path", type=click.Path(path_type=Path),
              help="A Parquet file (or a directory of them).")
@click.option("--size", default=1024, show_default=True, help="Bytes per generated value.")
@click.option("--key-column", help="The column whose value keys each record.")
@click.option("--value-column", help="The column sent as the value (default: the row as JSON; "
                                     "generated rows: value).")
@click.option("--partitions", type=int, help="Partitions of the topic if it is created.")
@click.option("--spark-master", default="local[2]", show_default=True)
@click.pass_context
def feed(ctx: click.Context, topic: str, rows: int | None, csv_path: Path | None,
         parquet_path: Path | None, size: int, key_column: str | None, value_column: str | None,
         partitions: int | None, spark_master: str) -> None:
    """Write a generated dataset or a CSV / Parquet file into a topic through Spark."""
    from spark_sink.pipelines.feed import FeedSpec, run_feed

    spec = FeedSpec(ctx.obj["masters"], topic, rows=rows, size=size, csv=csv_path,
                    parquet=parquet_path, key_column=key_column, value_column=value_column,
                    partitions=partitions)
    _need_pyspark()
    click.echo(run_feed(spec, spark_master, say=lambda s: click.echo(s, err=True)).summary())


@spark.group("run")
def run() -> None:
    """Run a streaming pipeline of spark_sink.pipelines against the cluster."""


@run.command("windows")
@click.option("--source", required=True, help="Topic to read (each record's timestamp is its "
                                               "event time).")
@click.option("--target", required=True, help="Topic the closed windows are written to.")
@click.option("--checkpoint", required=True, help="Checkpoint directory: the query's progress "
                                                  "and the name of its exactly-once sink.")
@click.option("--window", default="10 seconds", show_default=True)
@click.option("--watermark", default="30 seconds", show_default=True)
@click.option("--by", type=click.Choice(["key", "tag", "none"]), default="key",
              show_default=True, help="Count per window and per key, tag, or nothing.")
@click.option("--once", is_flag=True, help="Process what the source holds now, then stop.")
@click.option("--max-per-trigger", type=int, help="Records per micro-batch at most.")
@click.option("--spark-master", default="local[2]", show_default=True)
@click.pass_context
def windows(ctx: click.Context, source: str, target: str, checkpoint: str, window: str,
            watermark: str, by: str, once: bool, max_per_trigger: int | None,
            spark_master: str) -> None:
    """Count records per event-time window into another topic, exactly once."""
    from spark_sink.pipelines import windows as pipeline

    argv = ["--masters", ctx.obj["masters"], "--source", source, "--target", target,
            "--checkpoint", checkpoint, "--window", window, "--watermark", watermark,
            "--by", by, "--spark-master", spark_master]
    argv += ["--once"] if once else []
    argv += ["--max-per-trigger", str(max_per_trigger)] if max_per_trigger else []
    _need_pyspark()
    ctx.exit(pipeline.main(argv))


def _need_pyspark() -> None:
    try:
        import pyspark  # noqa: F401 - only to say what is missing before anything starts
    except ImportError as exc:
        raise click.ClickException(f"tubeq spark needs pyspark ({exc}): "
                                   "pip install 'tubeq[spark]'") from None
