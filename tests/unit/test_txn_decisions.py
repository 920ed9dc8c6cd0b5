"""The transaction coordinator's pure decisions (master/txn_decisions.py) and the replicated
records they become (master/state_txns.py): fencing, the state walk of init/add/end/abort,
the epoch running out, timeouts, expiry, the marker backoff; transitions the state machine
refuses whatever the coordinator asks."""
from __future__ import annotations

import pytest

from lib.errors import (
    ConcurrentTransactions,
    InvalidArgument,
    InvalidTxnState,
    ProducerFenced,
    UnknownTransactionalId,
)
from master import txn_decisions as d
from master.state import MetaState
from master.state_txns import MAX_EPOCH


def rec(state="EMPTY", pid=7, epoch=3, parts=(), began=0, timeout=1000, updated=0, seq=1):
    return {"producer_id": pid, "epoch": epoch, "state": state,
            "partitions": [list(p) for p in parts], "offsets": [], "timeout_ms": timeout,
            "began_ms": began, "updated_ms": updated, "seq": seq}


def no_new_id() -> int:
    raise AssertionError("no new producer id expected")


def test_the_first_instance_takes_a_new_id_and_the_next_ones_bump_the_epoch():
    step, new = d.on_init(None, 500, lambda: 42)
    assert step == "write" and (new["producer_id"], new["epoch"], new["state"]) == (42, 0, "EMPTY")
    for state in ("EMPTY", "COMPLETE_COMMIT", "COMPLETE_ABORT"):
        step, new = d.on_init(rec(state, parts=[("t", 0)]), 900, no_new_id)
        assert step == "write"
        assert (new["producer_id"], new["epoch"], new["partitions"], new["timeout_ms"]) == \
            (7, 4, [], 900)


def test_an_epoch_about_to_run_out_takes_a_new_producer_id():
    step, new = d.on_init(rec(epoch=MAX_EPOCH - 2), 500, no_new_id)
    assert new["epoch"] == MAX_EPOCH - 1, "the last epoch an instance gets"
    step, new = d.on_init(rec(epoch=MAX_EPOCH - 1), 500, lambda: 99)
    assert (new["producer_id"], new["epoch"]) == (99, 0)
    assert d.aborting(rec("ONGOING", epoch=MAX_EPOCH - 1))["epoch"] == MAX_EPOCH, \
        "the coordinator's abort still fences the last instance"
    assert d.aborting(rec("ONGOING", epoch=MAX_EPOCH))["epoch"] == MAX_EPOCH


def test_init_aborts_an_open_transaction_first_and_waits_for_one_ending():
    step, new = d.on_init(rec("ONGOING", parts=[("t", 1)], began=5), 500, no_new_id)
    assert step == "abort" and new["state"] == "PREPARE_ABORT" and new["epoch"] == 4
    assert new["partitions"] == [["t", 1]]
    for state in ("PREPARE_COMMIT", "PREPARE_ABORT"):
        assert d.on_init(rec(state), 500, no_new_id) == (d.WAIT, None)


def test_only_the_current_instance_passes():
    r = rec(pid=7, epoch=3)
    assert d.check_instance("t", r, 7, 3) is r
    with pytest.raises(ProducerFenced, match="newer instance of transactional_id 't'"):
        d.check_instance("t", r, 7, 2)
    with pytest.raises(ProducerFenced):
        d.check_instance("t", r, 6, 3)  # the id moved to a new producer id
    with pytest.raises(InvalidArgument, match="never handed out"):
        d.check_instance("t", r, 7, 4)
    with pytest.raises(UnknownTransactionalId, match="'t'"):
        d.check_instance("t", None, 7, 3)


def test_adding_partitions_begins_the_transaction_once_and_is_idempotent():
    new = d.on_add(rec("COMPLETE_COMMIT", parts=[("old", 0)]), [("b", 1), ("a", 0)], 100)
    assert new["state"] == "ONGOING" and new["began_ms"] == 100
    assert new["partitions"] == [["a", 0], ["b", 1]], "the last transaction's are gone"
    ongoing = rec("ONGOING", parts=[("a", 0), ("b", 1)], began=100)
    assert d.on_add(ongoing, [("a", 0)], 200) is None
    more = d.on_add(ongoing, [("a", 0), ("c", 2)], 200)
    assert more["partitions"] == [["a", 0], ["b", 1], ["c", 2]] and more["began_ms"] == 100
    assert d.on_add(rec("EMPTY"), [], 100) is None
    with pytest.raises(ConcurrentTransactions):
        d.on_add(rec("PREPARE_ABORT"), [("a", 0)], 100)


