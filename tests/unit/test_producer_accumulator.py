"""Accumulator: per-partition batching, linger, one batch in flight per partition, retries at
the head, bounded memory. Pure in-process: no network."""
from __future__ import annotations

import sys
import threading
import time
from concurrent.futures import Future

import pytest

from lib.errors import ClientClosed, RequestTimedOut
from lib.producer.accumulator import Accumulator
from lib.records.encode import Pieces, encode_columns
from lib.types import TopicPartition

A0, A1 = TopicPartition("a", 0), TopicPartition("a", 1)


def _acc(batch_bytes=100, buffer_bytes=10_000, linger_s=0.05, max_block_s=0.1) -> Accumulator:
    return Accumulator(batch_bytes, buffer_bytes, linger_s, max_block_s)


def _sticky(tp: TopicPartition = A0, max_frame: int = 1 << 20) -> list:
    """The producer's sticky state of a topic: [partition, max frame bytes, open batch]."""
    return [tp, max_frame, None]


def _add(acc: Accumulator, tp: TopicPartition, size: int = 10) -> Future:
    return acc.append(tp, b"x" * size, 0, 0)


def _drain(acc: Accumulator, now: float | None = None):
    with acc.cond:
        return acc.drain(time.monotonic() if now is None else now)


def test_batch_waits_for_linger_then_is_drained():
    acc = _acc(linger_s=0.05)
    _add(acc, A0)
    ready, next_at = _drain(acc)
    assert ready == [] and next_at is not None
    ready, _ = _drain(acc, next_at)
    assert len(ready) == 1 and len(ready[0]) == 1 and ready[0].sealed


def test_full_batch_is_drained_without_waiting_for_linger():
    acc = _acc(batch_bytes=30, linger_s=60)
    for _ in range(4):
        _add(acc, A0)  # 3 fill the first batch, the 4th opens a second
    ready, _ = _drain(acc)
    assert [len(b) for b in ready] == [3]


def test_records_of_one_partition_stay_in_order_across_batches():
    acc = _acc(batch_bytes=20, linger_s=0)
    for i in range(5):
        acc.append(A0, bytes([i]) * 10, 0, 0)
    seen = []
    while True:
        ready, _ = _drain(acc)
        if not ready:
            break
        assert len(ready) == 1
        seen += ready[0].frames()
        acc.release(ready[0])
    assert seen == [bytes([i]) * 10 for i in range(5)]


def test_only_one_batch_per_partition_is_in_flight_but_partitions_go_in_parallel():
    acc = _acc(batch_bytes=10, linger_s=0)
    for _ in range(3):
        _add(acc, A0)
        _add(acc, A1)
    ready, _ = _drain(acc)
    assert sorted(b.tp for b in ready) == [A0, A1]
    assert _drain(acc)[0] == []
    acc.release(ready[0])
    again, _ = _drain(acc)
    assert [b.tp for b in again] == [ready[0].tp]


def test_drain_walks_only_partitions_with_batches_not_every_partition_ever_written():
    """10,000 topics each written once made every drain walk 10,000 empty queues (half the
    producer's time): a partition whose queue emptied leaves the walk until it gets a batch."""
    acc = _acc(batch_bytes=10, linger_s=0, buffer_bytes=1 << 20)
    tps = [TopicPartition(f"t{i}", 0) for i in range(500)]
    for tp in tps:
        _add(acc, tp)
    ready, _ = _drain(acc)
    assert len(ready) == 500
    for batch in ready:
        acc.release(batch)
    assert _drain(acc)[0] == [] and len(acc._queued) == 0  # pruned once found empty
    _add(acc, tps[7])
    acc.requeue(ready[3], 0.0)  # a retry queues its partition again too
    again, _ = _drain(acc)
    assert sorted(b.tp.topic for b in again) == ["t3", "t7"] and len(acc._queued) == 2


