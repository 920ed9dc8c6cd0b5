"""Loss accounting of load runs (load/ledger.py): stamps, ledgers saved by two processes and
merged, and each kind of fault counted where it happened (lost, duplicated, out of order,
unconsumed, redelivered)."""
from __future__ import annotations

import numpy as np

from load.ledger import STAMP_BYTES, Ledger, read_stamp, stamp, verify

FILL = b"f" * 1024


def test_a_stamp_round_trips_and_other_messages_have_none():
    producer = bytes(range(16))
    value = stamp(producer, 12345, 100, FILL)
    assert len(value) == 100 and read_stamp(value) == (producer, 12345)
    assert len(stamp(producer, 1, STAMP_BYTES, FILL)) == STAMP_BYTES
    assert read_stamp(b"hello") is None and read_stamp(b"x" * 64) is None


def _log_of(entries):
    """{partition: columns} from (partition, offset, producer number, seq) tuples."""
    out = {}
    for p in {e[0] for e in entries}:
        rows = sorted(e[1:] for e in entries if e[0] == p)
        out[p] = {k: np.array([r[i] for r in rows], np.int64)
                  for i, k in enumerate(("offset", "producer", "seq"))}
    return out


def test_verify_counts_each_fault_in_its_partition(tmp_path):
    one, two = Ledger(), Ledger()  # two Locust processes
    a, b = one.new_producer(), two.new_producer()
    for seq in range(4):  # a: partition 0 offsets 0..3
        one.add_acked("t", 0, seq, a, seq)
    for seq in range(3):  # b: partition 1 offsets 0..2
        two.add_acked("t", 1, seq, b, seq)
    one.add_sent(4)
    two.add_sent(4)
    two.add_failed(1)
    for seq in range(4):
        one.add_received("g", "t", 0, seq, stamp(a, seq, 64, FILL))
    one.add_received("g", "t", 0, 1, stamp(a, 1, 64, FILL))  # redelivered
    two.add_received("g", "t", 1, 0, stamp(b, 0, 64, FILL))
    assert not two.add_received("g", "t", 1, 9, b"not ours")
    for ledger in (one, two):
        ledger.save(tmp_path)

    def read_log(topic, producers):
        assert topic == "t" and set(producers) == {a, b}
        pa, pb = producers[a], producers[b]
        # partition 0 holds a's four messages, then a retry of seq 2 stored again;
        # partition 1 lost b's offset 2 and holds b's seq 1 before seq 0
        return _log_of([(0, 0, pa, 0), (0, 1, pa, 1), (0, 2, pa, 2), (0, 3, pa, 3),
                        (0, 4, pa, 2), (1, 0, pb, 1), (1, 1, pb, 0)])

    result = verify(tmp_path, read_log)
    p0, p1 = result["partitions"]["t[0]"], result["partitions"]["t[1]"]
    assert p0 == {"acknowledged": 4, "stored": 5, "lost": 0, "duplicated": 1, "out_of_order": 0}
    assert p1["lost"] == 3  # offsets 0 and 1 hold other stamps, offset 2 is missing
    assert p1["out_of_order"] == 1 and p1["duplicated"] == 0
    assert (result["produced"], result["failed_sends"], result["acknowledged"]) == (8, 1, 7)
    assert result["consumers"]["g/t"] == {"consumed": 5, "redelivered": 1, "unconsumed": 2}
    assert not result["ok"] and len(result["failures"]) == 2
    assert "t[1]: 3 acknowledged message(s) lost" in result["failures"]


def test_loss_on_an_async_topic_under_faults_is_reported_not_failed(tmp_path):
    ledger = Ledger()
    p = ledger.new_producer()
    ledger.add_acked("fast", 0, 0, p, 0)
    ledger.save(tmp_path)
    empty = {0: {k: np.empty(0, np.int64) for k in ("offset", "producer", "seq")}}
    relaxed = verify(tmp_path, lambda topic, producers: empty, loss_allowed=True)
    assert relaxed["lost"] == 1 and relaxed["ok"]
    strict = verify(tmp_path, lambda topic, producers: empty, sync_topics={"fast"},
                    loss_allowed=True)
    assert not strict["ok"]


def test_an_empty_ledger_merges_as_nothing(tmp_path):
    """A Locust worker whose user sent nothing in a short run still saves its ledger (one
    file per worker proves each stopped cleanly); merged, it adds nothing."""
    full, idle = Ledger(), Ledger()
    a = full.new_producer()
    idle.new_producer()
    for seq in range(3):
        full.add_acked("t", 0, seq, a, seq)
    full.add_sent(3)
    full.save(tmp_path)
    idle.save(tmp_path)
    assert len(list(tmp_path.glob("ledger-*.npz"))) == 2

    def read_log(topic, producers):
        return _log_of([(0, seq, producers[a], seq) for seq in range(3)])

    result = verify(tmp_path, read_log)
    assert result["ok"] and (result["produced"], result["acknowledged"], result["lost"]) == \
        (3, 3, 0)
