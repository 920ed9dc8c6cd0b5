"""RocketMQ's transactional messages on the transaction coordinator, as pure decisions
(docs/transactions.md): a half message is a one-record transaction the master opens itself
(``oneshot``, forgotten once it completes), with a ``check`` entry: if its producer has not
ended it ``check_back_after_ms`` after it began, a live producer of its group is asked for
the local transaction's outcome, every ``check_back_interval_ms``, at most
``check_back_max`` times (RocketMQ's transactionCheckMax), then it is rolled back. A
commit or rollback decided by a check is the coordinator's own: its markers carry the
epoch bumped, which fences the producer that began it.

A record's ``check``: ``{"group", "checks" (asked so far), "next_ms" (wall ms of the next)}``.
"""
from __future__ import annotations

from typing import Any

from master.state_txns import MAX_EPOCH, ONGOING, PREPARE_COMMIT
from master.txn_decisions import aborting, fields_of

Record = dict[str, Any]
COMMIT, ROLLBACK, UNKNOWN = "commit", "rollback", "unknown"


def on_half_begin(group: str, topic: str, partition: int, producer_id: int, now_ms: int,
                  timeout_ms: int, after_ms: int) -> Record:
    """The record of a new half message: ONGOING at once with its one partition."""
    return {"producer_id": producer_id, "epoch": 0, "state": ONGOING,
            "partitions": [[topic, partition]], "offsets": [], "timeout_ms": timeout_ms,
            "began_ms": now_ms, "oneshot": True,
            "check": {"group": group, "checks": 0, "next_ms": now_ms + after_ms}}


def checks_due(records: dict[str, Record], now_ms: int) -> list[str]:
    """The half messages still ONGOING whose next check is due."""
    return sorted(tid for tid, r in records.items()
                  if r["state"] == ONGOING and "check" in r and r["check"]["next_ms"] <= now_ms)


def next_check(record: Record, now_ms: int, interval_ms: int, max_checks: int
               ) -> tuple[str, Record]:
    """("check", the record with one more check counted) for a half message to ask about
    now, or ("rollback", its PREPARE_ABORT) once it was asked ``max_checks`` times."""
    check = record["check"]
    if check["checks"] >= max_checks:
        return ROLLBACK, aborting(record)
    return "check", {**fields_of(record), "check": {
        **check, "checks": check["checks"] + 1, "next_ms": now_ms + interval_ms}}


def on_check_result(record: Record | None, producer_id: int, epoch: int, outcome: str
                    ) -> tuple[str, Record | None]:
    """A producer's answer to a check: ("commit"/"rollback", the PREPARE_* record), or
    ("stale", None) when the half message ended or moved on meanwhile, or ("unknown", None)
    to ask again at the next check."""
    if record is None or record["state"] != ONGOING or "check" not in record \
            or (record["producer_id"], record["epoch"]) != (producer_id, epoch):
        return "stale", None
    if outcome == COMMIT:
        return COMMIT, committing(record)
    if outcome == ROLLBACK:
        return ROLLBACK, aborting(record)
    return UNKNOWN, None


def committing(record: Record) -> Record:
    """An ONGOING half message committed by the coordinator (a check said so):
    PREPARE_COMMIT with the epoch bumped, so its markers fence the producer that began it."""
    return {**fields_of(record), "state": PREPARE_COMMIT,
            "epoch": min(record["epoch"] + 1, MAX_EPOCH)}
