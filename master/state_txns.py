"""The transactions part of the master's state: per ``transactional_id``, the producer id and
epoch its current instance holds and its transaction's state (docs/transactions.md).

A record (the ``txns`` database, keyed by the transactional_id)::

    {"producer_id", "epoch", "state", "partitions": [[topic, partition], ...] (sorted),
     "offsets": [[group, topic, partition, offset], ...] (sorted; AddOffsetsToTxn),
     "timeout_ms", "began_ms" (wall ms the transaction went ONGOING; 0 before),
     "updated_ms", "seq" (1 for the first write, + 1 at every write),
     "ended", "next" (from an EndTxn on: the ending instance's [producer id, epoch] and the
     [producer id, epoch] it goes on with; the record takes ``next`` once COMPLETE_*),
     "oneshot", "check" (a RocketMQ half message: master/half_decisions.py; it is written
     ONGOING at once, and forgotten once COMPLETE_*)}

States (Kafka's KIP-98 coordinator): EMPTY (an instance, no transaction yet), ONGOING
(partitions added), PREPARE_COMMIT / PREPARE_ABORT (decided: markers being written),
COMPLETE_COMMIT / COMPLETE_ABORT (every marker written).

Commands:

* ``txn_write`` (``transactional_id``, ``seq``, ``record``): the coordinator
  (master/transactions.py) computes the next record (master/txn_decisions.py) and writes it
  whole, as Kafka's coordinator appends the whole transaction metadata to its log. ``seq`` is
  the record's ``seq`` as the coordinator read it (0: none yet): a record changed meanwhile
  refuses the write (ConcurrentTransactions), so no change is ever lost to another. The
  transition must be one of :data:`TRANSITIONS`, and a producer id's epoch never goes back:
  every master refuses the same commands, so a bug cannot make the state unfold differently
  on a standby.
* ``txn_expire`` (``transactional_ids``, ``before_ms``): forget ids with no transaction open
  (EMPTY, COMPLETE_*) last changed before ``before_ms`` (``transactional_id_expiration_ms``
  unused, as Kafka's); an id changed since is kept.
"""
from __future__ import annotations

from typing import Any

from lib.errors import ConcurrentTransactions, InvalidArgument, InvalidTxnState
from lib.names import check_name
from master.state_tables import Context, Handler, dump, load, read_all

EMPTY, ONGOING = "EMPTY", "ONGOING"
PREPARE_COMMIT, PREPARE_ABORT = "PREPARE_COMMIT", "PREPARE_ABORT"
COMPLETE_COMMIT, COMPLETE_ABORT = "COMPLETE_COMMIT", "COMPLETE_ABORT"
STATES = (EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT)
PREPARING = (PREPARE_COMMIT, PREPARE_ABORT)
IDLE = (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT)  # no transaction open: a new one may begin
OPEN = (ONGOING, *PREPARING)
MAX_EPOCH = (1 << 15) - 1  # the batch header holds producer_epoch as an int16
MAX_PARTITIONS = 100_000  # in one transaction: a larger one is a bug, not a need
# state before (None: no record) -> the states a write may move it to
TRANSITIONS: dict[str | None, frozenset[str]] = {
    None: frozenset({EMPTY}),
    EMPTY: frozenset({EMPTY, ONGOING, COMPLETE_COMMIT, COMPLETE_ABORT}),
    ONGOING: frozenset({ONGOING, PREPARE_COMMIT, PREPARE_ABORT}),
    PREPARE_COMMIT: frozenset({COMPLETE_COMMIT}),
    PREPARE_ABORT: frozenset({COMPLETE_ABORT}),
    COMPLETE_COMMIT: frozenset({EMPTY, ONGOING, COMPLETE_COMMIT, COMPLETE_ABORT}),
    COMPLETE_ABORT: frozenset({EMPTY, ONGOING, COMPLETE_COMMIT, COMPLETE_ABORT}),
}
_INTS = ("producer_id", "epoch", "timeout_ms", "began_ms")


class TxnRecords:
    """Transaction records by transactional_id (cached; the ``txns`` database)."""

    def __init__(self, env: Any, txns_db: Any) -> None:
        self._db = txns_db
        self._txns: dict[str, dict[str, Any]] = read_all(env, txns_db)

    def handlers(self) -> dict[str, Handler]:
        """op -> the handler :class:`~master.state.MetaState` applies it with."""
        return {"txn_write": self._write, "txn_expire": self._expire}

    def all(self) -> dict[str, dict[str, Any]]:
        """transactional_id -> record (do not mutate: records are replaced, never changed)."""
        return dict(self._txns)

    def get(self, transactional_id: str) -> dict[str, Any] | None:
        return self._txns.get(transactional_id)

    # -- commands ------------------------------------------------------------------------

    def _write(self, ctx: Context, cmd: dict[str, Any]) -> dict[str, Any]:
        txn, staged = ctx
        tid = check_name(cmd.get("transactional_id"), "transactional_id")
        raw = txn.get(tid.encode(), db=self._db)
        old = None if raw is None else load(raw)
        if cmd.get("seq") != (0 if old is None else old["seq"]):
            raise ConcurrentTransactions(
                f"transactional_id {tid!r} changed meanwhile: retry", transactional_id=tid)
        new = _checked(tid, cmd.get("record"))
        _check_transition(tid, old, new)
        record = {**new, "updated_ms": int(cmd["time_ms"]),
                  "seq": 1 if old is None else old["seq"] + 1}
        txn.put(tid.encode(), dump(record), db=self._db)
        staged.append(lambda: self._txns.__setitem__(tid, record))
        return record

    def _expire(self, ctx: Context, cmd: dict[str, Any]) -> list[str]:
        txn, staged = ctx
        before, gone = int(cmd["before_ms"]), []
        for tid in cmd.get("transactional_ids", ()):
            raw = txn.get(str(tid).encode(), db=self._db) if isinstance(tid, str) else None
            if raw is None:
                continue
            record = load(raw)
            if record["state"] in IDLE and record["updated_ms"] < before:
                txn.delete(tid.encode(), db=self._db)
                gone.append(tid)

        def publish() -> None:
            for tid in gone:
                self._txns.pop(tid, None)
        staged.append(publish)
        return gone


