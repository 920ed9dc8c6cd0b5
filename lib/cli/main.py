"""The ``tubeq`` command: run a local cluster, manage topics and groups, move messages, bench.

Every command talks to the masters given by ``--masters`` (or ``TUBEQ_MASTERS``); errors are
printed as one line naming the problem and exit with status 1. ``--json`` output is stable
enough for scripts.
"""
from __future__ import annotations

import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import click

from lib.cli import admin as cli_admin
from lib.cli import bench as cli_bench
from lib.cli import data as cli_data
from lib.cli import dlq as cli_dlq
from lib.cli import messages as cli_messages
from lib.cli import security as cli_security
from lib.cli.common import (
    DEFAULT_CLUSTER_JSON,
    DEFAULT_CREDENTIALS,
    DEFAULT_MASTERS,
    use_credentials,
    use_tls,
)
from lib.errors import TubeqError


class TubeqGroup(click.Group):
    """Turns TubeqError into one clear line and exit status 1 (no traceback), and adds the
    plugins' command groups (:func:`load_plugin`) only when one is named or listed: loading
    them imports Spark's and Locust's sides, which would double every command's start."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *plugin_names()})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        command = super().get_command(ctx, name)
        if command is None and (command := load_plugin(name)) is not None:
            self.add_command(command, name)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TubeqError as exc:
            click.echo(f"error: {type(exc).__name__}: {exc.message}", err=True)
            sys.exit(1)


@click.group(cls=TubeqGroup)
@click.option("--masters", envvar="TUBEQ_MASTERS", default=DEFAULT_MASTERS, show_default=True,
              help="Comma-separated master addresses (env TUBEQ_MASTERS).")
@click.option("--timeout", default=10.0, show_default=True, help="Seconds to wait for a master.")
@click.option("--user", help="Log in as this user; the password comes from TUBEQ_PASSWORD or a "
                             "prompt (env TUBEQ_USER).")
@click.option("--credentials-file", type=click.Path(dir_okay=False),
              help="A 0600 file of user = / password = (or api_key = / token =) lines, like the "
                   "one cluster up writes (env TUBEQ_CREDENTIALS_FILE; default "
                   f"{DEFAULT_CREDENTIALS} if it exists).")
@click.option("--cluster-secret-file", type=click.Path(dir_okay=False),
              envvar="TUBEQ_CLUSTER_SECRET_FILE",
              help="Break glass, on a cluster host: act as the cluster itself with the secret "
                   "its brokers and masters share (cluster up's <data-dir>/cluster-secret). "
                   "Passes every ACL and IP rule: to recover from an IP-list lockout or a lost "
                   "admin password. Audited as 'cluster'.")
@click.option("--tls-ca", type=click.Path(dir_okay=False), help="TLS: the CA (PEM) the "
              "servers' certificates chain to (env TUBEQ_TLS_CA; default: the one of a local "
              f"cluster up --tls, from {DEFAULT_CLUSTER_JSON}).")
@click.option("--tls-cert", type=click.Path(dir_okay=False),
              help="Mutual TLS: this client's certificate (PEM; env TUBEQ_TLS_CERT).")
@click.option("--tls-key", type=click.Path(dir_okay=False),
              help="Mutual TLS: the key of --tls-cert (PEM; env TUBEQ_TLS_KEY).")
@click.pass_context
def main(ctx: click.Context, masters: str, timeout: float, user: str | None,
         credentials_file: str | None, cluster_secret_file: str | None, tls_ca: str | None,
         tls_cert: str | None, tls_key: str | None) -> None:
    """tubeq: a distributed message queue shaped like Apache TubeMQ."""
    ctx.obj = {"masters": masters, "timeout": timeout}
    use_credentials(user, credentials_file, cluster_secret_file)
    use_tls(tls_ca, tls_cert, tls_key)


# ------------------------------------------------------------------ cluster

@main.group()
def cluster() -> None:
    """Run a local cluster."""


@cluster.command("up")
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path("tubeq-data"),
              show_default=True, help="Where every process keeps its data and log.txt.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--masters", "n_masters", default=3, show_default=True,
              help="Master processes (a Raft group: 1 or an odd number).")
@click.option("--brokers", default=2, show_default=True, help="Broker processes.")
@click.option("--master-port", default=8715, show_default=True, help="First master port (0: any).")
@click.option("--broker-port", default=8123, show_default=True, help="First broker port (0: any).")
@click.option("--portal/--no-portal", default=True, show_default=True)
@click.option("--portal-port", default=8080, show_default=True)
@click.option("--kafka-port", default=9092, show_default=True,
              help="First broker's Kafka protocol port (0: any free port; -1: no Kafka port).")
@click.option("--tls", is_flag=True, help="TLS on every port, with a private CA and "
                                          "certificates made under DATA_DIR/tls.")
@click.option("--tls-client-auth", is_flag=True,
              help="Mutual TLS (implies --tls): clients present a certificate the CA signed.")
def cluster_up(data_dir: Path, host: str, n_masters: int, brokers: int, master_port: int,
               broker_port: int, portal: bool, portal_port: int, kafka_port: int, tls: bool,
               tls_client_auth: bool) -> None:
    """Start masters, brokers and the portal as child processes; Ctrl-C stops them all."""
    from lib.cli.cluster import ClusterPlan, run_cluster

    if n_masters < 1 or brokers < 1:
        raise click.BadParameter("a cluster needs at least one master and one broker")
    if n_masters % 2 == 0:
        raise click.BadParameter(f"--masters must be odd (a Raft majority of {n_masters} "
                                 f"survives no more failures than of {n_masters - 1})")
    run_cluster(ClusterPlan(data_dir.resolve(), host, n_masters, brokers, master_port,
                            broker_port, portal, portal_port, tls or tls_client_auth,
                            tls_client_auth, kafka_port))


PLUGIN_GROUP = "tubeq.commands"


def _broken(name: str, error: BaseException) -> click.Command:
    """Stands in for a command group that failed to load: says why when it is run."""
    @click.command(name, help=f"(unavailable: {error})", context_settings={
        "ignore_unknown_options": True, "allow_extra_args": True})
    def broken() -> None:
        raise click.ClickException(f"tubeq {name} is unavailable: {type(error).__name__}: "
                                   f"{error}")
    return broken


def load_plugin(name: str) -> click.Command | None:
    """The command group a package above ``lib`` contributes as ``name`` through the
    ``tubeq.commands`` entry point (``tubeq spark`` from spark_sink, ``tubeq load`` from load),
    as click plugins do: ``lib`` never imports the floors above it. A group that fails to load
    becomes a command that says why, so one broken extra leaves the rest of the CLI working."""
    for ep in entry_points(group=PLUGIN_GROUP, name=name):
        try:
            return ep.load()
        except Exception as exc:  # noqa: BLE001 - any import failure of a plugin
            return _broken(ep.name, exc)
    return None


def plugin_names() -> list[str]:
    return sorted({ep.name for ep in entry_points(group=PLUGIN_GROUP)})


for _module in (cli_admin, cli_data, cli_dlq, cli_messages, cli_bench, cli_security):
    _module.register(main)
