"""``tubeq load run`` / ``tubeq load ui``: Locust load tests (load/run.py). Locust and gevent
are imported only in the Locust process, so ``tubeq --help`` stays fast."""
from __future__ import annotations

from pathlib import Path

import click

from lib.cli.common import DEFAULT_CLUSTER_JSON

LOCUST_OPTIONS = [  # the locustfile's own options, passed through as given
    ("--message-bytes", int, "Bytes per message (at least 28: the loss-accounting stamp)."),
    ("--batch", int, "Messages per producer task (one Locust request per acknowledged batch)."),
    ("--linger-ms", int, "Producer linger_ms."),
    ("--rate", float, "Messages/s per producer user (default: as fast as it goes)."),
    ("--keys", int, "Distinct keys cycled through (default: none)."),
    ("--tag", str, "Tag every message."),
]


def _plan_options(fn):
    for flag, kind, text in reversed(LOCUST_OPTIONS):
        fn = click.option(flag, type=kind, help=text)(fn)
    for decorator in reversed([
        click.option("--scenario", default="mixed", show_default=True,
                     type=click.Choice(["produce", "consume", "mixed", "portal", "soak"])),
        click.option("--users", default=10, show_default=True, help="Locust users."),
        click.option("--spawn-rate", default=5.0, show_default=True, help="Users started/s."),
        click.option("--topic", default="load", show_default=True,
                     help="Topic written and read (made if missing)."),
        click.option("--partitions", default=6, show_default=True,
                     help="Partitions of the topic if it is made."),
        click.option("--durability", type=click.Choice(["sync", "async"]), default="sync",
                     show_default=True, help="Durability of the topic if it is made."),
        click.option("--sync-sends", is_flag=True, help="send_sync one message at a time."),
        click.option("--workers", default=0, show_default=True,
                     help="Local Locust worker processes under one Locust master (0: one "
                          "process)."),
        click.option("--portal-url", default="", help="The portal (portal scenario)."),
        click.option("--out", type=click.Path(path_type=Path), default=Path("load-runs"),
                     show_default=True, help="Each run gets a folder in here."),
        click.option("--cluster-json", type=click.Path(path_type=Path),
                     default=Path(DEFAULT_CLUSTER_JSON), show_default=True,
                     help="soak: the cluster whose processes are sampled (`tubeq cluster up` "
                          "writes it; with --chaos the run's own cluster is sampled)."),
        click.option("--sample-every", "sample_every_s", default=5.0, show_default=True,
                     help="soak: seconds between samples of every process."),
        click.option("--chaos", default="", metavar="INTERVAL",
                     help="Start a cluster of the run's own (3 masters, 2 brokers; --masters "
                          "is not used) and SIGKILL and restart one of its processes every "
                          "INTERVAL (30s, 2m)."),
        click.option("--chaos-targets", default="broker,master,consumer", show_default=True,
                     help="What --chaos kills, in turn."),
        click.option("--chaos-faults", default=0, show_default=True,
                     help="Stop injecting after this many faults (0: to the end)."),
    ]):
        fn = decorator(fn)
    return fn


def _plan(ctx: click.Context, duration: str, kw: dict):
    from load.run import LoadPlan

    passthrough: list[str] = []
    for flag, _kind, _text in LOCUST_OPTIONS:
        value = kw.pop(flag.lstrip("-").replace("-", "_"))
        if value is not None:
            passthrough += [flag, str(value)]
    if kw.pop("sync_sends"):
        passthrough.append("--sync-sends")
    from load.chaos import parse_interval, parse_targets

    chaos, targets = kw.pop("chaos"), kw.pop("chaos_targets")
    try:
        if chaos:
            kw["chaos_s"], kw["chaos_targets"] = parse_interval(chaos), parse_targets(targets)
        plan = LoadPlan(masters=ctx.obj["masters"], duration=duration,
                        options=tuple(passthrough), **kw)
        plan.validate()
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    return plan


@click.group()
def load() -> None:
    """Locust load tests of the cluster and the portal, with loss accounting."""


@load.command("run")
@_plan_options
@click.option("--duration", default="1m", show_default=True,
              help="How long: 20s, 10m, 1h30m (Locust's --run-time).")
@click.pass_context
def load_run(ctx: click.Context, duration: str, **kw) -> None:
    """Run a scenario headless; prints the run folder (summary.json, report.html, CSVs)."""
    import json

    from load.run import run

    try:
        summary, folder = run(_plan(ctx, duration, kw))
    except ValueError as exc:  # e.g. a soak with no cluster.json to find the processes in
        raise click.ClickException(str(exc)) from None
    accounting = summary["accounting"]
    total = summary["locust"].get("Aggregated", {})
    click.echo(json.dumps({k: accounting[k] for k in (
        "produced", "acknowledged", "consumed", "lost", "duplicated", "out_of_order")}))
    click.echo(f"locust: {total.get('requests', 0)} requests, {total.get('failures', 0)} "
               f"failures, p99 {total.get('p99_ms', 0)} ms; "
               f"{summary['acknowledged_per_s']} msgs/s acknowledged")
    for fault in (summary["chaos"] or {}).get("faults", []):
        after = (f"recovered in {fault['recovered_s']} s" if fault["recovered_s"] is not None
                 else f"NOT RECOVERED: {fault['error']}")
        click.echo(f"fault: {fault['target']} (pid {fault['pid']}) killed at "
                   f"{fault['at_s']} s, {after}")
    for name, p in ((summary["soak"] or {}).get("processes") or {}).items():
        click.echo(f"soak: {name:<9} RSS {p['rss_baseline_mib']} -> {p['rss_end_mib']} MiB "
                   f"({p['rss_growth']:+.1%}), fds {p['open_fds_baseline']} -> "
                   f"{p['open_fds_end']}, disk {p['disk_end_mib']} MiB"
                   f"{'' if p['judged'] else ' (load generator, not judged)'}")
    for failure in accounting["failures"]:
        click.echo(f"FAILED: {failure}", err=True)
    if summary["soak"] and not summary["soak"]["flat_memory"]:
        click.echo("FAILED: a process's RSS grew more than "
                   f"{summary['soak']['rss_growth_limit']:.0%} (see soak.html)", err=True)
    click.echo(f"run folder: {folder}")
    if not summary["ok"]:
        raise SystemExit(1)


@load.command("ui")
@_plan_options
@click.pass_context
def load_ui(ctx: click.Context, **kw) -> None:
    """Locust's web UI on http://127.0.0.1:8089 with the scenario's users (Ctrl-C stops)."""
    from load.run import ui

    if kw.get("chaos"):
        raise click.BadParameter("--chaos works with `tubeq load run` only", param_hint="--chaos")
    raise SystemExit(ui(_plan(ctx, "0s", kw)))
