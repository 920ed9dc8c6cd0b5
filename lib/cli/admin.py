"""``tubeq topic|group|broker|txn ...``: admin commands over lib.AdminClient."""
from __future__ import annotations

import dataclasses
import datetime
import time

import click

from lib.cli.common import admin, emit, print_rows
from lib.types import BrokerInfo

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _settings_options(fn):
    for opt in reversed([
        click.option("--partitions", type=int, help="Partition count (alter: can only grow)."),
        click.option("--stores", type=int, help="Storage instances per broker for the topic."),
        click.option("--durability", type=click.Choice(["async", "sync"])),
        click.option("--retention-ms", type=int, help="Delete data older than this (-1: never)."),
        click.option("--retention-bytes", type=int, help="Keep at most this much per store."),
        click.option("--max-message-bytes", type=int, help="Largest message accepted."),
        click.option("--replication-factor", type=int,
                     help="Copies of each partition, on distinct brokers."),
        click.option("--min-insync-replicas", type=int,
                     help="In-sync copies acks=all needs (1..replication factor)."),
        click.option("--unclean-leader-election/--no-unclean-leader-election", default=None,
                     help="With no live in-sync replica, let another live replica lead "
                          "(records only the old ISR held are lost; audited)."),
    ]):
        fn = opt(fn)
    return fn


def _topic_table(info) -> None:
    d = dataclasses.asdict(info)
    parts = d.pop("partitions", [])
    for key, value in d.items():
        click.echo(f"{key:<18} {value}")
    for part in parts:  # a list prints as "1,2,3" in its column
        part.update({k: ",".join(map(str, part[k])) for k in
                     ("replicas", "isr", "replica_lags", "target_replicas") if k in part})
    moving = any(p.get("target_replicas") for p in parts)
    print_rows(parts, [c for c in ("partition", "broker_id", "address", "available",
                                   "leader_epoch", "replicas", "isr", "replica_lags",
                                   "target_replicas", "earliest", "latest", "last_stable",
                                   "disk_bytes")
                       if (not parts or c in parts[0]) and (c != "target_replicas" or moving)])


@click.group()
def topic() -> None:
    """Create, list, describe, alter and delete topics."""


@topic.command("create")
@click.argument("name")
@_settings_options
@json_option
@click.pass_context
def topic_create(ctx, name, as_json, **settings) -> None:
    """Create a topic; unset options take the master's defaults."""
    emit(admin(ctx).create_topic(name, **settings), as_json, _topic_table)


@topic.command("alter")
@click.argument("name")
@_settings_options
@json_option
@click.pass_context
def topic_alter(ctx, name, as_json, **settings) -> None:
    """Change a topic's settings (partitions can only grow)."""
    emit(admin(ctx).alter_topic(name, **settings), as_json, _topic_table)


@topic.command("describe")
@click.argument("name")
@json_option
@click.pass_context
def topic_describe(ctx, name, as_json) -> None:
    """Settings and partitions (leader, epoch, replicas, ISR, earliest, latest) of a topic."""
    emit(admin(ctx).describe_topic(name), as_json, _topic_table)


@topic.command("list")
@json_option
@click.pass_context
def topic_list(ctx, as_json) -> None:
    """Every topic."""
    topics = admin(ctx).list_topics()

    def table(items) -> None:
        print_rows([{"topic": t.name, "partitions": t.partition_count, "stores": t.stores,
                     "durability": t.durability} for t in items],
                   ["topic", "partitions", "stores", "durability"])

    emit(topics, as_json, table)


@topic.command("delete")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def topic_delete(ctx, name, yes) -> None:
    """Delete a topic and its data on every broker."""
    if not yes:
        click.confirm(f"delete topic {name} and all its data?", abort=True)
    admin(ctx).delete_topic(name)
    click.echo(f"deleted {name}")


@click.group()
def group() -> None:
    """List, describe consumer groups and reset their offsets."""


@group.command("list")
@json_option
@click.pass_context
def group_list(ctx, as_json) -> None:
    """Every known consumer group."""
    groups = admin(ctx).list_groups()
    emit(groups, as_json, lambda gs: [click.echo(g) for g in gs])


