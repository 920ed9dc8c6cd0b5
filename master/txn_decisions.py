"""The transaction coordinator's decisions, pure: from a transactional_id's record (as
master/state_txns.py keeps it) and a request, the record to write next, or the error to answer.
No I/O, no clock (``now`` is passed in): master/transactions.py writes what these decide,
and tests/unit/test_txn_decisions.py walks them.

Fencing (Kafka's KIP-98): a new instance of a transactional_id (InitProducerId) keeps the
producer id and takes epoch + 1; a call with an older epoch, or with a producer id the
transactional_id no longer has (a new id was taken when the epoch ran out), is
ProducerFenced, not retriable. The epoch travels in batch headers as an int16: an instance
never gets :data:`~master.state_txns.MAX_EPOCH` itself, which stays free for the bump of
an abort the coordinator starts (a timeout, an admin), so even the last instance of an id is
fenced by its abort markers; an id whose epoch would reach it takes a new producer id
(epoch 0) instead.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lib.errors import (
    ConcurrentTransactions,
    InvalidArgument,
    InvalidTxnState,
    ProducerFenced,
    UnknownTransactionalId,
)
from master.state_txns import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    EMPTY,
    IDLE,
    MAX_EPOCH,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    PREPARING,
)

Record = dict[str, Any]
WAIT = "wait"  # the transaction is ending: wait for its markers (or answer retriable)
MARKER_RETRY_FIRST_MS, MARKER_RETRY_MAX_MS = 50, 2000


def timeout_of(asked_ms: int, default_ms: int, max_ms: int) -> int:
    """The transaction timeout an InitProducerId asks for (0: the default), within the max."""
    if asked_ms == 0:
        return default_ms
    if not 0 < asked_ms <= max_ms:
        raise InvalidArgument(f"transaction_timeout_ms {asked_ms} is above the masters' "
                              f"transaction_max_timeout_ms {max_ms}", max_ms=max_ms)
    return asked_ms


def check_instance(tid: str, record: Record | None, producer_id: int, epoch: int) -> Record:
    """The record, if the caller is its transactional_id's current instance; else the error
    (UnknownTransactionalId, ProducerFenced, InvalidArgument for an epoch never handed out)."""
    if record is None:
        raise UnknownTransactionalId(
            f"unknown transactional_id {tid!r}: call InitProducerId with it first (or it "
            "expired unused)", transactional_id=tid)
    if producer_id != record["producer_id"] or epoch < record["epoch"]:
        raise ProducerFenced(
            f"producer {producer_id} epoch {epoch} is fenced: a newer instance of "
            f"transactional_id {tid!r} holds producer {record['producer_id']} epoch "
            f"{record['epoch']}", transactional_id=tid, producer_id=record["producer_id"],
            producer_epoch=record["epoch"])
    if epoch > record["epoch"]:
        raise InvalidArgument(f"producer {producer_id} epoch {epoch} of transactional_id "
                              f"{tid!r} was never handed out (the current one is "
                              f"{record['epoch']})", transactional_id=tid)
    return record


def on_init(record: Record | None, timeout_ms: int, new_producer_id: Callable[[], int]
            ) -> tuple[str, Record | None]:
    """InitProducerId: ("write", the new instance's record) once nothing is open; ("abort",
    the PREPARE_ABORT record) for a transaction left ONGOING (aborted first, with the epoch
    bumped); (WAIT, None) while one is ending."""
    if record is not None and record["state"] in PREPARING:
        return WAIT, None
    if record is not None and record["state"] == ONGOING:
        return "abort", aborting(record)
    if record is None or record["epoch"] + 1 >= MAX_EPOCH:
        producer_id, epoch = new_producer_id(), 0
    else:
        producer_id, epoch = record["producer_id"], record["epoch"] + 1
    return "write", {"producer_id": producer_id, "epoch": epoch, "state": EMPTY,
                     "partitions": [], "offsets": [], "timeout_ms": timeout_ms, "began_ms": 0}


def aborting(record: Record) -> Record:
    """The ONGOING transaction aborted by the coordinator (an InitProducerId, its timeout, an
    admin): PREPARE_ABORT with the epoch bumped, so its markers fence the old instance."""
    return {**fields_of(record), "state": PREPARE_ABORT,
            "epoch": min(record["epoch"] + 1, MAX_EPOCH)}


def on_add(record: Record, partitions: list[tuple[str, int]], now_ms: int) -> Record | None:
    """AddPartitionsToTxn: the record with the partitions added (ONGOING; begun now if it was
    not), or None when nothing changes (all were added before)."""
    state = record["state"]
    if state in PREPARING:
        raise ConcurrentTransactions(
            f"the last transaction is still ending ({state}): retry", state=state)
    wanted = {(t, p) for t, p in partitions}
    if state == ONGOING:
        known = {(t, p) for t, p in record["partitions"]}
        if wanted <= known:
            return None
        return {**fields_of(record), "partitions": sorted(map(list, known | wanted))}
    if not wanted:
        return None
    return {**fields_of(record), "state": ONGOING, "partitions": sorted(map(list, wanted)),
            "offsets": [], "began_ms": now_ms}


def on_add_offsets(record: Record, group: str, offsets: list[tuple[str, int, int]],
                   now_ms: int) -> Record | None:
    """AddOffsetsToTxn: the record with the group's offsets in the transaction (ONGOING;
    begun now if it was not; a partition named again takes the later offset), or None when
    nothing changes."""
    state = record["state"]
    if state in PREPARING:
        raise ConcurrentTransactions(
            f"the last transaction is still ending ({state}): retry", state=state)
    ongoing = state == ONGOING
    held = {(g, t, p): o for g, t, p, o in (record.get("offsets", []) if ongoing else [])}
    merged = {**held, **{(group, t, p): o for t, p, o in offsets}}
    if ongoing and merged == held:
        return None
    if not ongoing and not offsets:
        return None
    rows = sorted([g, t, p, o] for (g, t, p), o in merged.items())
    if ongoing:
        return {**fields_of(record), "offsets": rows}
    return {**fields_of(record), "state": ONGOING, "partitions": [], "offsets": rows,
            "began_ms": now_ms}


def on_end(tid: str, record: Record | None, producer_id: int, epoch: int, commit: bool,
           new_producer_id: Callable[[], int], keep_epoch: bool = False
           ) -> tuple[str, Record | None]:
    """EndTxn: ("write", the next record) for a transaction to end; (WAIT, None) when it is
    being ended the same way (a retry: wait for its markers); ("done", None) when it ended
    so already (a retry after a lost answer).

    Ending bumps the epoch (KIP-890 part 2): the markers carry epoch + 1, so a late batch or
    a late marker of the ended transaction is fenced on every partition it touched, and the
    next transaction starts its sequences at 0 under the new epoch (a batch that failed in
    this one leaves no gap behind). The record keeps ``ended`` (the caller's producer id and
    epoch: its retry is recognised) and ``next`` (what the caller uses from now on: the same
    producer id with epoch + 1, or a new producer id with epoch 0 when the epoch runs out).
    ``keep_epoch`` (Kafka's classic clients, which know no bump): the markers carry the
    caller's epoch and it goes on with it, its sequences continuing, as before KIP-890.
    """
    state = None if record is None else record["state"]
    word = "commit" if commit else "abort"
    prepare, complete = (PREPARE_COMMIT, COMPLETE_COMMIT) if commit else \
        (PREPARE_ABORT, COMPLETE_ABORT)
    if record is not None and record.get("ended") == [producer_id, epoch] \
            and state in (*PREPARING, COMPLETE_COMMIT, COMPLETE_ABORT):
        if state == prepare:
            return WAIT, None
        if state == complete:
            return "done", None
        raise InvalidTxnState(f"cannot {word} the transaction of transactional_id {tid!r}: "
                              f"it is {state}", transactional_id=tid, state=state)
    record = check_instance(tid, record, producer_id, epoch)
    if state == ONGOING:
        if keep_epoch:
            marker_epoch, after = epoch, [producer_id, epoch]
        elif epoch + 1 < MAX_EPOCH:
            marker_epoch, after = epoch + 1, [producer_id, epoch + 1]
        else:
            marker_epoch, after = MAX_EPOCH, [new_producer_id(), 0]
        return "write", {**fields_of(record), "state": prepare, "epoch": marker_epoch,
                         "next": after, "ended": [producer_id, epoch]}
    if state == EMPTY:  # nothing was added: nothing to mark, nothing to fence
        return "write", {**fields_of(record), "state": complete, "began_ms": 0}
    if state == prepare:  # a record from before epoch bumps at each end
        return WAIT, None
    if state == complete:
        return "done", None
    raise InvalidTxnState(f"cannot {word} the transaction of transactional_id {tid!r}: it is "
                          f"{state}", transactional_id=tid, state=state)


def after_end(record: Record | None, producer_id: int, epoch: int) -> tuple[int, int]:
    """The producer id and epoch an instance uses once its EndTxn is answered: the bumped
    ones when this instance's end bumped them, else its own."""
    if record is not None and record.get("ended") == [producer_id, epoch] and "next" in record:
        return record["next"][0], record["next"][1]
    return producer_id, epoch


def on_admin_abort(tid: str, record: Record | None) -> tuple[str, Record | None]:
    """AbortTransaction: like a timeout's abort; (WAIT, None) when an abort is under way."""
    if record is None:
        raise UnknownTransactionalId(f"unknown transactional_id {tid!r}",
                                     transactional_id=tid)
    if record["state"] == ONGOING:
        return "write", aborting(record)
    if record["state"] == PREPARE_ABORT:
        return WAIT, None
    raise InvalidTxnState(f"transactional_id {tid!r} has no transaction to abort: it is "
                          f"{record['state']}", transactional_id=tid, state=record["state"])


def still_open(record: Record | None, producer_id: int, epoch: int, topic: str,
               partition: int) -> bool:
    """Whether the transaction whose batches (of ``producer_id`` at ``epoch``) a broker holds
    open on the partition will still be ended by the coordinator: ONGOING at that epoch with
    the partition added, or decided (PREPARE_*, at that epoch or the one its end bumped to)
    with it. Anything else (another epoch, a transaction that completed, a producer id no
    transactional_id holds) is a hanging transaction the broker aborts itself."""
    if record is None or record["producer_id"] != producer_id \
            or [topic, partition] not in record["partitions"]:
        return False
    if record["state"] == ONGOING:
        return record["epoch"] == epoch
    return record["state"] in PREPARING and epoch <= record["epoch"]


def completed(record: Record) -> Record:
    """A PREPARE_* record once every marker is written: COMPLETE_*, under the producer id
    and epoch its ending instance goes on with (``next``)."""
    done = {**fields_of(record), "state": COMPLETE_COMMIT
            if record["state"] == PREPARE_COMMIT else COMPLETE_ABORT}
    if "next" in record:
        done.update(producer_id=record["next"][0], epoch=record["next"][1],
                    next=record["next"], ended=record["ended"])
    return done


def timed_out(records: dict[str, Record], now_ms: int) -> list[str]:
    """The transactional ids whose transaction is ONGOING longer than its timeout."""
    return sorted(tid for tid, r in records.items()
                  if r["state"] == ONGOING and "check" not in r
                  and now_ms - r["began_ms"] > r["timeout_ms"])


def expired(records: dict[str, Record], now_ms: int, expiration_ms: int) -> list[str]:
    """The transactional ids with no transaction open, unchanged for ``expiration_ms``."""
    return sorted(tid for tid, r in records.items()
                  if r["state"] in IDLE and now_ms - r["updated_ms"] > expiration_ms)


def marker_retry_ms(failures: int) -> int:
    """How long a partition whose marker failed ``failures`` times in a row waits before the
    next try: doubling from 50 ms to 2 s (a leader election takes about a second)."""
    return min(MARKER_RETRY_FIRST_MS << min(max(failures - 1, 0), 16), MARKER_RETRY_MAX_MS)


def fields_of(record: Record) -> Record:
    """What a ``txn_write`` carries of a record (not its ``seq``/``updated_ms``, an end's
    ``ended``/``next``, nor a half message's ``check``: master/half_decisions.py)."""
    kept = {**{k: record[k] for k in ("producer_id", "epoch", "state", "partitions",
                                      "timeout_ms", "began_ms")},
            "offsets": record.get("offsets", [])}
    if record.get("oneshot"):
        kept["oneshot"] = True
    return kept
