"""Helpers shared by the ``tubeq`` subcommands: output as JSON or tables, the admin client."""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable
from typing import Any

import click

DEFAULT_MASTERS = "127.0.0.1:8715,127.0.0.1:8716,127.0.0.1:8717"  # cluster up's 3


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