@group.command("describe")
@click.argument("name")
@json_option
@click.pass_context
def group_describe(ctx, name, as_json) -> None:
    """Members, assignment, committed offsets and lag per partition (a broadcast group's:
    per instance and partition)."""
    def table(info) -> None:
        d = dataclasses.asdict(info)
        broadcast = d.get("mode") == "broadcast" or any(
            p.get("instance_id") for p in d.get("partitions", []))
        mode = f"  mode {d['mode']}" if d.get("mode") else ""
        click.echo(f"group {d.get('group')}  generation {d.get('generation')}{mode}")
        click.echo("members:")
        print_rows(d.get("members", []), ["member_id", "client_host", "assignments"]
                   + (["instance_id"] if broadcast else []))
        click.echo("partitions:")
        print_rows(d.get("partitions", []),
                   (["instance_id"] if broadcast else [])
                   + ["topic", "partition", "committed", "latest", "lag", "member_id"])

    emit(admin(ctx).describe_group(name), as_json, table)


@group.command("reset-offsets")
@click.argument("name")
@click.option("--topic", "topic_name", required=True)
@click.option("--to-earliest", is_flag=True)
@click.option("--to-latest", is_flag=True)
@click.option("--to-offset", type=int)
@click.option("--to-time", type=int, help="Timestamp in ms: first offset at or after it.")
@click.option("--partition", "partitions", type=int, multiple=True, help="Default: all.")
@click.option("--dry-run", is_flag=True, help="Show what would move; change nothing.")
@click.option("--instance", "instance_id", default="",
              help="A broadcast instance's offsets instead (only it must not be live).")
@json_option
@click.pass_context
def group_reset(ctx, name, topic_name, to_earliest, to_latest, to_offset, to_time, partitions,
                dry_run, instance_id, as_json) -> None:
    """Move a group's committed offsets (the group must have no live members), or with
    --instance a broadcast instance's; the answer lists every partition's move (--dry-run:
    only that, nothing changes)."""
    chosen = [x for x in (to_earliest or None, to_latest or None, to_offset, to_time)
              if x is not None]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-offset, "
                               "--to-time")
    result = admin(ctx).reset_group_offsets(
        name, topic_name, to_earliest=to_earliest, to_latest=to_latest, to_offset=to_offset,
        to_timestamp=to_time, partitions=list(partitions) or None, dry_run=dry_run,
        instance_id=instance_id)
    emit(result, True)


@click.group()
def partition() -> None:
    """Move partitions' replicas between brokers."""


def _assignment(spec: str) -> tuple[int, list[int]]:
    """``P=B1,B2,...`` -> (P, [B1, B2, ...])."""
    p, sep, ids = spec.partition("=")
    try:
        if not sep:
            raise ValueError
        return int(p), [int(b) for b in ids.split(",")]
    except ValueError:
        raise click.BadParameter(f"{spec!r} is not PARTITION=BROKER,BROKER,... (e.g. 0=2,3)",
                                 param_hint="ASSIGNMENT") from None


_wait_option = click.option("--wait", "wait_s", type=click.FloatRange(0), default=None,
                            help="Wait up to this many seconds for the moves to finish "
                                 "(exit 1 if they have not).")


@partition.command("reassign")
@click.argument("topic_name")
@click.argument("assignments", nargs=-1, required=True)
@_wait_option
@json_option
@click.pass_context
def partition_reassign(ctx, topic_name, assignments, wait_s, as_json) -> None:
    """Move partitions of TOPIC_NAME to other brokers with no downtime (needs admin on the
    cluster). Each ASSIGNMENT is PARTITION=BROKER,BROKER,..., the preferred leader first, as
    many brokers as the topic's replication factor: e.g. ``0=2,3 1=3,1``.

    The new replicas copy the partition, join the in-sync replicas, then the others leave and
    delete their copies. Reassigning a partition to its current replicas cancels a move.
    """
    wanted = dict(_assignment(a) for a in assignments)
    info = admin(ctx).reassign_partitions(topic_name, wanted)
    if wait_s is not None:
        info = _wait_moved(ctx, topic_name, set(wanted), wait_s)
    emit(info, as_json, _topic_table)
    if wait_s is not None and any(p.target_replicas for p in info.partitions
                                  if p.partition in wanted):
        click.echo(f"error: reassignment of {topic_name} not finished within {wait_s:g} s",
                   err=True)
        ctx.exit(1)


