"""``tubeq produce`` and ``tubeq consume``: move lines of text through a topic."""
from __future__ import annotations

import sys
import time

import click

from lib.cli.common import admin


@click.command()
@click.argument("topic")
@click.option("--file", "path", type=click.File("rb"), default="-", show_default=True,
              help="Read messages from this file, one per line ('-': stdin).")
@click.option("--key-separator", default=None,
              help="Split each line at the first separator into key and value.")
@click.option("--tag", default=None, help="Tag every message (brokers can filter on it).")
@click.option("--compression", type=click.Choice(["none", "zlib"]), default="none")
@click.option("--delay", type=float, default=None,
              help="Hold every message back this many seconds (docs/delayed.md).")
@click.option("--deliver-at", type=click.DateTime(["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%d %H:%M:%S%z"]),
              default=None, help="Deliver every message at this time, with its UTC offset "
              "(2026-12-01T02:00:00+0000).")
@click.pass_context
def produce(ctx, topic, path, key_separator, tag, compression, delay, deliver_at) -> None:
    """Send each input line as one message; prints how many were acknowledged."""
    from lib.producer.producer import Producer

    sep = key_separator.encode() if key_separator else None
    later = {"delay": delay, "deliver_at": deliver_at}
    delayed = delay is not None or deliver_at is not None
    bulk = sep is None and compression == "none" and not delayed  # send_batch calls
    sent = 0
    with Producer(ctx.obj["masters"],
                  compression=None if compression == "none" else compression) as producer:
        futures = []
        for lines in _chunks(path, BULK_LINES):
            values = [line.rstrip(b"\r\n") for line in lines]
            if bulk:
                futures.append(producer.send_batch(
                    topic, values, tags=[tag] * len(values) if tag else None))
            else:
                futures += [producer.send(topic, value, key=key, tag=tag, **later)
                            for key, value in (_split(v, sep) for v in values)]
            sent += len(values)
        producer.flush()
        for f in futures:
            f.result()  # raises the first failure, with its reason
    when = " (delayed)" if delayed else ""
    click.echo(f"produced {sent} messages to {topic}{when}", err=True)


BULK_LINES = 10_000


def _chunks(lines, size: int):
    chunk = []
    for line in lines:
        chunk.append(line)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _split(value: bytes, sep: bytes | None) -> tuple[bytes | None, bytes]:
    if sep is not None and sep in value:
        key, value = value.split(sep, 1)
        return key, value
    return None, value


@click.command()
@click.argument("topic")
@click.option("--group", default=None, help="Consume as a member of this group (commits).")
@click.option("--from-beginning", is_flag=True, help="Start at the earliest offset when the "
              "group has nothing committed (without a group: always).")
@click.option("--tags", default=None, help="Comma-separated tags: only these messages.")
@click.option("--max", "max_messages", type=int, default=None, help="Stop after N messages.")
@click.option("--idle-timeout", type=float, default=None,
              help="Stop when nothing arrives for this many seconds.")
@click.option("--print-key/--no-print-key", default=False)
@click.option("--print-offset/--no-print-offset", default=False)
@click.option("--broadcast", is_flag=True, help="As a broadcast instance of --group: every "
              "message, with offsets of its own (docs/broadcast.md).")
@click.option("--instance-id", default="", help="With --broadcast: this instance's stable "
              "name (default: the host name).")
@click.pass_context
def consume(ctx, topic, group, from_beginning, tags, max_messages, idle_timeout, print_key,
            print_offset, broadcast, instance_id) -> None:
    """Print messages as they arrive (Ctrl-C stops; a group commits what was printed)."""
    from lib.consumer.pull import PullConsumer
    from lib.types import TopicPartition

    reset = "earliest" if from_beginning else "latest"
    tag_list = [t for t in (tags or "").split(",") if t] or None
    mode = {"mode": "broadcast"} if broadcast else {}
    if instance_id:  # without --broadcast: refused, naming the problem
        mode["instance_id"] = instance_id
    consumer = PullConsumer(ctx.obj["masters"], group=group, auto_offset_reset=reset, **mode)
    if group:
        consumer.subscribe([topic], group=group, tags=tag_list)
    else:
        info = admin(ctx).describe_topic(topic)
        consumer.assign([TopicPartition(topic, p.partition) for p in info.partitions],
                        tags=tag_list)
        if from_beginning:
            consumer.seek_to_beginning()
        else:
            consumer.seek_to_end()
    out = sys.stdout.buffer
    seen, last = 0, time.monotonic()
    try:
        while max_messages is None or seen < max_messages:
            records = consumer.poll(timeout=0.5)
            if not records:
                if idle_timeout is not None and time.monotonic() - last > idle_timeout:
                    break
                continue
            last = time.monotonic()
            for rec in records[: None if max_messages is None else max_messages - seen]:
                prefix = b""
                if print_offset:
                    prefix += f"{rec.partition}:{rec.offset}\t".encode()
                if print_key:
                    prefix += (rec.key or b"") + b"\t"
                out.write(prefix + rec.value + b"\n")
                seen += 1
            out.flush()
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
    click.echo(f"consumed {seen} messages", err=True)


def register(main: click.Group) -> None:
    main.add_command(produce)
    main.add_command(consume)