def test_offsets_join_the_transaction_and_the_later_offset_wins():
    new = d.on_add_offsets(rec("COMPLETE_COMMIT"), "g", [("in", 0, 5), ("in", 1, 9)], 100)
    assert new["state"] == "ONGOING" and new["began_ms"] == 100 and new["partitions"] == []
    assert new["offsets"] == [["g", "in", 0, 5], ["g", "in", 1, 9]]
    ongoing = {**rec("ONGOING", parts=[("out", 0)], began=100), "offsets": new["offsets"]}
    assert d.on_add_offsets(ongoing, "g", [("in", 0, 5)], 200) is None, "nothing new"
    more = d.on_add_offsets(ongoing, "g", [("in", 0, 7)], 200)
    assert more["offsets"] == [["g", "in", 0, 7], ["g", "in", 1, 9]]
    assert more["partitions"] == [["out", 0]] and more["began_ms"] == 100
    assert d.on_add_offsets(ongoing, "h", [("in", 0, 1)], 200)["offsets"][-1] == \
        ["h", "in", 0, 1]
    assert d.on_add(more, [("out", 1)], 300)["offsets"] == more["offsets"], "kept"
    assert d.on_add(rec("COMPLETE_ABORT"), [("out", 1)], 300)["offsets"] == [], \
        "a new transaction starts without the last one's"
    with pytest.raises(ConcurrentTransactions):
        d.on_add_offsets(rec("PREPARE_COMMIT"), "g", [("in", 0, 1)], 100)
    assert d.aborting(more)["offsets"] == more["offsets"], "an abort drops them pending"


def test_a_broker_is_told_which_transactions_the_coordinator_will_still_end():
    ongoing = rec("ONGOING", parts=[("a", 0)], began=1)
    assert d.still_open(ongoing, 7, 3, "a", 0)
    assert not d.still_open(ongoing, 7, 3, "a", 1), "a partition never added: hanging"
    assert not d.still_open(ongoing, 7, 2, "a", 0), "an older epoch's late batch"
    assert not d.still_open(ongoing, 8, 3, "a", 0), "another producer id"
    assert not d.still_open(None, 7, 3, "a", 0), "no transactional_id holds it"
    ending = {**rec("PREPARE_COMMIT", epoch=4, parts=[("a", 0)]), "ended": [7, 3]}
    assert d.still_open(ending, 7, 3, "a", 0), "decided: its markers are coming"
    assert not d.still_open(rec("COMPLETE_COMMIT", epoch=4, parts=[("a", 0)]), 7, 3, "a", 0)


def end(record, commit, pid=7, epoch=3, new_id=no_new_id):
    return d.on_end("t", record, pid, epoch, commit, new_id)


def test_ending_a_transaction_bumps_the_epoch_and_retrying_the_end():
    ongoing = rec("ONGOING", parts=[("a", 0)], began=1)
    step, new = end(ongoing, True)
    assert step == "write" and new["state"] == "PREPARE_COMMIT"
    assert new["epoch"] == 4, "the markers carry the bumped epoch: they fence epoch 3"
    assert (new["ended"], new["next"]) == ([7, 3], [7, 4])
    assert end(ongoing, False)[1]["state"] == "PREPARE_ABORT"
    step, new = end(rec("EMPTY"), True)
    assert step == "write" and new["state"] == "COMPLETE_COMMIT" and new["epoch"] == 3, \
        "nothing added: no marker, no bump"
    preparing = {**rec("PREPARE_COMMIT", epoch=4), "ended": [7, 3], "next": [7, 4]}
    assert end(preparing, True) == (d.WAIT, None), "the caller's retry, with its old epoch"
    done = {**d.completed(preparing), "updated_ms": 0, "seq": 2}
    assert (done["state"], done["producer_id"], done["epoch"]) == ("COMPLETE_COMMIT", 7, 4)
    assert end(done, True) == ("done", None)
    assert d.after_end(done, 7, 3) == (7, 4), "the retry learns the epoch to go on with"
    assert d.after_end(done, 7, 4) == (7, 4)
    with pytest.raises(InvalidTxnState, match="cannot abort .* it is COMPLETE_COMMIT"):
        end(done, False)
    with pytest.raises(InvalidTxnState, match="cannot commit .* it is PREPARE_ABORT"):
        end({**preparing, "state": "PREPARE_ABORT"}, True)
    with pytest.raises(ProducerFenced):
        end(done, True, epoch=2)
    aborted = d.completed(rec("PREPARE_ABORT", epoch=4))  # the coordinator's own abort
    assert aborted["state"] == "COMPLETE_ABORT" and "next" not in aborted
    with pytest.raises(ProducerFenced):  # the instance it fenced
        end({**aborted, "updated_ms": 0, "seq": 2}, True)