def _checked(tid: str, record: Any) -> dict[str, Any]:
    """The record's fields, checked (InvalidArgument names the bad one)."""
    if not isinstance(record, dict):
        raise InvalidArgument(f"transaction record of {tid!r} missing")
    for name in _INTS:
        value = record.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidArgument(f"transaction record of {tid!r}: bad {name} {value!r:.40}")
    if record["producer_id"] < 1 or record["epoch"] > MAX_EPOCH:
        raise InvalidArgument(f"transaction record of {tid!r}: producer id "
                              f"{record['producer_id']} epoch {record['epoch']} out of range")
    if record.get("state") not in STATES:
        raise InvalidArgument(f"transaction record of {tid!r}: bad state "
                              f"{record.get('state')!r:.40}")
    checked = {**{name: record[name] for name in _INTS}, "state": record["state"],
               **_checked_lists(tid, record)}
    if record.get("oneshot") is True:
        checked["oneshot"] = True
    if record.get("check") is not None:
        checked["check"] = _checked_check(tid, record["check"])
    for name in ("ended", "next"):
        pair = record.get(name)
        if pair is None:
            continue
        if not (isinstance(pair, list) and len(pair) == 2 and all(
                isinstance(v, int) and not isinstance(v, bool) for v in pair)
                and pair[0] >= 1 and 0 <= pair[1] <= MAX_EPOCH):
            raise InvalidArgument(f"transaction record of {tid!r}: bad {name} {pair!r:.40}")
        checked[name] = pair
    return checked


def _checked_lists(tid: str, record: dict[str, Any]) -> dict[str, list]:
    """``partitions`` and ``offsets``, checked and sorted."""
    parts = record.get("partitions")
    if not isinstance(parts, list) or len(parts) > MAX_PARTITIONS or not all(
            isinstance(p, list) and len(p) == 2 and isinstance(p[0], str)
            and isinstance(p[1], int) for p in parts):
        raise InvalidArgument(f"transaction record of {tid!r}: bad partitions")
    offsets = record.get("offsets", [])
    if not isinstance(offsets, list) or len(offsets) > MAX_PARTITIONS or not all(
            isinstance(o, list) and len(o) == 4 and isinstance(o[0], str)
            and isinstance(o[1], str) and isinstance(o[2], int) and isinstance(o[3], int)
            and o[3] >= 0 for o in offsets):
        raise InvalidArgument(f"transaction record of {tid!r}: bad offsets")
    return {"partitions": sorted(parts), "offsets": sorted(offsets)}


def _checked_check(tid: str, check: Any) -> dict[str, Any]:
    """A half message's ``check`` entry (master/half_decisions.py), checked."""
    if not (isinstance(check, dict) and isinstance(check.get("group"), str)
            and all(isinstance(check.get(k), int) and not isinstance(check.get(k), bool)
                    and check[k] >= 0 for k in ("checks", "next_ms"))):
        raise InvalidArgument(f"transaction record of {tid!r}: bad check {check!r:.60}")
    return {"group": check_name(check["group"], "group"), "checks": check["checks"],
            "next_ms": check["next_ms"]}


def _check_transition(tid: str, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
    before = None if old is None else old["state"]
    half = old is None and new.get("oneshot") and new["state"] == ONGOING  # a half message
    if new["state"] not in TRANSITIONS[before] and not half:
        raise InvalidTxnState(f"transactional_id {tid!r} cannot go from {before} to "
                              f"{new['state']}", transactional_id=tid, state=before or "")
    if old is not None and new["producer_id"] == old["producer_id"] \
            and new["epoch"] < old["epoch"]:
        raise InvalidTxnState(f"transactional_id {tid!r}: epoch {new['epoch']} is older than "
                              f"{old['epoch']}", transactional_id=tid, state=before or "")
    if before not in OPEN:
        return
    kept = (new["partitions"] == old["partitions"] or (
        new["state"] == ONGOING and set(map(tuple, old["partitions"])) <= set(
            map(tuple, new["partitions"])))) and (
        new["state"] == ONGOING or new["offsets"] == old.get("offsets", []))
    moved_on = new["state"] in IDLE and new["producer_id"] == old.get("next", [0])[0]
    if (new["producer_id"] != old["producer_id"] and not moved_on) or not kept:
        raise InvalidTxnState(f"transactional_id {tid!r}: an open transaction keeps its "
                              "producer id, partitions and offsets (it may add some while "
                              "ONGOING)",
                              transactional_id=tid, state=before)
