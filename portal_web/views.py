"""The data behind the pages and the JSON API, as plain dicts: one function per thing shown or
done, so a page and its API route cannot disagree. Input from forms and query strings is
checked here, with errors that name the field and its limits."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from lib.admin import AdminClient
from lib.errors import TubeqError
from portal_web.errors import PortalError
from portal_web.sampler import Sampler

TOPIC_SORTS = ("name", "partitions", "durability", "created")
TOPIC_SETTINGS = ("partitions", "stores", "retention_ms", "retention_bytes", "max_message_bytes")


def plain(obj: Any) -> Any:
    return dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) else obj


def integer(args: Mapping[str, Any], name: str, default: int | None, low: int,
            high: int) -> int | None:
    """``args[name]`` as an integer in [low, high]; ``default`` when absent or empty."""
    raw = args.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise PortalError(400, "INVALID_ARGUMENT",
                          f"{name} must be an integer, got {str(raw)[:40]!r}") from None
    if not low <= value <= high:
        raise PortalError(400, "INVALID_ARGUMENT",
                          f"{name} must be between {low} and {high}, got {value}")
    return value


def flag(args: Mapping[str, Any], name: str) -> bool | None:
    """``args[name]`` as a boolean (JSON true/false, or a form's "true"/"false"); None when
    absent or empty."""
    raw = args.get(name)
    if raw is None or raw == "":
        return None
    if isinstance(raw, bool):
        return raw
    if str(raw).lower() in ("true", "false"):
        return str(raw).lower() == "true"
    raise PortalError(400, "INVALID_ARGUMENT",
                      f"{name} must be true or false, got {str(raw)[:40]!r}")


def paginate(items: list, args: Mapping[str, Any], page_size: int, max_page_size: int) -> dict:
    per_page = integer(args, "per_page", page_size, 1, max_page_size)
    page = integer(args, "page", 1, 1, 1_000_000)
    start = (page - 1) * per_page
    return {"items": items[start:start + per_page], "total": len(items), "page": page,
            "per_page": per_page, "pages": max(1, -(-len(items) // per_page))}


def topics(client: AdminClient, args: Mapping[str, Any], page_size: int,
           max_page_size: int) -> dict:
    """Topics matching ``q`` (a substring of the name), sorted, one page of them."""
    query = str(args.get("q", ""))[:249]
    sort = str(args.get("sort", "name"))
    if sort.lstrip("-") not in TOPIC_SORTS:
        raise PortalError(400, "INVALID_ARGUMENT",
                          f"sort must be one of {', '.join(TOPIC_SORTS)} (- for descending)")
    rows = [_topic_row(t) for t in client.list_topics() if query in t.name]
    key = {"name": "name", "partitions": "partition_count", "durability": "durability",
           "created": "created_ms"}[sort.lstrip("-")]
    rows.sort(key=lambda r: (r[key], r["name"]), reverse=sort.startswith("-"))
    return {**paginate(rows, args, page_size, max_page_size), "q": query, "sort": sort}


def _topic_row(topic) -> dict:
    row = plain(topic)
    row["messages"] = sum(max(0, p.latest - max(p.earliest, 0)) for p in topic.partitions
                          if p.latest >= 0)
    row["unavailable"] = sum(1 for p in topic.partitions if not p.available)
    row["disk_bytes"] = sum(max(0, p.disk_bytes) for p in topic.partitions)
    return row


def topic(client: AdminClient, name: str, sampler: Sampler | None = None) -> dict:
    """A topic with its partitions, each with its rate in msgs/s now (None: not sampled)."""
    row = _topic_row(client.describe_topic(name))
    rates = sampler.partition_rates() if sampler is not None else {}
    for p in row["partitions"]:
        p["rate"] = rates.get((name, p["partition"]))
    return row


def alter_topic(client: AdminClient, name: str, form: Mapping[str, Any]) -> dict:
    """Change the settings given (empty fields keep theirs); partitions can only grow."""
    settings = {
        "partitions": integer(form, "partitions", None, 1, 10_000),
        "retention_ms": integer(form, "retention_ms", None, 0, 2**62),
        "retention_bytes": integer(form, "retention_bytes", None, 0, 2**62),
        "max_message_bytes": integer(form, "max_message_bytes", None, 1, 2**31 - 1),
    }
    durability = str(form.get("durability") or "") or None
    if durability is None and all(v is None for v in settings.values()):
        raise PortalError(400, "INVALID_ARGUMENT", "nothing to change: give partitions, "
                          "durability, retention_ms, retention_bytes or max_message_bytes")
    return _topic_row(client.alter_topic(name, durability=durability, **settings))


def create_topic(client: AdminClient, form: Mapping[str, Any]) -> dict:
    settings = {
        "partitions": integer(form, "partitions", None, 1, 10_000),
        "stores": integer(form, "stores", None, 1, 1_000),
        "retention_ms": integer(form, "retention_ms", None, 0, 2**62),
        "retention_bytes": integer(form, "retention_bytes", None, 0, 2**62),
        "max_message_bytes": integer(form, "max_message_bytes", None, 1, 2**31 - 1),
        "replication_factor": integer(form, "replication_factor", None, 1, 1_000),
        "min_insync_replicas": integer(form, "min_insync_replicas", None, 1, 1_000),
        "unclean_leader_election": flag(form, "unclean_leader_election"),
    }
    durability = str(form.get("durability") or "") or None
    created = client.create_topic(str(form.get("name", "")), durability=durability, **settings)
    return _topic_row(created)


def delete_topic(client: AdminClient, name: str, confirm: str) -> None:
    """Deletes only when ``confirm`` repeats the topic's name (typed by the operator)."""
    if confirm != name:
        raise PortalError(400, "CONFIRMATION", f"type the topic's name ({name}) to delete it")
    client.delete_topic(name)


def masters(portal_client: AdminClient) -> list[dict]:
    return [plain(m) for m in portal_client.master_status()]


def rates(sampler: Sampler | None) -> dict:
    """Messages in and out per second over the sampled history (see sampler.py)."""
    if sampler is None:
        return {"sampling": "off: start the portal with --monitor-credentials-file",
                "in": [], "out": []}
    return {"sampling": sampler.error or "on", **sampler.rates()}


def lag_history(sampler: Sampler | None, group: str) -> list[tuple[int, int]]:
    return sampler.lag(group) if sampler is not None else []


GROWING_LAG_SAMPLES = 6  # a group whose lag rose at each of this many samples is an alert


def overview(portal_client: AdminClient, client: AdminClient,
             sampler: Sampler | None = None) -> dict:
    """The dashboard: masters, brokers, counts and alerts; each part that fails says why and
    the others still show (a slow or missing master costs its part, not the page)."""
    out: dict[str, Any] = {"masters": masters(portal_client), "problems": []}
    for part, fetch in (("brokers", lambda: [plain(b) for b in client.list_brokers()]),
                        ("topics", lambda: [_topic_row(t) for t in client.list_topics()]),
                        ("groups", client.list_groups)):
        try:
            out[part] = fetch()
        except TubeqError as err:
            out[part] = None
            out["problems"].append(f"{part}: {err.message}")
    out["alerts"] = alerts(out)
    if sampler is not None and out["groups"]:
        visible = set(out["groups"])  # the sampler sees all groups; the caller, theirs
        out["alerts"] += [
            f"group {name}: its lag grew at each of the last {GROWING_LAG_SAMPLES} samples "
            f"(now {sampler.lag(name)[-1][1]})"
            for name in sampler.growing_lags(GROWING_LAG_SAMPLES) if name in visible]
    return out


def alerts(view: Mapping[str, Any]) -> list[str]:
    found = []
    for m in view["masters"]:
        if m["role"] == "unreachable":
            found.append(f"master {m['address']} is unreachable: {m['error']}")
        elif m["lag"] > 1000:
            found.append(f"master {m['address']} lags {m['lag']} log entries behind")
    if view["masters"] and not any(m["role"] == "leader" for m in view["masters"]):
        found.append("no master is active (election in progress, or no quorum)")
    for b in view.get("brokers") or ():
        if not b["alive"]:
            found.append(f"broker {b['broker_id']} ({b['address']}) is down")
        elif b["disk_full"]:
            found.append(f"broker {b['broker_id']} has a full disk: appends are refused")
        if b.get("draining"):
            found.append(f"broker {b['broker_id']} is draining (info): no new partitions are "
                         f"placed on it; it still holds {b.get('replicas', 0)} replica(s)")
    for t in view.get("topics") or ():
        if t["unavailable"]:
            found.append(f"topic {t['name']}: {t['unavailable']} partition(s) unavailable")
    return found


def group(client: AdminClient, name: str) -> dict:
    """A group's description and total lag; a broadcast group's also per instance
    (``instances``: id, live member or "", lag over its partitions), docs/broadcast.md."""
    info = plain(client.describe_group(name))
    info["lag"] = sum(max(0, p["lag"]) for p in info["partitions"])
    instances: dict[str, dict] = {}
    for p in info["partitions"]:
        if p["instance_id"]:
            row = instances.setdefault(p["instance_id"], {
                "instance_id": p["instance_id"], "member_id": p["member_id"], "lag": 0})
            row["lag"] += max(0, p["lag"])
    info["instances"] = [instances[k] for k in sorted(instances)]
    info["retries"] = group_topics(client, name)
    return info


def group_topics(client: AdminClient, name: str) -> dict | None:
    """The group's retry and dead-letter topics (docs/retry.md), if it has them: offsets
    its retry topic took so far (the moved records and their transactions' commit markers)
    and offsets its dead-letter topic holds (the dead letter page counts the records)."""
    owned = {t.owner_role: client.describe_topic(t.name)  # live offsets, not the last stats
             for t in client.list_topics() if t.owner_group == name}
    if not owned:
        return None
    retry, dlq = owned.get("retry"), owned.get("dlq")
    return {"retry_topic": retry.name if retry else "",
            "retry_offsets": sum(max(0, p.latest) for p in retry.partitions) if retry else 0,
            "dlq_topic": dlq.name if dlq else "",
            "dlq_offsets": sum(max(0, p.latest - p.earliest) for p in dlq.partitions)
            if dlq else 0}


def transactions(client: AdminClient, args: Mapping[str, Any]) -> dict:
    """The transactions open or ending (``all=1``: every transactional_id kept), those the
    caller may describe, oldest first: what a stuck one holds (partitions, offsets) and how
    long it has been open against its timeout."""
    every = args.get("all") in ("1", "true")
    items = sorted((plain(t) for t in client.list_transactions(every)),
                   key=lambda t: (-t["age_ms"], t["transactional_id"]))
    for t in items:
        t["overdue"] = t["state"] == "ONGOING" and t["age_ms"] > t["timeout_ms"]
    return {"all": every, "items": items}


RESET_TARGETS = ("earliest", "latest", "offset", "time")


def reset_offsets(client: AdminClient, name: str, form: Mapping[str, Any],
                  dry_run: bool) -> dict:
    """Move (or, with ``dry_run``, preview moving) a group's offsets of one topic to
    ``to`` = earliest | latest | offset (``value``: the offset) | time (``value``: ms since
    the epoch, or ``YYYY-MM-DDTHH:MM[:SS]`` in UTC); ``partitions``: comma-separated, empty
    for all. The master computes and checks the moves either way, so a preview shows exactly
    what the reset will do (or why it will be refused)."""
    to = str(form.get("to", ""))
    if to not in RESET_TARGETS:
        raise PortalError(400, "INVALID_ARGUMENT",
                          f"to must be one of {', '.join(RESET_TARGETS)}, got {to[:40]!r}")
    target: dict[str, Any] = {"to_earliest": to == "earliest", "to_latest": to == "latest"}
    if to == "offset":
        target["to_offset"] = integer(form, "value", None, 0, 2**62)
        if target["to_offset"] is None:
            raise PortalError(400, "INVALID_ARGUMENT", "value: give the offset to reset to")
    elif to == "time":
        target["to_timestamp"] = time_ms(form, "value")
    instance = str(form.get("instance_id") or "").strip()  # a broadcast instance's offsets
    info = client.reset_group_offsets(name, str(form.get("topic", "")), dry_run=dry_run,
                                      partitions=partition_list(form, "partitions"),
                                      instance_id=instance, **target)
    moves = [{**plain(m), "delta": m.to_offset - max(m.from_offset, 0)} for m in info.moves]
    return {"group": name, "topic": str(form.get("topic", "")), "to": to,
            "value": str(form.get("value", "")), "partitions": str(form.get("partitions", "")),
            "instance_id": instance, "dry_run": dry_run, "moves": moves}


def time_ms(form: Mapping[str, Any], name: str) -> int:
    """A time field: ms since the epoch, or an ISO date-time (UTC unless it names a zone)."""
    raw = str(form.get(name, "")).strip()
    if raw.isdigit():
        return integer(form, name, 0, 0, 2**62)
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        raise PortalError(400, "INVALID_ARGUMENT", f"{name} must be ms since the epoch or "
                          f"YYYY-MM-DDTHH:MM[:SS] (UTC), got {raw[:40]!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0, int(when.timestamp() * 1000))


def partition_list(form: Mapping[str, Any], name: str) -> list[int] | None:
    """Comma-separated partition numbers (or, from JSON, a list); None (all) when empty."""
    given = form.get(name) or ""
    raw = ",".join(map(str, given)) if isinstance(given, list) else str(given).strip()
    if not raw:
        return None
    try:
        parts = sorted({int(p) for p in raw.replace(" ", "").split(",") if p})
    except ValueError:
        raise PortalError(400, "INVALID_ARGUMENT", f"{name} must be partition numbers "
                          f"separated by commas, got {raw[:40]!r}") from None
    if any(p < 0 or p > 100_000 for p in parts):
        raise PortalError(400, "INVALID_ARGUMENT", f"{name} must be between 0 and 100000")
    return parts


def audit(client: AdminClient, args: Mapping[str, Any]) -> dict:
    """Audit entries, newest first, filtered by principal, action, target (substrings) and
    time (``since_ms``/``until_ms``)."""
    limit = integer(args, "limit", 1000, 1, 10_000)
    since = integer(args, "since_ms", 0, 0, 2**62)
    until = integer(args, "until_ms", 2**62, 0, 2**62)
    wanted = {k: str(args.get(k, ""))[:200] for k in ("principal", "action", "target")}
    rows = [plain(e) for e in client.audit_log(limit)
            if since <= e.time_ms <= until
            and all(v in getattr(e, k) for k, v in wanted.items())]
    return {"items": rows, "total": len(rows), **wanted}
