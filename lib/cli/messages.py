"""``tubeq message find``: look records up by key or by message id (docs/lookup.md)."""
from __future__ import annotations

from datetime import UTC, datetime

import click

from lib.cli.common import admin, emit, print_rows
from lib.errors import InvalidArgument

VALUE_CHARS = 60  # the table shows this much of a value; --json shows it whole


@click.group()
def message() -> None:
    """Look stored messages up (without consuming them)."""


@message.command("find")
@click.argument("topic", required=False)
@click.option("--key", default=None, help="Records whose key is this (UTF-8) string.")
@click.option("--id", "message_id", default=None, help="The record with this message id.")
@click.option("--since", default=None, help="Only records at or after this time "
              "(epoch ms or ISO 8601, UTC unless it says).")
@click.option("--until", default=None, help="Only records at or before this time.")
@click.option("--limit", type=int, default=64, show_default=True,
              help="At most this many records (the oldest; up to 1000).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def find(ctx, topic, key, message_id, since, until, limit, as_json) -> None:
    """Find records of TOPIC by --key (from each partition's key index, no scan), or a
    record by --id (no TOPIC needed: the id names it)."""
    if (key is None) == (message_id is None):
        raise click.UsageError("give exactly one of --key or --id")
    client = admin(ctx)
    if message_id is not None:
        if since or until:
            raise click.UsageError("--since/--until go with --key, not --id")
        records = [client.find_by_id(message_id)]
    else:
        if not topic:
            raise click.UsageError("--key needs a TOPIC")
        records = client.find_by_key(topic, key, since=_time("since", since),
                                     until=_time("until", until), limit=limit)
    ids = [client.message_id(r) for r in records]
    rows = [{"id": i, "topic": r.topic, "partition": r.partition, "offset": r.offset,
             "timestamp": r.timestamp, "key": r.key, "tag": r.tag, "value": r.value}
            for i, r in zip(ids, records, strict=True)]
    emit(rows, as_json, _table)
    if not as_json:
        click.echo(f"{len(rows)} record(s)", err=True)


def _table(rows: list[dict]) -> None:
    def short(value: bytes | None) -> str:
        text = "" if value is None else value.decode("utf-8", "replace")
        return text if len(text) <= VALUE_CHARS else text[:VALUE_CHARS - 3] + "..."
    print_rows([{**r, "key": short(r["key"]), "value": short(r["value"]),
                 "tag": r["tag"] or ""} for r in rows],
               ["id", "partition", "offset", "timestamp", "key", "tag", "value"])


def _time(name: str, text: str | None) -> int | None:
    if text is None:
        return None
    if text.isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidArgument(f"--{name} {text!r} is neither epoch milliseconds nor an ISO "
                              f"8601 time") from None
    return int((when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp() * 1000)


def register(main: click.Group) -> None:
    main.add_command(message)