def test_requeued_batch_is_sent_again_before_later_batches_after_its_backoff():
    acc = _acc(batch_bytes=10, linger_s=0)
    _add(acc, A0)
    _add(acc, A0)
    (first,), _ = _drain(acc)
    now = time.monotonic()
    acc.requeue(first, now + 0.5)
    ready, next_at = _drain(acc, now)
    assert ready == [] and next_at == pytest.approx(now + 0.5)
    ready, _ = _drain(acc, now + 0.5)
    assert ready == [first]


def test_appends_never_join_a_batch_that_was_already_sent():
    acc = _acc(batch_bytes=100, linger_s=0)
    _add(acc, A0)
    (sent,), _ = _drain(acc)
    acc.requeue(sent, time.monotonic() + 10)
    _add(acc, A0)
    assert len(sent) == 1


def test_append_blocks_on_full_buffer_then_raises_after_max_block():
    acc = _acc(batch_bytes=10, buffer_bytes=20, max_block_s=0.2)
    _add(acc, A0)
    _add(acc, A0)
    start = time.monotonic()
    with pytest.raises(RequestTimedOut, match="buffer full"):
        _add(acc, A0)
    assert 0.15 <= time.monotonic() - start < 2


def test_blocked_append_proceeds_when_a_batch_is_released():
    acc = _acc(batch_bytes=10, buffer_bytes=20, linger_s=0, max_block_s=5)
    _add(acc, A0)
    _add(acc, A1)
    ready, _ = _drain(acc)
    done = threading.Event()
    thread = threading.Thread(target=lambda: (_add(acc, A0), done.set()))
    thread.start()
    assert not done.wait(0.1)
    acc.release(ready[0])
    assert done.wait(5)
    thread.join(5)
    assert acc.used_bytes == 20


def test_an_idle_partition_is_claimed_for_the_caller_to_send_and_a_busy_one_is_not():
    acc = _acc(linger_s=60)
    claim = acc.claim(A0, 10)
    assert claim and acc.used_bytes == 10 and acc.claims() == {claim}
    assert _drain(acc)[0] == []  # in flight: the sender takes nothing of A0
    later = _add(acc, A0)
    assert acc.claim(A0, 10) == 0  # A0 is busy: the record is queued behind, in order
    acc.unclaim(claim, A0, 10)
    assert acc.claims() == set() and acc.used_bytes == 10
    ready, _ = _drain(acc, time.monotonic() + 120)
    assert [b.tp for b in ready] == [A0] and not later.done()


def test_a_claim_is_refused_behind_queued_records_over_the_buffer_or_closed():
    acc = _acc(buffer_bytes=25, linger_s=60)
    _add(acc, A1)
    assert acc.claim(A1, 10) == 0  # A1 has a batch queued
    assert acc.claim(A0, 20) == 0  # 30 of 25 bytes: the queued path waits for room instead
    acc.closed = True
    assert acc.claim(A0, 1) == 0


def test_a_failed_claimed_send_becomes_an_in_flight_batch_that_holds_its_bytes():
    acc = _acc(linger_s=0)
    claim = acc.claim(A0, 10)
    future, batch = acc.adopt(claim, A0, b"x" * 10, 0, 7)
    assert acc.claims() == set() and acc.used_bytes == 10
    assert batch.sealed and batch.frames() == [b"x" * 10] and batch.timestamps == [7]
    assert _drain(acc)[0] == []  # still in flight: the sender retries it, nothing overtakes
    acc.release(batch)
    assert acc.used_bytes == 0 and not future.done()


def test_wait_claims_returns_once_the_claims_it_was_given_are_over():
    acc = _acc()
    first = acc.claim(A0, 10)
    assert not acc.wait_claims({first}, 0.05)
    threading.Timer(0.05, acc.unclaim, (first, A0, 10)).start()
    second = acc.claim(A1, 10)  # a later claim does not hold up a flush that began before it
    assert acc.wait_claims({first}, 5)
    acc.unclaim(second, A1, 10)


def test_release_twice_frees_the_bytes_once():
    acc = _acc(linger_s=0)
    _add(acc, A0)
    (batch,), _ = _drain(acc)
    acc.release(batch)
    acc.release(batch)
    assert acc.used_bytes == 0 and acc.incomplete() == [] and batch.finished


