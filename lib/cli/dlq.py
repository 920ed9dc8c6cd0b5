"""``tubeq dlq``: a consumer group's dead letters (docs/retry.md): list, show, replay, purge."""
from __future__ import annotations

import click

from lib.cli.common import admin, emit, print_rows

PREVIEW = 60  # characters of a value shown in the table


def _dead_letters(ctx):
    from lib.dead_letters import DeadLetters

    return DeadLetters(ctx.obj["masters"], admin(ctx))


@click.group()
def dlq() -> None:
    """Dead letters of consumer groups: records that failed max_attempts times."""


@dlq.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def dlq_list(ctx, as_json) -> None:
    """Every group's dead-letter topic and how many records it holds."""
    topics = _dead_letters(ctx).topics()
    emit(topics, as_json, lambda ts: print_rows(
        [{"group": t.group, "topic": t.topic, "records": t.records} for t in ts],
        ["group", "topic", "records"]))


@dlq.command("show")
@click.argument("group")
@click.option("--max", "limit", type=int, default=20, show_default=True)
@click.option("--from-offset", type=int, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def dlq_show(ctx, group, limit, from_offset, as_json) -> None:
    """The group's dead letters: where each came from, its failures and the last error."""
    letters = _dead_letters(ctx).show(group, limit, from_offset)

    def table(rows) -> None:
        print_rows([{"offset": f"{r.partition}/{r.offset}",
                     "origin": f"{r.origin_topic}[{r.origin_partition}]@{r.origin_offset}",
                     "attempts": r.attempts, "error": r.error[:PREVIEW],
                     "value": r.value[:PREVIEW].decode("utf-8", "replace")} for r in rows],
                   ["offset", "origin", "attempts", "error", "value"])

    emit(letters, as_json, table)


@dlq.command("replay")
@click.argument("group")
@click.option("--to", "to_topic", default=None,
              help="Publish to this topic instead of each record's original one.")
@click.option("--max", "limit", type=int, default=None, help="At most this many (default all).")
@click.option("--from-offset", type=int, default=0, show_default=True)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def dlq_replay(ctx, group, to_topic, limit, from_offset, yes) -> None:
    """Publish the group's dead letters again (audited); they stay in the dead-letter topic
    until purged."""
    if not yes:
        click.confirm(f"replay the dead letters of {group} to "
                      f"{to_topic or 'their original topics'}?", abort=True)
    count = _dead_letters(ctx).replay(group, to_topic, limit, from_offset)
    click.echo(f"replayed {count} dead letters of {group}")


@dlq.command("purge")
@click.argument("group")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def dlq_purge(ctx, group, yes) -> None:
    """Delete every dead letter of the group (audited)."""
    if not yes:
        click.confirm(f"delete every dead letter of {group}?", abort=True)
    count = _dead_letters(ctx).purge(group)
    click.echo(f"purged {count} dead letters of {group}")


def register(main: click.Group) -> None:
    main.add_command(dlq)
