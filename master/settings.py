"""Topic settings: plain dicts in the state machine, ``TopicSettings`` on the wire.

Proto3 cannot tell "unset" from zero, so a zero field means "use the default" on create and
"keep the current value" on alter. Every value is checked here with a message that names the
field and its limit; the state machine stores only settings that passed.
"""
from __future__ import annotations

from typing import Any

from lib.errors import InvalidArgument
from lib.proto import master_pb2 as mpb
from master.config import (
    DURABILITIES,
    MAX_MESSAGE_LIMIT,
    MasterConfig,
)

FIELDS = ("partitions", "stores", "durability", "retention_ms", "retention_bytes",
          "max_message_bytes", "replication_factor", "min_insync_replicas",
          "unclean_leader_election")
OPTIONAL = ("unclean_leader_election",)  # proto3 ``optional``: present, even when false
# What a topic written before replication existed has: one copy.
SINGLE_COPY = {"replication_factor": 1, "min_insync_replicas": 1,
               "unclean_leader_election": False}


def defaults(config: MasterConfig) -> dict[str, Any]:
    return {"partitions": config.default_partitions, "stores": config.default_stores,
            "durability": config.default_durability, "retention_ms": config.default_retention_ms,
            "retention_bytes": config.default_retention_bytes,
            "max_message_bytes": config.default_max_message_bytes,
            "replication_factor": config.default_replication_factor,
            "min_insync_replicas": config.default_min_insync_replicas,
            "unclean_leader_election": config.default_unclean_leader_election}


def _given(pb: mpb.TopicSettings | None) -> dict[str, Any]:
    """The non-zero fields of a request's settings."""
    if pb is None:
        return {}
    return {f: getattr(pb, f) for f in FIELDS
            if (pb.HasField(f) if f in OPTIONAL else getattr(pb, f))}


def for_create(pb: mpb.TopicSettings | None, config: MasterConfig) -> dict[str, Any]:
    """Settings of a new topic: the request's non-zero fields over the defaults, validated.

    ``stores`` left at zero follows the partitions down (a 1-partition topic gets 1 store), and
    ``min_insync_replicas`` follows the replication factor down.
    """
    given = _given(pb)
    out = {**defaults(config), **given}
    if "stores" not in given:
        out["stores"] = min(out["stores"], out["partitions"])
    if "min_insync_replicas" not in given:
        out["min_insync_replicas"] = min(out["min_insync_replicas"], out["replication_factor"])
    check(out, config)
    return out


def for_alter(current: dict[str, Any], pb: mpb.TopicSettings | None,
              config: MasterConfig) -> dict[str, Any]:
    """Settings after an alter: partitions may only grow, stores never change."""
    given = _given(pb)
    out = {**SINGLE_COPY, **{f: current[f] for f in FIELDS if f in current}, **given}
    if out["partitions"] < current["partitions"]:
        raise InvalidArgument(
            f"partitions can only grow: the topic has {current['partitions']}, "
            f"asked for {out['partitions']}", field="partitions", current=current["partitions"])
    if out["stores"] != current["stores"]:
        raise InvalidArgument(
            f"stores cannot change after creation (topic has {current['stores']}, asked for "
            f"{out['stores']}): partitions live in store p % stores", field="stores")
    check(out, config)
    return out


def check(s: dict[str, Any], config: MasterConfig) -> None:
    """Raise InvalidArgument naming the first field outside its limits."""
    limit = config.max_partitions_per_topic
    _require(1 <= s["partitions"] <= limit, "partitions", s["partitions"], f"1..{limit}")
    _require(1 <= s["stores"] <= s["partitions"], "stores", s["stores"],
             f"1..partitions ({s['partitions']})")
    _require(s["durability"] in DURABILITIES, "durability", s["durability"],
             " or ".join(DURABILITIES))
    _require(s["retention_ms"] > 0 or s["retention_ms"] == -1, "retention_ms",
             s["retention_ms"], "> 0, or -1 for no age limit")
    _require(s["retention_bytes"] > 0 or s["retention_bytes"] == -1, "retention_bytes",
             s["retention_bytes"], "> 0, or -1 for no size limit")
    _require(1 <= s["max_message_bytes"] <= MAX_MESSAGE_LIMIT, "max_message_bytes",
             s["max_message_bytes"], f"1..{MAX_MESSAGE_LIMIT}")
    most = config.max_replication_factor
    _require(1 <= s["replication_factor"] <= most, "replication_factor",
             s["replication_factor"], f"1..{most}")
    _require(1 <= s["min_insync_replicas"] <= s["replication_factor"], "min_insync_replicas",
             s["min_insync_replicas"], f"1..replication_factor ({s['replication_factor']})")
    _require(isinstance(s["unclean_leader_election"], bool), "unclean_leader_election",
             s["unclean_leader_election"], "true or false")


def _require(ok: bool, field: str, value: Any, allowed: str) -> None:
    if not ok:
        raise InvalidArgument(f"invalid topic setting {field}={value!r}: must be {allowed}",
                              field=field, value=str(value), allowed=allowed)


def to_pb(settings: dict[str, Any], topic_id: int) -> mpb.TopicSettings:
    return mpb.TopicSettings(topic_id=topic_id,
                             **{f: {**SINGLE_COPY, **settings}[f] for f in FIELDS})