def test_a_released_batch_lets_go_of_its_values_though_its_topic_keeps_it():
    """The producer keeps each topic's last batch (its sticky partition's); it held the
    request, and so every value, until the topic's next record."""
    acc = _acc(batch_bytes=10_000, linger_s=0)
    sticky = _sticky()
    value = bytes(range(256)) * 16  # big enough to be referenced, not copied, by its frame
    held = sys.getrefcount(value)
    acc.add_value(sticky, value, time.time_ns())
    (batch,), _ = _drain(acc)
    batch.encode()
    batch.payload = Pieces(list(batch.buf), 0)  # what the sender's seal makes of it
    assert sys.getrefcount(value) > held
    acc.release(batch)
    assert sticky[2] is batch and sys.getrefcount(value) == held


def test_a_record_after_its_topics_open_batch_was_aborted_goes_into_a_new_batch():
    """The sender fails every queued batch when its thread dies: a send() that still holds
    one as its topic's open batch must not add to it (it is failed, its values dropped)."""
    acc = _acc(batch_bytes=10_000, linger_s=60)
    sticky = _sticky()
    acc.add_value(sticky, b"first", time.time_ns())
    aborted = acc.abort_queued()
    assert aborted == [sticky[2]]
    acc.release(aborted[0], in_flight=False)
    future = acc.add_value(sticky, b"second", time.time_ns())
    assert future is not None and sticky[2] is not aborted[0] and not future.done()
    (batch,), _ = _drain(acc, time.monotonic() + 120)
    assert batch is sticky[2] and batch.frames()[0].endswith(b"second")


def test_message_larger_than_the_whole_buffer_is_refused_at_once():
    acc = _acc(buffer_bytes=50, max_block_s=10)
    start = time.monotonic()
    with pytest.raises(RequestTimedOut, match="larger than the whole producer buffer"):
        _add(acc, A0, size=51)
    assert time.monotonic() - start < 1


def test_closed_accumulator_refuses_appends_and_ignores_linger():
    acc = _acc(linger_s=60)
    _add(acc, A0)
    acc.closed = True
    with pytest.raises(ClientClosed):
        _add(acc, A0)
    assert len(_drain(acc)[0]) == 1


def test_plain_appends_are_the_codec_frames_and_mixed_batches_keep_tag_columns_aligned():
    from lib.produce_wire import produce_request
    from lib.records import (
        FRAME_HEADER_SIZE,
        Record,
        batch_head,
        encode_frame,
        parse_batch,
        plain_frame,
        tag_hash,
    )

    acc = _acc(batch_bytes=10_000, linger_s=0)
    acc.add(A0, plain_frame(b"first", None, 11), FRAME_HEADER_SIZE + 5, 0, 11)  # send()'s pieces
    tagged = encode_frame(Record(b"second", b"k", "red", {}, 12))
    acc.append(A0, tagged, tag_hash("red"), 12)
    acc.add(A0, plain_frame(b"", None, 13), FRAME_HEADER_SIZE, 0, 13)
    (batch,), _ = _drain(acc)
    assert batch.frames() == [encode_frame(Record(b"first", timestamp=11)), tagged,
                              encode_frame(Record(b"", timestamp=13))]
    assert batch.tag_hashes == [0, tag_hash("red"), 0]
    head = batch_head(batch.buf, batch.sizes, batch.tag_hashes, batch.timestamps)
    view = parse_batch(head + bytes(batch.buf))  # checks the crc over the joined pieces
    assert view.count == 3 and view.tag_hashes.tolist() == [0, tag_hash("red"), 0]
    assert view.timestamps.tolist() == [11, 12, 13]
    assert len(produce_request(A0, head, batch.buf)) > len(head) + len(batch.buf)