def test_an_end_at_the_last_epoch_moves_the_instance_to_a_new_producer_id():
    step, new = end(rec("ONGOING", epoch=MAX_EPOCH - 1, parts=[("a", 0)]), True,
                    epoch=MAX_EPOCH - 1, new_id=lambda: 99)
    assert new["epoch"] == MAX_EPOCH and new["next"] == [99, 0]
    done = d.completed(new)
    assert (done["producer_id"], done["epoch"]) == (99, 0)


def test_timeouts_expiry_and_backoff():
    records = {"late": rec("ONGOING", began=1000, timeout=500),
               "fine": rec("ONGOING", began=1000, timeout=5000),
               "idle": rec("COMPLETE_COMMIT", began=1000, timeout=1, updated=1000),
               "ending": rec("PREPARE_ABORT", began=1, timeout=1, updated=1)}
    assert d.timed_out(records, 1501) == ["late"]
    assert d.expired(records, 10_000, 5000) == ["idle"], "never one with a transaction open"
    assert [d.marker_retry_ms(n) for n in (1, 2, 3, 7, 50)] == [50, 100, 200, 2000, 2000]
    assert d.timeout_of(0, 60_000, 900_000) == 60_000
    assert d.timeout_of(2000, 60_000, 900_000) == 2000
    with pytest.raises(InvalidArgument, match="transaction_max_timeout_ms 900000"):
        d.timeout_of(900_001, 60_000, 900_000)


# -- the replicated records ----------------------------------------------------------------


@pytest.fixture
def state(tmp_path):
    s = MetaState(tmp_path / "meta", map_size=1 << 24)
    yield s
    s.close()


def write(meta, tid, seq, **record):
    fields = {k: v for k, v in rec(**record).items() if k not in ("seq", "updated_ms")}
    return meta.apply({"op": "txn_write", "time_ms": 50, "transactional_id": tid, "seq": seq,
                        "record": fields})


def test_records_are_written_whole_in_order_and_survive_a_reopen(tmp_path):
    s = MetaState(tmp_path / "m")
    assert write(s, "t", 0)["seq"] == 1
    assert write(s, "t", 1, state="ONGOING", parts=[("a", 0)], began=9)["seq"] == 2
    s.close()
    s = MetaState(tmp_path / "m")
    assert s.txn("t") == {**rec("ONGOING", parts=[("a", 0)], began=9), "updated_ms": 50,
                          "seq": 2}
    s.close()


def test_a_write_from_a_stale_read_is_refused(state):
    write(state, "t", 0)
    with pytest.raises(ConcurrentTransactions, match="changed meanwhile"):
        write(state, "t", 0)
    write(state, "t", 1, state="ONGOING", parts=[("a", 0)])
    with pytest.raises(ConcurrentTransactions):
        write(state, "t", 1, state="PREPARE_COMMIT", parts=[("a", 0)])


def test_the_state_machine_refuses_a_transition_the_coordinator_must_never_ask(state):
    with pytest.raises(InvalidTxnState, match="from None to ONGOING"):
        write(state, "t", 0, state="ONGOING")
    write(state, "t", 0)
    with pytest.raises(InvalidTxnState, match="from EMPTY to PREPARE_COMMIT"):
        write(state, "t", 1, state="PREPARE_COMMIT")
    with pytest.raises(InvalidTxnState, match="epoch 2 is older than 3"):
        write(state, "t", 1, epoch=2)
    write(state, "t", 1, state="ONGOING", parts=[("a", 0)])
    with pytest.raises(InvalidTxnState, match="keeps its producer id, partitions"):
        write(state, "t", 2, state="PREPARE_COMMIT", parts=[("a", 0), ("b", 0)])
    with pytest.raises(InvalidTxnState, match="keeps its producer id, partitions"):
        write(state, "t", 2, state="ONGOING", parts=[("b", 0)])
    write(state, "t", 2, state="PREPARE_ABORT", parts=[("a", 0)], epoch=4)
    with pytest.raises(InvalidTxnState, match="from PREPARE_ABORT to EMPTY"):
        write(state, "t", 3, epoch=5)
    with pytest.raises(InvalidArgument, match="bad state"):
        write(state, "t", 3, state="DONE")


