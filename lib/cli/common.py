"""Helpers shared by the ``tubeq`` subcommands: output as JSON or tables, the admin client."""
from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Iterable
from typing import Any

import click

DEFAULT_MASTERS = "127.0.0.1:8715,127.0.0.1:8716,127.0.0.1:8717"  # cluster up's 3
DEFAULT_CREDENTIALS = "tubeq-data/credentials"  # what cluster up writes, run from here
DEFAULT_CLUSTER_JSON = "tubeq-data/cluster.json"  # a running cluster up's summary


CLIENT_CREDENTIAL_ENV = ("TUBEQ_USER", "TUBEQ_PASSWORD", "TUBEQ_API_KEY", "TUBEQ_TOKEN",
                         "TUBEQ_CREDENTIALS_FILE", "TUBEQ_CLUSTER_SECRET_FILE")


def use_credentials(user: str | None, credentials_file: str | None,
                    cluster_secret_file: str | None = None) -> None:
    """Make ``--user`` / ``--credentials-file`` / ``--cluster-secret-file`` the process's
    client credentials. Every client the command makes reads them from the environment
    (lib/auth/client.py), as it would TUBEQ_USER/TUBEQ_PASSWORD or TUBEQ_CREDENTIALS_FILE
    given directly."""
    from lib.auth.client import CLUSTER_SECRET_FILE_ENV, CREDENTIALS_FILE_ENV, Credentials

    if cluster_secret_file:  # break glass: nothing else may take precedence
        Credentials.from_cluster_secret(cluster_secret_file)  # a bad file fails here, clearly
        for var in CLIENT_CREDENTIAL_ENV:
            os.environ.pop(var, None)
        os.environ[CLUSTER_SECRET_FILE_ENV] = cluster_secret_file
    elif user:
        password = os.environ.get("TUBEQ_PASSWORD") or click.prompt(
            f"password for {user}", hide_input=True, err=True)
        os.environ.update({"TUBEQ_USER": user, "TUBEQ_PASSWORD": password})
    elif credentials_file:
        os.environ[CREDENTIALS_FILE_ENV] = credentials_file
    elif not any(os.environ.get(v) for v in CLIENT_CREDENTIAL_ENV) \
            and os.path.exists(DEFAULT_CREDENTIALS):
        os.environ[CREDENTIALS_FILE_ENV] = DEFAULT_CREDENTIALS


def use_tls(ca: str | None, cert: str | None, key: str | None) -> None:
    """Make ``--tls-ca`` / ``--tls-cert`` / ``--tls-key`` the TLS of every client of the
    command (lib/tls.py reads TUBEQ_TLS_*); with none of them set anywhere, the TLS files of
    a local ``cluster up --tls`` that runs now (its cluster.json names them)."""
    from lib.tls import TLS_CA_ENV, TLS_CERT_ENV, TLS_ENV, TLS_KEY_ENV

    given = {TLS_CA_ENV: ca, TLS_CERT_ENV: cert, TLS_KEY_ENV: key}
    if any(given.values()):
        os.environ.update({k: v for k, v in given.items() if v})
        return
    if any(os.environ.get(v) for v in (*given, TLS_ENV)):
        return
    try:
        with open(DEFAULT_CLUSTER_JSON) as f:
            local = json.load(f)
        found = {var: local.get(var.removeprefix("TUBEQ_").lower()) for var in given}
    except (OSError, ValueError, AttributeError):
        return
    os.environ.update({k: v for k, v in found.items() if isinstance(v, str) and v})


def _jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {k: _jsonable(v) for k, v in dataclasses.asdict(obj).items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "replace")
    return obj


def emit(obj: Any, as_json: bool, table: Callable[[Any], None] | None = None) -> None:
    """Print a result as JSON or through ``table``."""
    if as_json or table is None:
        click.echo(json.dumps(_jsonable(obj), indent=2, default=str))
    else:
        table(obj)


def print_rows(rows: Iterable[dict[str, Any]], columns: list[str]) -> None:
    rows = list(rows)
    widths = {c: max([len(c)] + [len(str(r.get(c, ""))) for r in rows]) for c in columns}
    click.echo("  ".join(c.upper().ljust(widths[c]) for c in columns))
    for r in rows:
        click.echo("  ".join(str(r.get(c, "")).ljust(widths[c]) for c in columns))


def admin(ctx: click.Context):
    from lib.admin import AdminClient

    client = AdminClient(ctx.obj["masters"], timeout=ctx.obj["timeout"])
    ctx.call_on_close(client.close)
    return client