def test_plain_values_are_encoded_when_sealed_byte_for_byte_as_send_encodes_them():
    from lib.records import Record, batch_head, encode_frame, parse_batch

    acc = _acc(batch_bytes=10_000, linger_s=0)
    values = [b"a", b"", b"c" * 300]
    sticky = _sticky()
    for i, value in enumerate(values):
        future = acc.add_value(sticky, value, (1000 + i) * 1_000_000)  # ns; differ
    (drained,), _ = _drain(acc)
    assert drained is sticky[2] and drained.values == values and len(drained) == 3
    assert drained.frames() == [encode_frame(Record(v, timestamp=1000 + i))
                                for i, v in enumerate(values)]
    head = batch_head(drained.buf, drained.sizes, None, drained.timestamps)
    assert parse_batch(head + b"".join(drained.buf)).timestamps.tolist() == [1000, 1001, 1002]
    assert future._index == 2


def test_a_record_of_the_other_kind_opens_a_batch_behind_and_the_first_takes_no_more():
    acc = _acc(batch_bytes=10_000, linger_s=60)
    sticky = _sticky()
    acc.add_value(sticky, b"p1", 1)
    plain = sticky[2]
    _add(acc, A0)  # an encoded frame: may not join the plain batch (nor go ahead of it)
    acc.add_value(sticky, b"p2", 2)
    again = sticky[2]
    assert plain.sealed and again is not plain and again.values == [b"p2"]
    with acc.cond:
        acc.flushing = 1
    order = []
    while True:
        ready, _ = _drain(acc)
        if not ready:
            break
        (batch,) = ready
        order.append(batch.values if batch.values is not None else len(batch))
        acc.release(batch)
    assert order == [[b"p1"], 1, [b"p2"]]


def test_plain_values_respect_the_batch_size_the_buffer_and_close():
    acc = _acc(batch_bytes=40, buffer_bytes=100, linger_s=60, max_block_s=0.05)
    sticky = _sticky(max_frame=75)
    assert acc.add_value(sticky, b"x" * 5, 1) is not None  # 35 bytes framed
    first = sticky[2]
    assert acc.add_value(sticky, b"x" * 5, 1) is None  # 70 > 40: full, nothing appended
    assert first.values == [b"x" * 5] and sticky[2] is first and not first.sealed
    assert acc.add_value(sticky, b"x" * 46, 1) is None  # 76 > the 75-byte max frame
    sticky = _sticky(max_frame=75)  # the producer's next sticky partition: a new batch
    assert acc.add_value(sticky, b"x" * 5, 1) is not None and sticky[2] is not first
    with pytest.raises(RequestTimedOut):
        acc.add_value(_sticky(max_frame=75), b"x" * 40, 1)  # 70 + 70 > the 100-byte buffer
    acc.closed = True
    with pytest.raises(ClientClosed):
        acc.add_value(_sticky(), b"x", 1)


def test_a_direct_send_that_raises_unexpectedly_frees_its_partition():
    """send_sync's direct path: an exception that is not a send failure (a bug, an
    interrupt) reaches the caller, and the partition and its bytes are not left claimed."""
    from types import SimpleNamespace

    from lib.producer.sender import Sender

    def exploding(*_args, **_kwargs):
        raise RuntimeError("boom")
    route = SimpleNamespace(count=1, topic_id=1, address=lambda _p: "127.0.0.1:1",
                            leader=lambda _p: "127.0.0.1:1")
    routes = SimpleNamespace(get=lambda _topic: route)
    pool = SimpleNamespace(get_bare=lambda _a: SimpleNamespace(
        unary_unary=lambda *_a, **_k: exploding), auth_metadata=lambda: (), tls=None)
    acc = _acc()
    sender = Sender(acc, routes, pool, retries=0, retry_backoff_s=0, request_timeout_s=1,
                    new_producer_id=None, client_id="t")
    claim = acc.claim(A0, 40)
    with pytest.raises(RuntimeError, match="boom"):
        sender.send_direct(claim, A0, b"x" * 40, 0, 1)
    assert acc.claims() == set() and acc.used_bytes == 0
    assert acc.claim(A0, 40)  # free again