def test_an_ending_instance_may_move_to_its_next_producer_id_and_no_other(state):
    write(state, "t", 0)
    write(state, "t", 1, state="ONGOING", parts=[("a", 0)])
    fields = {k: v for k, v in rec("PREPARE_COMMIT", parts=[("a", 0)], epoch=MAX_EPOCH).items()
              if k not in ("seq", "updated_ms")}
    state.apply({"op": "txn_write", "time_ms": 60, "transactional_id": "t", "seq": 2,
                 "record": {**fields, "ended": [7, MAX_EPOCH - 1], "next": [99, 0]}})
    with pytest.raises(InvalidTxnState, match="keeps its producer id"):
        write(state, "t", 3, state="COMPLETE_COMMIT", parts=[("a", 0)], pid=98, epoch=0)
    done = write(state, "t", 3, state="COMPLETE_COMMIT", parts=[("a", 0)], pid=99, epoch=0)
    assert (done["producer_id"], done["epoch"]) == (99, 0)
    with pytest.raises(InvalidArgument, match="bad next"):
        state.apply({"op": "txn_write", "time_ms": 60, "transactional_id": "u", "seq": 0,
                     "record": {**fields, "state": "EMPTY", "next": [0, 1]}})


def test_expiry_forgets_idle_ids_not_changed_since(state):
    write(state, "idle", 0)
    write(state, "open", 0)
    write(state, "open", 1, state="ONGOING", parts=[("a", 0)])
    gone = state.apply({"op": "txn_expire", "time_ms": 99,
                        "transactional_ids": ["idle", "open", "unknown"], "before_ms": 60})
    assert gone == ["idle"] and state.txn("idle") is None and state.txn("open") is not None
    write(state, "idle", 0)  # a new instance of it
    assert state.apply({"op": "txn_expire", "time_ms": 99, "transactional_ids": ["idle"],
                        "before_ms": 50}) == [], "changed at 50: not before 50"


def test_a_half_message_is_checked_back_a_bounded_number_of_times_then_rolled_back():
    from master import half_decisions as h

    half = {**h.on_half_begin("g", "t", 1, 9, 1000, 900_000, 500), "updated_ms": 0, "seq": 1}
    assert (half["state"], half["partitions"], half["oneshot"]) == ("ONGOING", [["t", 1]], True)
    assert h.checks_due({"x": half}, 1499) == [] and h.checks_due({"x": half}, 1500) == ["x"]
    assert d.timed_out({"x": {**half, "began_ms": 0, "timeout_ms": 1}}, 10**9) == [], \
        "a half message is never timed out: its checks decide"
    for n in range(1, 4):
        step, half = h.next_check(half, 2000 * n, 300, 3)
        assert step == "check" and half["check"]["checks"] == n
        assert half["check"]["next_ms"] == 2000 * n + 300
    step, last = h.next_check(half, 9000, 300, 3)
    assert step == h.ROLLBACK and last["state"] == "PREPARE_ABORT" and last["epoch"] == 1
    assert last["oneshot"] and "check" not in last


def test_a_checks_answer_commits_or_rolls_back_with_the_epoch_bumped_or_is_stale():
    from master import half_decisions as h

    half = {**h.on_half_begin("g", "t", 0, 9, 0, 900_000, 500), "updated_ms": 0, "seq": 1}
    step, new = h.on_check_result(half, 9, 0, "commit")
    assert step == "commit" and (new["state"], new["epoch"]) == ("PREPARE_COMMIT", 1)
    assert h.on_check_result(half, 9, 0, "rollback")[1]["state"] == "PREPARE_ABORT"
    assert h.on_check_result(half, 9, 0, "unknown") == ("unknown", None)
    assert h.on_check_result(half, 8, 0, "commit") == ("stale", None), "another producer id"
    assert h.on_check_result(None, 9, 0, "commit") == ("stale", None), "ended and forgotten"
    assert h.on_check_result({**half, "state": "PREPARE_ABORT"}, 9, 0, "commit")[0] == "stale"


def test_a_kafka_classic_end_keeps_the_epoch_and_the_next_transaction_goes_on_with_it():
    ongoing = rec("ONGOING", parts=[("a", 0)], began=1)
    step, new = d.on_end("tid", ongoing, 7, 3, True, no_new_id, keep_epoch=True)
    assert step == "write" and new["state"] == "PREPARE_COMMIT"
    assert new["epoch"] == 3, "the markers carry the producer's own epoch"
    done = {**d.completed(new), "updated_ms": 0, "seq": 2}
    assert (done["producer_id"], done["epoch"]) == (7, 3)
    assert d.after_end(done, 7, 3) == (7, 3)
    assert d.check_instance("tid", done, 7, 3) is done  # its next transaction: not fenced
    again = d.on_add(done, [("a", 1)], 5)
    assert again["state"] == "ONGOING" and "ended" not in again
