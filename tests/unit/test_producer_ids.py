"""Producer ids: the replicated counter (master/state_producers.py) and the active master's
blocks (master/producer_ids.py): never the same id twice, >= 1, a fresh block per leadership."""
from __future__ import annotations

import threading

import pytest

from lib.errors import InvalidArgument, NotLeader, StorageError, Unavailable
from master.producer_ids import ProducerIdBlocks
from master.state import MetaState
from master.state_producers import LAST_ID


def reserve(state: MetaState, count, index: int = 0, **extra) -> dict:
    return state.apply({"op": "reserve_producer_ids", "time_ms": 1, "count": count, **extra},
                       index=index)


def test_blocks_follow_one_another_from_1_and_survive_a_reopen(tmp_path):
    s = MetaState(tmp_path / "m")
    assert s.next_producer_id() == 1  # a data dir without the key (an older version's) too
    assert reserve(s, 1000) == {"first": 1, "count": 1000}
    assert reserve(s, 5, index=7) == {"first": 1001, "count": 5}
    assert reserve(s, 5, index=7) is None  # a replay of the same log position: skipped
    s.close()
    s = MetaState(tmp_path / "m")
    assert s.next_producer_id() == 1006
    assert reserve(s, 1) == {"first": 1006, "count": 1}
    s.close()


@pytest.mark.parametrize("count", [0, -1, 1 << 21, "5", True, None, 2.5])
def test_a_bad_block_size_is_refused_and_changes_nothing(tmp_path, count):
    s = MetaState(tmp_path / "m")
    with pytest.raises(InvalidArgument):
        reserve(s, count)
    assert s.next_producer_id() == 1
    s.close()


def test_a_reservation_of_a_deposed_leadership_is_refused(tmp_path):
    s = MetaState(tmp_path / "m")
    s.apply({"op": "lead", "time_ms": 1, "after": 0})
    s.apply({"op": "lead", "time_ms": 2, "after": 1})
    with pytest.raises(NotLeader):
        reserve(s, 10, epoch=1)
    assert reserve(s, 10, epoch=2)["first"] == 1
    s.close()


def test_the_last_63_bit_id_is_handed_out_and_then_none(tmp_path):
    s = MetaState(tmp_path / "m")
    s.apply({"op": "reserve_producer_ids", "time_ms": 1, "count": 1})
    with s._env.begin(write=True) as txn:  # jump near the end: 2**63 ids are never spent
        txn.put(b"next_producer_id", str(LAST_ID - 1).encode(), db=s._meta_db)
    s.close()
    s = MetaState(tmp_path / "m")
    assert reserve(s, 2) == {"first": LAST_ID - 1, "count": 2}
    with pytest.raises(StorageError, match="every 63-bit producer id"):
        reserve(s, 1)
    s.close()


def test_the_counter_travels_in_a_snapshot(tmp_path):
    a, b = MetaState(tmp_path / "a"), MetaState(tmp_path / "b")
    reserve(a, 300, index=1)
    with open(tmp_path / "copy.mdb", "wb") as f:
        a.copy_to(f.fileno())
    b.restore_from(tmp_path / "copy.mdb")
    assert b.next_producer_id() == 301 and reserve(b, 1)["first"] == 301
    a.close()
    b.close()


class FakeMaster:
    """A replicated counter and a leadership epoch, as master/server.py gives the blocks."""

    def __init__(self) -> None:
        self.next, self.epoch, self.reservations = 1, 1, 0
        self.fail: Exception | None = None

    def reserve(self, count: int) -> int:
        if self.epoch is None:
            raise NotLeader("standby", leader="h:1")
        if self.fail is not None:
            raise self.fail
        first, self.next = self.next, self.next + count
        self.reservations += 1
        return first


def test_ids_come_from_memory_one_reservation_per_block():
    m = FakeMaster()
    blocks = ProducerIdBlocks(m.reserve, lambda: m.epoch, block_size=10)
    assert [blocks.take() for _ in range(25)] == list(range(1, 26))
    assert m.reservations == 3


def test_a_new_leadership_skips_the_rest_of_the_old_block():
    m = FakeMaster()
    blocks = ProducerIdBlocks(m.reserve, lambda: m.epoch, block_size=10)
    before = [blocks.take() for _ in range(3)]
    m.epoch = 2  # a failover and back (or a re-election of this master)
    after = [blocks.take() for _ in range(3)]
    assert before == [1, 2, 3] and after == [11, 12, 13]


def test_a_failed_reservation_hands_out_nothing_and_the_next_call_reserves_again():
    m = FakeMaster()
    blocks = ProducerIdBlocks(m.reserve, lambda: m.epoch, block_size=2)
    assert [blocks.take(), blocks.take()] == [1, 2]
    m.fail = Unavailable("no quorum")
    with pytest.raises(Unavailable):
        blocks.take()
    m.fail, m.next = None, 7  # the timed-out reservation committed later: 3..6 skipped
    assert blocks.take() == 7
    m.epoch = None
    with pytest.raises(NotLeader):
        blocks.take()


def test_threads_taking_at_once_never_get_the_same_id():
    m = FakeMaster()
    blocks = ProducerIdBlocks(m.reserve, lambda: m.epoch, block_size=7)
    got: list[list[int]] = [[] for _ in range(8)]

    def run(out: list[int]) -> None:
        for _ in range(500):
            out.append(blocks.take())

    threads = [threading.Thread(target=run, args=(out,)) for out in got]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [i for out in got for i in out]
    assert sorted(ids) == list(range(1, 4001))
    assert m.reservations == -(-4000 // 7)