def _wait_moved(ctx, topic_name: str, partitions: set[int], wait_s: float):
    """The topic once ``partitions`` have no reassignment in progress, or as it is after
    ``wait_s`` seconds."""
    deadline = time.monotonic() + wait_s
    while True:
        info = admin(ctx).describe_topic(topic_name)
        busy = [p for p in info.partitions if p.target_replicas and p.partition in partitions]
        if not busy or time.monotonic() >= deadline:
            return info
        time.sleep(0.25)


@click.group()
def broker() -> None:
    """List brokers; drain a broker (its replicas move to others) and undrain it."""


@broker.command("list")
@json_option
@click.pass_context
def broker_list(ctx, as_json) -> None:
    """Registered brokers, whether they are alive or draining, and their data dir's free space.

    disk_full means the broker refuses appends with DISK_FULL until space is freed; draining
    means no new partition is placed there and its replicas move off (tubeq broker drain);
    replicas and leaders count the partitions it holds a copy of and leads.
    """
    brokers = admin(ctx).list_brokers()
    columns = [f.name for f in dataclasses.fields(BrokerInfo) if f.name != "staying"]
    emit(brokers, as_json,
         lambda bs: print_rows([dataclasses.asdict(b) for b in bs], columns))
    for b in brokers:
        if b.disk_full:
            click.echo(f"warning: broker {b.broker_id} ({b.address}) is refusing appends: disk "
                       f"full ({b.disk_free_bytes} bytes free, reserve {b.disk_reserve_bytes})",
                       err=True)


broker_id_argument = click.argument("broker_id", type=click.IntRange(0, 2**31 - 1))


@broker.command("drain")
@broker_id_argument
@_wait_option
@json_option
@click.pass_context
def broker_drain(ctx, broker_id, wait_s, as_json) -> None:
    """Retire broker BROKER_ID (needs admin on the cluster): no new partition goes there and
    every replica it holds moves to another live broker, with no downtime.

    A replica no other broker can take now (too few brokers) stays: draining again retries
    it. ``tubeq broker list`` shows the replicas it still holds.
    """
    client = admin(ctx)
    info = client.drain_broker(broker_id)
    deadline = time.monotonic() + (wait_s or 0)
    while wait_s is not None and info.replicas > info.staying \
            and time.monotonic() < deadline:
        time.sleep(0.25)
        info = dataclasses.replace(next(b for b in client.list_brokers()
                                        if b.broker_id == broker_id), staying=info.staying)
    emit(info, as_json, lambda b: click.echo(
        f"broker {b.broker_id} ({b.address}) is draining: new partitions go to other brokers; "
        f"it holds {b.replicas} replica(s)"
        + (f", {b.staying} of which no other live broker can take now" if b.staying else "")))
    if wait_s is not None and info.replicas > info.staying:
        click.echo(f"error: broker {broker_id} still holds {info.replicas} replica(s) after "
                   f"{wait_s:g} s", err=True)
        ctx.exit(1)


@broker.command("undrain")
@broker_id_argument
@json_option
@click.pass_context
def broker_undrain(ctx, broker_id, as_json) -> None:
    """Let placement use broker BROKER_ID again (needs admin on the cluster)."""
    emit(admin(ctx).undrain_broker(broker_id), as_json, lambda b: click.echo(
        f"broker {b.broker_id} ({b.address}) takes new partitions again"))


@click.group()
def master() -> None:
    """Inspect the masters (a Raft group: one active, the others hot standbys)."""