def test_a_ready_batch_takes_the_lingering_batches_of_its_broker_along():
    """Kafka's drain: once one batch goes to a broker, the head batches lingering on the
    other idle partitions it leads go in the same call; other brokers' keep lingering, and a
    batch backing off after a failure waits for its backoff."""
    acc = _acc(batch_bytes=30, linger_s=60)
    b0, b1, c0 = TopicPartition("b", 0), TopicPartition("b", 1), TopicPartition("c", 0)
    leaders = {A0: "x", A1: "x", b0: "x", b1: "y", c0: None}
    for _ in range(3):
        _add(acc, A0)  # full: ready now
    for tp in (A1, b0, b1, c0):
        _add(acc, tp)  # lingering
    later = time.monotonic() + 31  # before the linger ends
    with acc.cond:
        ready, next_at = acc.drain(later, leaders.get)
    assert sorted(b.tp for b in ready) == sorted([A0, A1, b0])
    assert next_at is not None  # b1 and c0 still linger
    backing_off = ready[1]
    acc.requeue(backing_off, later + 60)
    for _ in range(3):
        _add(acc, A0)
    acc.release(ready[0])  # A0 free again: its new batch is full
    with acc.cond:
        again, _ = acc.drain(later, leaders.get)
    assert [b.tp for b in again] == [A0], "a batch backing off was taken early"


def _run(acc: Accumulator, tp: TopicPartition, values: list[bytes], tags=None):
    """``send_batch``'s hand-off: frames encoded together, then append_run."""
    run = encode_columns(values, 1_000, tags=tags)
    assert (run.tag_hashes is None) == (tags is None)
    return acc.append_run(tp, run.frames, run.sizes, run.tag_hashes, 1_000), run


def test_runs_queued_behind_a_call_in_flight_join_one_batch_until_it_is_full():
    # Without joining, each send_batch run was a batch of its own: a partition with a call
    # in flight then sent one run per round trip (send_batch of 500 x 1 KiB at 0.7 of send()).
    acc = _acc(batch_bytes=4_000, linger_s=60)
    first, _ = _run(acc, A0, [b"a" * 100] * 5)
    assert [b for b, _, _ in first] == [b for b in _drain(acc, time.monotonic() + 120)[0]]
    plain, run_plain = _run(acc, A0, [b"b" * 100] * 4)
    tagged, run_tagged = _run(acc, A0, [b"c" * 100] * 3, tags=["t", "", "t"])
    (batch, start, count), = plain
    assert tagged == [(batch, 4, 3)] and start == 0 and count == 4
    assert len(batch) == 7 and batch.size == len(run_plain.frames) + len(run_tagged.frames)
    assert bytes(b"".join(batch.buf)) == run_plain.frames + run_tagged.frames
    assert batch.tag_hashes.tolist() == [0] * 4 + run_tagged.tag_hashes.tolist()
    assert batch.sizes.tolist() == run_plain.sizes.tolist() + run_tagged.sizes.tolist()
    # Full: a run that does not fit opens a batch behind it, and the next runs join that one.
    frame = len(run_plain.frames) // 4
    fills = 4_000 // frame - 6  # 7 + fills frames are over 4,000 bytes, fills + 1 are not
    big, _ = _run(acc, A0, [b"d" * 100] * fills)
    (behind, start, _), = big
    assert behind is not batch and start == 0
    assert _run(acc, A0, [b"e" * 100])[0] == [(behind, fills, 1)]
    assert len(batch) == 7


def test_a_run_never_joins_a_batch_that_was_sent():
    # A batch sent once keeps its bytes and sequence for its retries: back at the head of
    # its partition after a failure, it takes no more records.
    acc = _acc(batch_bytes=4_000, linger_s=60)
    (sent, _, _), = _run(acc, A0, [b"a" * 100] * 2)[0]
    assert _drain(acc, time.monotonic() + 120)[0] == [sent] and not sent.joinable
    acc.requeue(sent, time.monotonic() + 60)
    (other, start, _), = _run(acc, A0, [b"b" * 100])[0]
    assert other is not sent and start == 0 and len(sent) == 2