@master.command("status")
@json_option
@click.pass_context
def master_status(ctx, as_json) -> None:
    """Each master's role, Raft term, epoch, commit and applied index, lag.

    Asks every master of --masters directly; exits 1 when none is active.
    """
    rows = admin(ctx).master_status()
    emit(rows, as_json, lambda ss: print_rows(
        [dataclasses.asdict(s) for s in ss],
        ["address", "role", "leader", "term", "epoch", "commit_index", "applied_index", "lag",
         "error"]))
    if not any(s.role == "leader" for s in rows):
        click.echo("error: no master is active", err=True)
        ctx.exit(1)


@click.group()
def txn() -> None:
    """List, describe and abort transactions (the coordinator on the masters; `tubeq txn`
    is the same command)."""


@txn.command("list")
@click.option("--all", "every", is_flag=True, help="Also the ids with no transaction open.")
@json_option
@click.pass_context
def txn_list(ctx, every, as_json) -> None:
    """Transactions open or ending: producer id, epoch, state, partitions, age, timeout."""
    emit(admin(ctx).list_transactions(every), as_json, lambda ts: print_rows(
        [{**dataclasses.asdict(t), "partitions": len(t.partitions)} for t in ts],
        ["transactional_id", "producer_id", "producer_epoch", "state", "partitions",
         "age_ms", "timeout_ms"]))


@txn.command("describe")
@click.argument("transactional_id")
@json_option
@click.pass_context
def txn_describe(ctx, transactional_id, as_json) -> None:
    """One transaction: its state, producer id and epoch, age, and every partition and
    consumer offset it holds (a stuck one shows what it blocks: read_committed readers of
    those partitions stop at its first record)."""
    t = admin(ctx).describe_transaction(transactional_id)

    def show(info) -> None:
        print_rows([{k: v for k, v in dataclasses.asdict(info).items()
                     if k not in ("partitions", "offsets")}],
                   ["transactional_id", "producer_id", "producer_epoch", "state", "age_ms",
                    "timeout_ms"])
        if info.partitions:
            click.echo("")
            print_rows([{"topic": t, "partition": p} for t, p in info.partitions],
                       ["topic", "partition"])
        if info.offsets:
            click.echo("")
            print_rows([{"group": g, "topic": t, "partition": p, "offset": o}
                        for g, t, p, o in info.offsets],
                       ["group", "topic", "partition", "offset"])
    emit(t, as_json, show)


@txn.command("abort")
@click.argument("transactional_id")
@json_option
@click.pass_context
def txn_abort(ctx, transactional_id, as_json) -> None:
    """Abort a transactional_id's open transaction, fencing its producer (admin only)."""
    emit(admin(ctx).abort_transaction(transactional_id), as_json)


@click.command("audit")
@click.option("--limit", type=click.IntRange(1, 10_000), default=100, show_default=True,
              help="How many of the newest entries to read.")
@click.option("--action", "actions", multiple=True,
              help="Only these actions (repeat), e.g. login, refused, create_topic, add_acl.")
@click.option("--principal", default="", help="Only entries of this principal.")
@json_option
@click.pass_context
def audit(ctx, limit, actions, principal, as_json) -> None:
    """The audit log, oldest first: admin changes, logins, refused calls (summarised: COUNT
    in DETAILS says how many calls an entry stands for). Needs admin on the cluster."""
    entries = [e for e in admin(ctx).audit_log(limit)
               if (not actions or e.action in actions)
               and (not principal or e.principal == principal)]
    emit(entries, as_json, lambda es: print_rows(
        [{**dataclasses.asdict(e), "time": _when(e.time_ms)} for e in es],
        ["time", "principal", "action", "target", "peer", "details"]))


def _when(time_ms: int) -> str:
    return datetime.datetime.fromtimestamp(time_ms / 1000, datetime.UTC).strftime(
        "%Y-%m-%d %H:%M:%S")


def register(main: click.Group) -> None:
    for cmd in (topic, partition, group, broker, master, txn, audit):
        main.add_command(cmd)
    main.add_command(txn, "transaction")  # the name; `txn` for short
